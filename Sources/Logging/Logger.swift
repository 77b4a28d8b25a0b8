import Foundation
import Glibc

/// One log line per event: JSON objects (time, level, message and fields) or plain text for people, on stderr or on
/// a destination the caller gives (a test's collector).
///
/// Lines are formatted by hand (no JSONEncoder, no date formatter): the server logs every request.
public struct Logger: Sendable {
    public enum Format: String, Sendable { case json, text }
    public enum Level: String, Sendable, Comparable {
        case debug, info, warning, error

        /// The level in capitals, for text lines.
        var label: String {
            switch self {
            case .debug: "DEBUG"
            case .info: "INFO"
            case .warning: "WARNING"
            case .error: "ERROR"
            }
        }

        private var rank: Int {
            switch self {
            case .debug: 0
            case .info: 1
            case .warning: 2
            case .error: 3
            }
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rank < rhs.rank }
    }

    public let format: Format
    /// Lines below this level are dropped; nil drops every line.
    public let minimumLevel: Level?
    private let destination: @Sendable (String) -> Void

    /// A logger writing whole lines to stderr, or to `destination` (which gets each formatted line, newline included).
    public init(format: Format = .json, minimumLevel: Level? = .info,
                destination: @escaping @Sendable (String) -> Void = Logger.writeToStandardError) {
        self.format = format
        self.minimumLevel = minimumLevel
        self.destination = destination
    }

    /// A logger that drops everything (for library users and tests that do not look at logs).
    public static let disabled = Logger(minimumLevel: nil)

    public func log(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, LogValue> = [:]) {
        guard let line = line(level, message, fields) else { return }
        destination(line)
    }

    /// Writes `text` (lines formatted by `line`) where this logger writes.
    package func write(_ text: String) { destination(text) }

    /// The formatted line (ending in a newline), or nil when the level is filtered out.
    package func line(_ level: Level, _ message: String, _ fields: KeyValuePairs<String, LogValue>) -> String? {
        guard let minimumLevel, level >= minimumLevel else { return nil }
        var line = ""
        line.reserveCapacity(256)
        let time = Self.now()
        switch format {
        case .json:
            line += "{\"time\":\""
            line += time
            line += "\",\"level\":\""
            line += level.rawValue
            line += "\",\"message\":"
            Self.appendQuoted(message, to: &line)
            for (key, value) in fields {
                line += ",\""
                line += key
                line += "\":"
                value.appendJSON(to: &line)
            }
            line += "}\n"
        case .text:
            line += time
            line += " "
            line += level.label
            line += " "
            line += message
            for (key, value) in fields {
                line += " "
                line += key
                line += "="
                line += value.text
            }
            line += "\n"
        }
        return line
    }

    /// Writes whole lines to stderr in one call.
    @Sendable public static func writeToStandardError(_ text: String) {
        var line = text
        line.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(STDERR_FILENO, bytes.baseAddress! + offset, bytes.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
    }

    public func info(_ message: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.info, message, fields) }
    public func warning(_ message: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: KeyValuePairs<String, LogValue> = [:]) { log(.error, message, fields) }

    /// UTC time as ISO 8601 with milliseconds, e.g. `2026-12-03T09:06:45.499Z`; digits written directly, as this
    /// runs for every request.
    static func now() -> String {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        var seconds = spec.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let fields: [(Int, Int, UInt8)] = [
            (Int(parts.tm_year) + 1900, 4, UInt8(ascii: "-")), (Int(parts.tm_mon) + 1, 2, UInt8(ascii: "-")),
            (Int(parts.tm_mday), 2, UInt8(ascii: "T")), (Int(parts.tm_hour), 2, UInt8(ascii: ":")),
            (Int(parts.tm_min), 2, UInt8(ascii: ":")), (Int(parts.tm_sec), 2, UInt8(ascii: ".")),
            (spec.tv_nsec / 1_000_000, 3, UInt8(ascii: "Z")),
        ]
        return String(unsafeUninitializedCapacity: 24) { buffer in
            var end = 0
            for (value, width, separator) in fields {
                var rest = value
                for position in stride(from: end + width - 1, through: end, by: -1) {
                    buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
                buffer[end + width] = separator
                end += width + 1
            }
            return end
        }
    }

    static func appendQuoted(_ text: String, to line: inout String) {
        line += "\""
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            line += text
            line += "\""
            return
        }
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": line += "\\\""
            case "\\": line += "\\\\"
            case "\n": line += "\\n"
            case "\r": line += "\\r"
            case "\t": line += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    line += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    line.unicodeScalars.append(scalar)
                }
            }
        }
        line += "\""
    }
}

/// A value in a log line.
public enum LogValue: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    case string(String)
    case int(Int)
    case double(Double)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }

    var text: String {
        switch self {
        case .string(let value):
            // Quoted, escaped as in JSON, when it holds a space, a quote, a backslash or a control character: a
            // libpq message's line breaks went out as they were, one record over three lines.
            guard value.isEmpty || value.utf8.contains(where: { $0 <= 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
                return value
            }
            var quoted = ""
            Logger.appendQuoted(value, to: &quoted)
            return quoted
        case .int(let value): return String(value)
        case .double(let value): return String(value)
        }
    }

    func appendJSON(to line: inout String) {
        switch self {
        case .string(let value): Logger.appendQuoted(value, to: &line)
        case .int(let value): line += String(value)
        case .double(let value): line += value.isFinite ? String(value) : "null"
        }
    }
}
