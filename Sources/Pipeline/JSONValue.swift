import Foundation

/// A parsed JSON document, kept as values so settings can be validated key by key with messages that name the key.
public enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Parses JSON text; the error names what is wrong with the text. A key given twice in one object is refused,
    /// named: which one counts is not said by JSON, and parsers differ (Foundation keeps the first, JavaScript and
    /// Python the last).
    public static func parse(_ data: Data) throws(SettingsError) -> JSONValue {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw SettingsError(key: "", message: "the settings are not valid JSON")
        }
        let text = utf8(data)
        if hasTrailingComma(text) { throw SettingsError(key: "", message: "the settings are not valid JSON (a comma before a closing bracket)") }
        if let key = duplicateKey(in: text) { throw SettingsError(key: key, message: Self.givenTwice) }
        return value
    }

    /// JSON text as UTF-8, as the decoder reads it: UTF-16 and UTF-32 (told by where the first character's zero
    /// bytes are, or by a byte order mark) are converted; anything else is taken as it is.
    static func utf8(_ data: Data) -> Data {
        let head = Array(data.prefix(4)) + [UInt8](repeating: 1, count: max(0, 4 - data.count))
        let encoding: String.Encoding? = switch (head[0], head[1], head[2], head[3]) {
        case (0, 0, 0xFE, 0xFF), (0, 0, 0, _): .utf32BigEndian
        case (0xFF, 0xFE, 0, 0), (_, 0, 0, 0): .utf32LittleEndian
        case (0xFE, 0xFF, _, _), (0, _, _, _): .utf16BigEndian
        case (0xFF, 0xFE, _, _), (_, 0, _, _): .utf16LittleEndian
        default: nil
        }
        guard let encoding, let text = String(data: data, encoding: encoding) else { return data }
        return Data(text.utf8)
    }

    /// The message of a key given twice.
    public static let givenTwice = "given twice in one object; give each key once"

    /// Where the string opened by the quote at `start` closes: its closing quote's index (escapes passed over), or
    /// the end of `bytes`.
    private static func stringEnd(in bytes: [UInt8], from start: Int) -> Int {
        var end = start + 1
        while end < bytes.count, bytes[end] != UInt8(ascii: "\"") { end += bytes[end] == UInt8(ascii: "\\") ? 2 : 1 }
        return end
    }

    /// Whether `data` (JSON the decoder took) has a comma right before a `}` or `]`: JSON has none there, and the
    /// decoder lets it pass (`{"input": "x",}`), where a stricter parser in front refuses the request.
    static func hasTrailingComma(_ data: Data) -> Bool {
        let bytes = [UInt8](data)
        var position = 0
        var afterComma = false
        while position < bytes.count {
            switch bytes[position] {
            case UInt8(ascii: "\""):
                position = stringEnd(in: bytes, from: position)
                afterComma = false
            case UInt8(ascii: ","):
                afterComma = true
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if afterComma { return true }
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                break
            default:
                afterComma = false
            }
            position += 1
        }
        return false
    }

    /// Where the first key given twice in one object of `data` (valid JSON) is, named as settings name keys
    /// (`video.width`, `renditions[1].video`); nil when no object repeats a key. Keys are compared as the decoder
    /// reads them, escapes decoded: `"url"` and `"\u0075rl"` are one key (compared as written, the decoder kept the
    /// first and Python or JavaScript in front of it the last).
    static func duplicateKey(in data: Data) -> String? {
        struct Level {
            let isObject: Bool
            var keys: Set<[UInt8]> = []
            var key = ""
            var index = 0
        }
        var levels: [Level] = []
        var expectingKey = false
        let bytes = [UInt8](data)
        var position = 0
        while position < bytes.count {
            switch bytes[position] {
            case UInt8(ascii: "{"):
                levels.append(Level(isObject: true))
                expectingKey = true
            case UInt8(ascii: "["):
                levels.append(Level(isObject: false))
                expectingKey = false
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                _ = levels.popLast()
                expectingKey = false
            case UInt8(ascii: ","):
                guard !levels.isEmpty else { break }
                if levels[levels.count - 1].isObject { expectingKey = true } else { levels[levels.count - 1].index += 1 }
            case UInt8(ascii: "\""):
                let end = stringEnd(in: bytes, from: position)
                if expectingKey, !levels.isEmpty {
                    var raw = Array(bytes[(position + 1)..<min(end, bytes.count)])
                    if raw.contains(UInt8(ascii: "\\")),
                       let decoded = try? JSONDecoder().decode(String.self, from: Data([UInt8(ascii: "\"")] + raw + [UInt8(ascii: "\"")])) {
                        raw = Array(decoded.utf8)
                    }
                    let name = String(decoding: raw, as: UTF8.self)
                    guard levels[levels.count - 1].keys.insert(raw).inserted else {
                        var path = ""
                        for level in levels.dropLast() {
                            path += level.isObject ? (path.isEmpty ? level.key : "." + level.key) : "[\(level.index)]"
                        }
                        return path.isEmpty ? name : path + "." + name
                    }
                    levels[levels.count - 1].key = name
                    expectingKey = false
                }
                position = end
            default:
                break
            }
            position += 1
        }
        return nil
    }

    /// Short name of the value's JSON type, for error messages.
    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .integer, .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}
