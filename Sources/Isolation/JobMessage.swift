import Pipeline

/// What the server sends a `run-job` child: one JSON line on its standard input.
public struct JobRequest: Sendable, Codable {
    public enum Kind: String, Sendable, Codable {
        /// Transcode `input` to `output` with `settings`.
        case transcode
        /// Read `input`'s tracks (an upload being stored).
        case probe
    }

    public var kind: Kind
    public var input: String
    public var output: String?
    public var settings: TranscodeSettings?
    /// Path of the watermark image the settings name (the child knows nothing of uploads).
    public var watermark: String?
    public var limits: MediaLimits?
    /// The job's checkpoint folder (a transcode resumes from what it holds, and keeps adding to it).
    public var checkpoint: String?

    public init(kind: Kind, input: String, output: String? = nil, settings: TranscodeSettings? = nil,
                watermark: String? = nil, limits: MediaLimits? = nil) {
        self.kind = kind
        self.input = input
        self.output = output
        self.settings = settings
        self.watermark = watermark
        self.limits = limits
    }
}

/// One JSON line a `run-job` child writes on its standard output: progress while it works, then exactly one of
/// `result`, `tracks` or `error`.
public struct JobMessage: Sendable, Codable {
    public struct Failure: Sendable, Codable {
        public var code: String
        public var message: String

        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    public var progress: TranscodeProgress?
    /// The child's data size with that progress, bytes (what its memory limit counts).
    public var dataBytes: Int?
    public var result: TranscodeResult?
    public var tracks: [Track]?
    public var error: Failure?

    public init(progress: TranscodeProgress? = nil, dataBytes: Int? = nil, result: TranscodeResult? = nil,
                tracks: [Track]? = nil, error: Failure? = nil) {
        self.progress = progress
        self.dataBytes = dataBytes
        self.result = result
        self.tracks = tracks
        self.error = error
    }
}

extension JobMessage {
    /// The message with every number within what a real transcode or probe can give: a child is trusted with nothing
    /// (one taken over by a hostile file writes what it likes), and an answer of `framesEncoded` 2^63 − 1 trapped
    /// the server's sum of frames encoded, ending the whole server; a track lasting 1e300 s would have trapped the
    /// API's count of thumbnails. A track's names are cut at `maxNameLength` and the tracks at `maxTracks`: one
    /// codec name of 12 MiB was stored with its upload and repeated in every listing of the jobs made from it (63 MB,
    /// the server at 504 MB). Other strings and the output's files are checked where they are used.
    public func bounded() -> JobMessage {
        var message = self
        message.progress = progress.map(Self.bounded)
        message.dataBytes = dataBytes.map { Self.clamp($0, Self.maxCount) }
        message.result = result.map { result in
            var result = result
            result.size = Self.clamp(result.size, Self.maxCount)
            result.tracks = result.tracks.prefix(Self.maxTracks).map(Self.bounded)
            result.duration = Self.seconds(result.duration)
            result.framesEncoded = Self.clamp(result.framesEncoded, Self.maxCount)
            result.elapsed = Self.seconds(result.elapsed)
            result.resumedFrom = result.resumedFrom.map(Self.seconds)
            return result
        }
        message.tracks = tracks.map { $0.prefix(Self.maxTracks).map(Self.bounded) }
        return message
    }

    /// Tracks a file may have, as the reader gives them: more than any real file (a disc's 40 subtitle tracks).
    static let maxTracks = 1024
    /// Unicode scalars of a track's names (codec, profile, layout, pixel format, HDR): FFmpeg's longest is a layout
    /// of named channels, about 4 each.
    static let maxNameLength = 256

    /// Counts and sizes: 2^48 (a quarter of a petabyte, nine years of frames at a million a second).
    static let maxCount = 1 << 48
    /// Times, either way of zero: what the pipeline reads at most (about 570 years).
    static let maxSeconds = Double(1 << 54) / 1e6

    private static func clamp(_ value: Int, _ limit: Int) -> Int { min(max(value, 0), limit) }

    /// A length of time in seconds, from 0 to `maxSeconds` (not a number: 0).
    private static func seconds(_ value: Double) -> Double { value.isNaN ? 0 : min(max(value, 0), maxSeconds) }

    private static func bounded(_ progress: TranscodeProgress) -> TranscodeProgress {
        var progress = progress
        progress.presentationTime = seconds(progress.presentationTime)
        progress.duration = seconds(progress.duration)
        progress.framesEncoded = clamp(progress.framesEncoded, maxCount)
        progress.elapsed = seconds(progress.elapsed)
        progress.resumedFrom = progress.resumedFrom.map(seconds)
        progress.finishing = progress.finishing.map { clamp($0, maxCount) }
        progress.verifying = progress.verifying.map { clamp($0, maxCount) }
        return progress
    }

    private static func bounded(_ track: Track) -> Track {
        var track = track
        track.index = clamp(track.index, 1 << 16)
        track.width = track.width.map { clamp($0, 1 << 20) }
        track.height = track.height.map { clamp($0, 1 << 20) }
        // A quarter turn, as the reader gives it.
        track.rotation = track.rotation.map { (($0 % 360 + 360) % 360) / 90 * 90 }
        track.frameRate = track.frameRate.map { $0.isNaN ? 0 : min(max($0, 0), 1e6) }
        track.duration = track.duration.map(seconds)
        track.sampleRate = track.sampleRate.map { clamp($0, 1 << 24) }
        track.channels = track.channels.map { clamp($0, 1 << 16) }
        track.bitRate = track.bitRate.map { clamp($0, maxCount) }
        track.dolbyVisionProfile = track.dolbyVisionProfile.map { clamp($0, 255) }
        // Read as a number by the geometry (`Track.sampleAspectValue`): "inf:1" trapped its size's conversion.
        track.sampleAspectRatio = track.sampleAspectRatio.flatMap(ratio)
        // Counted in Unicode scalars: a character may hold any number of them (a letter and a million combining
        // marks is one), and counted as characters the cut let 2 MB through.
        func name(_ text: String) -> String {
            text.unicodeScalars.count <= maxNameLength ? text : String(String.UnicodeScalarView(text.unicodeScalars.prefix(maxNameLength)))
        }
        track.codec = name(track.codec)
        track.profile = track.profile.map(name)
        track.channelLayout = track.channelLayout.map(name)
        track.pixelFormat = track.pixelFormat.map(name)
        track.hdr = track.hdr.map(name)
        return track
    }

    /// `text` when it is a ratio FFmpeg gives (`n:d`, two whole numbers from 1 to 2^31 − 1) from 1/1000 to 1000,
    /// else nil (square pixels).
    private static func ratio(_ text: String) -> String? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false).map { part -> Int? in
            guard (1...10).contains(part.count), part.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(part),
                  (1...Int(Int32.max)).contains(value) else { return nil }
            return value
        }
        guard parts.count == 2, let numerator = parts[0], let denominator = parts[1],
              (0.001...1000).contains(Double(numerator) / Double(denominator)) else { return nil }
        return text
    }
}
