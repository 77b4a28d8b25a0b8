/// The limits of an H.264 level (ITU-T H.264, Table A-1) that a picture size and frame rate must keep: x264 only
/// warns when they are exceeded, and labels the stream with the level asked for anyway, which decoders that hold
/// to it refuse.
struct H264Level {
    /// Macroblocks a second.
    let maxMacroblockRate: Int
    /// Macroblocks a frame; neither side may be over √(8 × this) macroblocks.
    let maxFrameSize: Int
    /// Video bit rate, 1000 bits a second, and coded picture buffer, 1000 bits, of the Baseline and Main profiles
    /// (High's are 1.25 times these).
    let maxBitRate: Int
    let maxBuffer: Int

    static let table: [String: H264Level] = [
        "1": .init(maxMacroblockRate: 1_485, maxFrameSize: 99, maxBitRate: 64, maxBuffer: 175),
        "1.1": .init(maxMacroblockRate: 3_000, maxFrameSize: 396, maxBitRate: 192, maxBuffer: 500),
        "1.2": .init(maxMacroblockRate: 6_000, maxFrameSize: 396, maxBitRate: 384, maxBuffer: 1_000),
        "1.3": .init(maxMacroblockRate: 11_880, maxFrameSize: 396, maxBitRate: 768, maxBuffer: 2_000),
        "2": .init(maxMacroblockRate: 11_880, maxFrameSize: 396, maxBitRate: 2_000, maxBuffer: 2_000),
        "2.1": .init(maxMacroblockRate: 19_800, maxFrameSize: 792, maxBitRate: 4_000, maxBuffer: 4_000),
        "2.2": .init(maxMacroblockRate: 20_250, maxFrameSize: 1_620, maxBitRate: 4_000, maxBuffer: 4_000),
        "3": .init(maxMacroblockRate: 40_500, maxFrameSize: 1_620, maxBitRate: 10_000, maxBuffer: 10_000),
        "3.1": .init(maxMacroblockRate: 108_000, maxFrameSize: 3_600, maxBitRate: 14_000, maxBuffer: 14_000),
        "3.2": .init(maxMacroblockRate: 216_000, maxFrameSize: 5_120, maxBitRate: 20_000, maxBuffer: 20_000),
        "4": .init(maxMacroblockRate: 245_760, maxFrameSize: 8_192, maxBitRate: 20_000, maxBuffer: 25_000),
        "4.1": .init(maxMacroblockRate: 245_760, maxFrameSize: 8_192, maxBitRate: 50_000, maxBuffer: 62_500),
        "4.2": .init(maxMacroblockRate: 522_240, maxFrameSize: 8_704, maxBitRate: 50_000, maxBuffer: 62_500),
        "5": .init(maxMacroblockRate: 589_824, maxFrameSize: 22_080, maxBitRate: 135_000, maxBuffer: 135_000),
        "5.1": .init(maxMacroblockRate: 983_040, maxFrameSize: 36_864, maxBitRate: 240_000, maxBuffer: 240_000),
        "5.2": .init(maxMacroblockRate: 2_073_600, maxFrameSize: 36_864, maxBitRate: 240_000, maxBuffer: 240_000),
    ]

    /// The video bit rate and buffer (bits) level `name` allows a stream asked in `profile` with x264's `preset`
    /// (High 1.25 times Baseline's and Main's; `ultrafast` makes a Constrained Baseline stream whatever profile is
    /// asked), or nil for a level not in the table. x264 labels a stream with the level asked whatever rate it is
    /// given, and without a buffer model its peaks are unbounded: decoders that hold to the level refuse more.
    static func bitRateLimit(level name: String, profile: String, preset: String) -> (maxRate: Int, buffer: Int)? {
        guard let level = table[name] else { return nil }
        let factor = profile == "high" && preset != "ultrafast" ? 1_250 : 1_000
        return (level.maxBitRate * factor, level.maxBuffer * factor)
    }

    /// The limit of the level `settings` ask, with their profile and preset (x264's defaults, `high` and
    /// `veryfast`, when they name none); nil without a level.
    static func bitRateLimit(_ settings: VideoSettings) -> (maxRate: Int, buffer: Int)? {
        settings.level.flatMap { bitRateLimit(level: $0, profile: settings.profile ?? "high", preset: settings.preset ?? "veryfast") }
    }

    /// Why `settings` ask more bits a second than their level carries, or nil.
    static func bitRateProblem(_ settings: VideoSettings) -> String? {
        guard let name = settings.level, let rate = settings.averageBitRate, let limit = bitRateLimit(settings),
              rate > limit.maxRate else { return nil }
        return "level \(name) carries at most \(limit.maxRate) bits per second here (\(settings.profile ?? "high") profile, "
            + "\(settings.preset ?? "veryfast") preset), got \(rate); lower the bit rate or leave the level out"
    }

    /// Macroblocks a frame of the largest level (6.2) holds: a picture of more fits no level, and under a job's
    /// memory limit the largest ones (8192×8192) failed as out of memory.
    static let largestFrameSize = 139_264

    /// Why `width` × `height` fits no level, or nil when it fits one.
    static func problem(width: Int, height: Int) -> String? {
        let macroblocks = ((width + 15) / 16) * ((height + 15) / 16)
        guard macroblocks > largestFrameSize else { return nil }
        return "H.264 holds pictures of at most \(largestFrameSize) macroblocks (8192×4352, 7680×4640); \(width)×\(height) has \(macroblocks)"
    }

    /// Why `width` × `height` at `frameRate` cannot be level `name`, or nil when it can (or the level is unknown).
    static func problem(level name: String, width: Int, height: Int, frameRate: Double) -> String? {
        guard let level = table[name] else { return nil }
        let columns = (width + 15) / 16, rows = (height + 15) / 16
        let side = Int((8 * Double(level.maxFrameSize)).squareRoot())
        if columns * rows > level.maxFrameSize || columns > side || rows > side {
            return "level \(name) holds pictures of at most \(level.maxFrameSize) macroblocks (\(side) a side); \(width)×\(height) has \(columns * rows)"
        }
        let rate = Double(columns * rows) * frameRate
        if rate > Double(level.maxMacroblockRate) * 1.001 {
            return String(format: "level %@ decodes at most %d macroblocks a second; %d×%d at %.3f fps is %.0f",
                          name, level.maxMacroblockRate, width, height, frameRate, rate)
        }
        return nil
    }
}
