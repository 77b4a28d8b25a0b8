import Foundation

/// One log line per event on stderr: JSON objects (time, level, message and fields) or plain text for people.
public struct Logger: Sendable {
    public enum Format: String, Sendable { case json, text }
    public enum Level: String, Sendable { case debug, info, warning, error }

    public let format: Format
    public let quiet: Bool

    public init(format: Format = .json, quiet: Bool = false) {
        self.format = format
        self.quiet = quiet
    }

    public func log(_ level: Level, _ message: String, _ fields: [String: LogValue] = [:]) {
        guard !quiet || level == .error else { return }
        let time = Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
        let line: String
        switch format {
        case .json:
            var object: [String: LogValue] = fields
            object["time"] = .string(time)
            object["level"] = .string(level.rawValue)
            object["message"] = .string(message)
            line = String(decoding: JSON.encode(object), as: UTF8.self)
        case .text:
            let rest = fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.text)" }.joined(separator: " ")
            line = "\(time) \(level.rawValue.uppercased()) \(message)\(rest.isEmpty ? "" : " " + rest)"
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    public func info(_ message: String, _ fields: [String: LogValue] = [:]) { log(.info, message, fields) }
    public func error(_ message: String, _ fields: [String: LogValue] = [:]) { log(.error, message, fields) }
}

/// A value in a log line.
public enum LogValue: Sendable, Encodable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    case string(String)
    case int(Int)
    case double(Double)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }

    var text: String {
        switch self {
        case .string(let value): value.contains(" ") ? "\"\(value)\"" : value
        case .int(let value): String(value)
        case .double(let value): String(value)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        }
    }
}
