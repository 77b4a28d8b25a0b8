/// The video ladder of an `hls` output: each rung is the normal `video` settings, or `"auto"` for a ladder derived
/// from the source after the HLS Authoring Specification's table.
public enum Renditions: Sendable, Equatable, Codable {
    case auto
    case list([VideoSettings])

    /// Most rungs a ladder may have.
    static let maxCount = 8
    /// Most rungs an automatic ladder has.
    static let maxAuto = 5

    /// Reads `"auto"` or `[{"video": {...}}, ...]`, each rung on top of `base` (the document's `video` settings).
    init(_ value: JSONValue, base: VideoSettings) throws(SettingsError) {
        switch value {
        case .string("auto"):
            self = .auto
        case .array(let items):
            guard (1...Self.maxCount).contains(items.count) else {
                throw SettingsError(key: "renditions", message: "expected 1 to \(Self.maxCount) renditions, got \(items.count)")
            }
            var list: [VideoSettings] = []
            for (index, item) in items.enumerated() {
                let path = "renditions[\(index)]"
                let reader = try SettingsReader(item, path: path, allowed: ["video"])
                guard let video = reader.value("video"), case .object = video else {
                    throw SettingsError(key: reader.key("video"), message: "expected an object of video settings")
                }
                let rung = try VideoSettings(video, path: reader.key("video"), base: base)
                if let hdr = rung.color?.hdr, rung.color?.toneMapsHDR != base.color?.toneMapsHDR ?? true {
                    throw SettingsError(key: "\(path).video.color.hdr",
                                        message: "the renditions share one decode, so an HDR source is tone-mapped for all "
                                            + "or none; set \"\(hdr)\" in the document's video.color instead")
                }
                list.append(rung)
            }
            self = .list(list)
        default:
            throw SettingsError(key: "renditions", message: "expected \"auto\" or an array of {\"video\": {...}}")
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self), text == "auto" {
            self = .auto
        } else {
            self = .list(try container.decode([[String: VideoSettings]].self).map { $0["video"] ?? VideoSettings() })
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .auto: try container.encode("auto")
        case .list(let list): try container.encode(list.map { ["video": $0] })
        }
    }

    /// One rung of Apple's table (16:9, 30 frames a second): lines of the short side and bits per second.
    struct Rung: Equatable {
        var lines: Int
        var bitRate: Int
    }

    /// The HLS Authoring Specification's ladder, one rung per size: the lower of its bit rates where it lists two,
    /// but for 432 lines its higher one (1.1 Mb/s, not 0.73), as the README documents for `"auto"`.
    static let appleTable = [
        Rung(lines: 1080, bitRate: 6_000_000), Rung(lines: 720, bitRate: 3_000_000), Rung(lines: 540, bitRate: 2_000_000),
        Rung(lines: 432, bitRate: 1_100_000), Rung(lines: 360, bitRate: 365_000), Rung(lines: 234, bitRate: 145_000),
    ]

    /// The automatic ladder for a picture whose short side is `sourceLines`: the table's rungs that do not upscale,
    /// at most `maxAuto`, largest first; a source smaller than every rung gets one rung at its own size.
    static func automatic(sourceLines: Int) -> [Rung] {
        let fitting = appleTable.filter { $0.lines <= sourceLines }.prefix(maxAuto)
        if fitting.isEmpty {
            let lines = max(2, sourceLines / 2 * 2)
            let scaled = Int(Double(appleTable.last!.bitRate) * Double(lines) / Double(appleTable.last!.lines))
            return [Rung(lines: lines, bitRate: max(64_000, scaled))]
        }
        return Array(fitting)
    }
}
