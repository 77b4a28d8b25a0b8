import Foundation

/// Everything that describes an output: container, and what becomes of the video and audio tracks.
///
/// The JSON form is what the CLI and the HTTP API accept: `{"container": "mp4", "video": {...} | "copy" | null,
/// "audio": {...} | "copy" | null, "preset": "720p"}`. Every key is optional; unknown keys are refused.
public struct TranscodeSettings: Sendable, Equatable, Codable {
    /// Output file type; mp4 by default.
    public var container: FileType
    public var video: TrackChoice<VideoSettings>
    public var audio: TrackChoice<AudioSettings>
    /// Effects applied to the decoded source before scaling and encoding.
    public var filters: FilterSettings?
    /// `hls` only: the video ladder (nil: `auto`). Each rung starts from `video`.
    public var renditions: Renditions?
    /// `hls` only: target seconds of each segment; default 6.
    public var segmentDuration: Double?
    /// Thumbnails, storyboard and poster, taken from the same decode.
    public var thumbnails: ThumbnailSettings?

    /// Default segment duration of a ladder, in seconds.
    static let defaultSegmentDuration = 6.0

    public init(container: FileType = .mp4, video: TrackChoice<VideoSettings> = .encode(VideoSettings()),
                audio: TrackChoice<AudioSettings> = .encode(AudioSettings()), filters: FilterSettings? = nil) {
        self.container = container
        self.video = video
        self.audio = audio
        self.filters = filters
    }

    public init(from decoder: any Decoder) throws {
        try self.init(json: JSONValue(from: decoder))
    }

    private enum CodingKeys: String, CodingKey {
        case container, video, audio, filters, renditions, segmentDuration, thumbnails
    }

    /// The form settings are stored in and read back from (`init(json:)`): a track the container cannot hold is
    /// written only when dropped (`null`), as reading leaves it: reading refuses such a track named explicitly, and
    /// the job, stored, could never run.
    public func encode(to encoder: any Encoder) throws {
        var keyed = encoder.container(keyedBy: CodingKeys.self)
        try keyed.encode(container, forKey: .container)
        if container.holdsVideo || video == .drop { try keyed.encode(video, forKey: .video) }
        if container.holdsAudio || audio == .drop { try keyed.encode(audio, forKey: .audio) }
        try keyed.encodeIfPresent(filters, forKey: .filters)
        try keyed.encodeIfPresent(renditions, forKey: .renditions)
        try keyed.encodeIfPresent(segmentDuration, forKey: .segmentDuration)
        try keyed.encodeIfPresent(thumbnails, forKey: .thumbnails)
    }

    /// Reads a settings document: an object, or the name of a preset as a string.
    public init(json: JSONValue) throws(SettingsError) {
        if case .string(let name) = json {
            self = try Self.preset(named: name, key: "")
            return
        }
        let reader = try SettingsReader(json, path: "", allowed: [
            "preset", "container", "video", "audio", "filters", "renditions", "segmentDuration", "thumbnails",
        ])
        var base = TranscodeSettings()
        if reader.gives("preset") {
            guard case .string(let name)? = reader.value("preset") else {
                throw SettingsError(key: "preset", message: "expected a preset name: \(Preset.names.joined(separator: ", "))")
            }
            base = try Self.preset(named: name, key: "preset")
        }
        self = base
        if let name = try reader.string("container", oneOf: FileType.allCases.map(\.rawValue)) {
            container = FileType(rawValue: name)!
        }
        if let value = reader.value("video") {
            video = try Self.choice(value, key: "video") { value throws(SettingsError) in
                try VideoSettings(value, path: "video", base: base.video.settings ?? VideoSettings())
            }
        }
        if let value = reader.value("audio") {
            audio = try Self.choice(value, key: "audio") { value throws(SettingsError) in
                try AudioSettings(value, path: "audio", base: base.audio.settings ?? AudioSettings())
            }
        }
        if let value = reader.value("filters"), value != .null {
            filters = try FilterSettings(value)
        }
        if let value = reader.value("thumbnails"), value != .null {
            thumbnails = try ThumbnailSettings(value)
        }
        if let value = reader.value("renditions"), value != .null {
            guard container == .hls else {
                throw SettingsError(key: "renditions", message: "a ladder is written by \"container\": \"hls\" only")
            }
            guard video != .drop else {
                throw SettingsError(key: "renditions", message: "a ladder of video renditions needs the video; \"video\" is null")
            }
            renditions = try Renditions(value, base: video.settings ?? VideoSettings())
        }
        if let duration = try reader.number("segmentDuration", in: 1...60, unit: "seconds") {
            guard container == .hls else {
                throw SettingsError(key: "segmentDuration", message: "segments are written by \"container\": \"hls\" only")
            }
            segmentDuration = duration
        }
        if container == .hls {
            if video == .copy {
                throw SettingsError(key: "video", message: "a ladder encodes its renditions; \"copy\" is not available with hls")
            }
            if audio == .copy {
                throw SettingsError(key: "audio", message: "a ladder's audio is encoded once for every rendition; \"copy\" is not available with hls")
            }
        }
        // Raw and audio-only files hold one kind of track: asking for the other one explicitly is an error here;
        // left to its default, it is left out, as `ffmpeg -i clip.mov song.m4a` does (the job failed when the input
        // had such a track: `{"container": "m4a"}` of a video).
        if !container.holdsAudio, audio != .drop {
            if reader.has("audio") { throw SettingsError(key: "audio", message: "a raw \(container.rawValue) stream holds video only; use null") }
            audio = .drop
        }
        if !container.holdsVideo, video != .drop {
            if reader.has("video") { throw SettingsError(key: "video", message: "a \(container.rawValue) file holds audio only; use null") }
            video = .drop
        }
    }

    /// Refuses filters of a copied track, and a tempo beside one. Filters work on decoded pictures and sound; a
    /// copied track's packets pass as they are: its filters would be ignored, and a tempo, which both tracks must
    /// follow to stay together, would put it out of step. Checked where settings come in (the API, the command
    /// line) and when a job runs, not when stored settings are read: a job stored before the rule still reads, and
    /// fails with this reason when it runs.
    public func checkCopiedTrackFilters() throws(SettingsError) {
        guard let filters else { return }
        if video == .copy, filtersVideo {
            throw SettingsError(key: "filters.video", message: "the video is copied (\"video\": \"copy\"), packets as they are: no filter applies to it")
        }
        if audio == .copy, filtersAudioBesideTempo {
            throw SettingsError(key: "filters.audio", message: "the audio is copied (\"audio\": \"copy\"), packets as they are: no filter applies to it")
        }
        if filters.tempo != 1, video == .copy || audio == .copy {
            throw SettingsError(key: "filters.audio.tempo", message: "a tempo retimes both tracks, and a copied one keeps its timing: "
                + "the two would drift apart. Encode both, or leave one out (null)")
        }
    }

    /// Whether the filters change the pictures.
    private var filtersVideo: Bool { FilterSettings(video: filters?.video).videoChain() != nil }

    /// Whether the filters change the sound other than by a tempo (which both tracks follow).
    private var filtersAudioBesideTempo: Bool {
        var sound = filters?.audio
        sound?.tempo = nil
        let filters = FilterSettings(audio: sound)
        return filters.audioChain(sampleRate: 48_000) != nil || filters.loudnessChain != nil
    }

    /// Every check of settings as they come in (the API, the command line): `checkCopiedTrackFilters`, and settings
    /// the job would ignore or could never meet, whatever its input. Not when stored settings are read or a job
    /// runs: a job stored before a rule runs as it did.
    public func checkAtIntake() throws(SettingsError) {
        try checkCopiedTrackFilters()
        if video == .drop, filtersVideo {
            throw SettingsError(key: "filters.video", message: container.holdsVideo
                ? "the video is dropped (\"video\": null): no filter applies to it"
                : "a \(container.rawValue) file holds audio only: no video filter applies to it")
        }
        if audio == .drop, filtersAudioBesideTempo {
            throw SettingsError(key: "filters.audio", message: container.holdsAudio
                ? "the audio is dropped (\"audio\": null): no filter applies to it"
                : "a raw \(container.rawValue) stream holds video only: no audio filter applies to it")
        }
        if thumbnails != nil, video == .copy || video == .drop || !container.holdsVideo {
            throw SettingsError(key: "thumbnails", message: container.holdsVideo
                ? "they are taken from the encoded video, and \"video\" is \(video == .copy ? "\"copy\"" : "null")"
                : "they are taken from the encoded video, and a \(container.rawValue) file holds audio only")
        }
        if container == .h264, video == .copy {
            throw SettingsError(key: "video", message: "\"copy\" is not available for raw H.264 output; encode it instead")
        }
        // A size no H.264 level holds (8192×8192): it failed as out of memory, or would fit no decoder's level. Here
        // when both sides are given; a size the source leads to is refused when the job runs.
        var sizes: [(key: String, settings: VideoSettings)] = video.settings.map { [("video", $0)] } ?? []
        if case .list(let rungs) = renditions { sizes += rungs.enumerated().map { ("renditions[\($0.offset)].video", $0.element) } }
        for (key, size) in sizes {
            if let width = size.width, let height = size.height, let problem = H264Level.problem(width: width, height: height) {
                throw SettingsError(key: key, message: problem)
            }
        }
        if case .list(let rungs) = renditions {
            // Key frames at the same instants in every rendition: two rungs at the same frame rate (or both at the
            // source's) with different intervals, or at known rates and intervals apart, never are.
            for (index, rung) in rungs.enumerated().dropFirst() {
                guard let interval = rung.maxKeyFrameInterval else { continue }
                for (otherIndex, other) in rungs.enumerated().prefix(index) {
                    guard let otherInterval = other.maxKeyFrameInterval else { continue }
                    let apart = if rung.frameRate == other.frameRate {
                        interval != otherInterval
                    } else if let rate = rung.frameRate, let otherRate = other.frameRate {
                        abs(Double(interval) / rate - Double(otherInterval) / otherRate) > 0.001
                    } else {
                        false
                    }
                    if apart {
                        throw SettingsError(key: "renditions[\(index)].video.maxKeyFrameInterval",
                                            message: "every rendition needs key frames at the same instants; renditions[\(otherIndex)] has them elsewhere")
                    }
                }
            }
        }
    }

    /// Parses settings from JSON text.
    public static func parse(_ data: Data) throws(SettingsError) -> TranscodeSettings {
        try TranscodeSettings(json: JSONValue.parse(data))
    }

    private static func preset(named name: String, key: String) throws(SettingsError) -> TranscodeSettings {
        guard let preset = Preset.named(name) else {
            throw SettingsError(key: key, message: "unknown preset \"\(name)\"; expected one of \(Preset.names.joined(separator: ", "))")
        }
        return preset.settings
    }

    private static func choice<S>(
        _ value: JSONValue, key: String, read: (JSONValue) throws(SettingsError) -> S
    ) throws(SettingsError) -> TrackChoice<S> {
        switch value {
        case .null: return .drop
        case .string("copy"): return .copy
        case .object: return .encode(try read(value))
        default:
            throw SettingsError(key: key, message: "expected an object of settings, \"copy\" or null, got \(value.typeName)")
        }
    }
}
