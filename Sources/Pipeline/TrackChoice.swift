/// What to do with a track: encode it with settings, copy its packets untouched (`"copy"`), or drop it (`null`).
public enum TrackChoice<Settings: Sendable & Equatable & Codable>: Sendable, Equatable, Codable {
    case encode(Settings)
    case copy
    case drop

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .drop
        } else if let text = try? container.decode(String.self), text == "copy" {
            self = .copy
        } else {
            self = .encode(try container.decode(Settings.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .encode(let settings): try container.encode(settings)
        case .copy: try container.encode("copy")
        case .drop: try container.encodeNil()
        }
    }

    /// The encoding settings, when the track is encoded.
    public var settings: Settings? {
        if case .encode(let settings) = self { return settings }
        return nil
    }
}
