/// H.264 output settings, after `AVVideoSettings`: every field is optional and defaults from the source.
public struct VideoSettings: Sendable, Equatable, Codable {
    /// How a picture is put into a `width` × `height` box when both are given.
    public enum ScalingMode: String, Sendable, Codable, CaseIterable {
        /// Fit inside the box keeping the aspect ratio; the output shrinks to the picture (no bars). A picture that
        /// changes shape mid-stream is fitted into the output's size with black bars (`PictureLayout`).
        case fit
        /// Fill the box keeping the aspect ratio, cropping the overflow evenly from both sides.
        case fill
        /// Stretch to the box, changing the aspect ratio.
        case stretch
    }

    static let profiles = ["baseline", "main", "high"]
    static let levels = ["1", "1.1", "1.2", "1.3", "2", "2.1", "2.2", "3", "3.1", "3.2", "4", "4.1", "4.2", "5", "5.1", "5.2"]
    static let presets = ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"]
    static let maxDimension = 8192

    /// Always `h264`.
    public var codec: String?
    /// Output width in pixels (even, at most 8192).
    public var width: Int?
    /// Output height in pixels (even, at most 8192).
    public var height: Int?
    public var scalingMode: ScalingMode?
    /// Average bit rate in bits per second; default width × height × 4, at least 64,000.
    public var averageBitRate: Int?
    /// Largest distance between key frames, in frames; default 2 seconds of frames.
    public var maxKeyFrameInterval: Int?
    /// `baseline`, `main` or `high` (default).
    public var profile: String?
    /// H.264 level such as `4.1`; default lets the encoder choose.
    public var level: String?
    /// Output frame rate in frames per second; default the source's (frames are dropped to reach a lower rate).
    public var frameRate: Double?
    /// x264 speed preset, `veryfast` by default.
    public var preset: String?
    /// Whether the output may be larger than the source's display size; default true. Presets set it to false.
    public var allowUpscaling: Bool?
    /// Colour tags for the output (and the matrix the picture is converted to); default the source's tags, or
    /// BT.709 for HD and BT.601 for SD when the source has none.
    public var color: ColorSettings?

    public init(codec: String? = nil, width: Int? = nil, height: Int? = nil, scalingMode: ScalingMode? = nil,
                averageBitRate: Int? = nil, maxKeyFrameInterval: Int? = nil, profile: String? = nil, level: String? = nil,
                frameRate: Double? = nil, preset: String? = nil, allowUpscaling: Bool? = nil) {
        self.codec = codec
        self.width = width
        self.height = height
        self.scalingMode = scalingMode
        self.averageBitRate = averageBitRate
        self.maxKeyFrameInterval = maxKeyFrameInterval
        self.profile = profile
        self.level = level
        self.frameRate = frameRate
        self.preset = preset
        self.allowUpscaling = allowUpscaling
    }

    /// Reads and validates the `video` object of a settings document, on top of `base`.
    init(_ value: JSONValue, path: String, base: VideoSettings) throws(SettingsError) {
        let reader = try SettingsReader(value, path: path, allowed: [
            "codec", "width", "height", "scalingMode", "averageBitRate", "maxKeyFrameInterval", "profile", "level",
            "frameRate", "preset", "allowUpscaling", "color",
        ])
        self = base
        codec = try reader.string("codec", oneOf: ["h264"]) ?? base.codec
        for name in ["width", "height"] {
            if let size = try reader.integer(name, in: 2...Self.maxDimension, unit: "pixels") {
                guard size % 2 == 0 else {
                    throw SettingsError(key: reader.key(name), message: "expected an even number of pixels (H.264 4:2:0 needs it), got \(size)")
                }
                if name == "width" { width = size } else { height = size }
            }
        }
        // A size given here replaces the base's box as a whole, so "width" alone over a preset keeps the aspect.
        if reader.gives("width") != reader.gives("height") {
            if !reader.gives("width") { width = nil }
            if !reader.gives("height") { height = nil }
        }
        if let mode = try reader.string("scalingMode", oneOf: ScalingMode.allCases.map(\.rawValue)) {
            scalingMode = ScalingMode(rawValue: mode)
        }
        averageBitRate = try reader.integer("averageBitRate", in: 10_000...500_000_000, unit: "bits per second") ?? base.averageBitRate
        maxKeyFrameInterval = try reader.integer("maxKeyFrameInterval", in: 1...1000, unit: "frames") ?? base.maxKeyFrameInterval
        profile = try reader.string("profile", oneOf: Self.profiles) ?? base.profile
        if case .number(let number)? = reader.value("level") {
            let text = number.formatted
            guard Self.levels.contains(text) else {
                throw SettingsError(key: reader.key("level"), message: "expected one of \(Self.levels.joined(separator: ", ")), got \(text)")
            }
            level = text
        } else if case .integer(let number)? = reader.value("level") {
            let text = String(number)
            guard Self.levels.contains(text) else {
                throw SettingsError(key: reader.key("level"), message: "expected one of \(Self.levels.joined(separator: ", ")), got \(text)")
            }
            level = text
        } else {
            level = try reader.string("level", oneOf: Self.levels) ?? base.level
        }
        frameRate = try reader.number("frameRate", in: 1...240, unit: "frames per second") ?? base.frameRate
        preset = try reader.string("preset", oneOf: Self.presets) ?? base.preset
        allowUpscaling = try reader.bool("allowUpscaling") ?? base.allowUpscaling
        if let value = reader.value("color"), value != .null {
            color = try ColorSettings(value, path: reader.key("color"))
        }
    }
}
