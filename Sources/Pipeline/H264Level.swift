/// The limits of an H.264 level (ITU-T H.264, Table A-1) that a picture size and frame rate must keep: x264 only
/// warns when they are exceeded, and labels the stream with the level asked for anyway, which decoders that hold
/// to it refuse.
struct H264Level {
    /// Macroblocks a second.
    let maxMacroblockRate: Int
    /// Macroblocks a frame; neither side may be over √(8 × this) macroblocks.
    let maxFrameSize: Int

    static let table: [String: H264Level] = [
        "1": .init(maxMacroblockRate: 1_485, maxFrameSize: 99), "1.1": .init(maxMacroblockRate: 3_000, maxFrameSize: 396),
        "1.2": .init(maxMacroblockRate: 6_000, maxFrameSize: 396), "1.3": .init(maxMacroblockRate: 11_880, maxFrameSize: 396),
        "2": .init(maxMacroblockRate: 11_880, maxFrameSize: 396), "2.1": .init(maxMacroblockRate: 19_800, maxFrameSize: 792),
        "2.2": .init(maxMacroblockRate: 20_250, maxFrameSize: 1_620), "3": .init(maxMacroblockRate: 40_500, maxFrameSize: 1_620),
        "3.1": .init(maxMacroblockRate: 108_000, maxFrameSize: 3_600), "3.2": .init(maxMacroblockRate: 216_000, maxFrameSize: 5_120),
        "4": .init(maxMacroblockRate: 245_760, maxFrameSize: 8_192), "4.1": .init(maxMacroblockRate: 245_760, maxFrameSize: 8_192),
        "4.2": .init(maxMacroblockRate: 522_240, maxFrameSize: 8_704), "5": .init(maxMacroblockRate: 589_824, maxFrameSize: 22_080),
        "5.1": .init(maxMacroblockRate: 983_040, maxFrameSize: 36_864), "5.2": .init(maxMacroblockRate: 2_073_600, maxFrameSize: 36_864),
    ]

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
