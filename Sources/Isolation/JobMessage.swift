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
