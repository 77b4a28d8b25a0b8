import Foundation

/// Writing to the terminal: messages on stderr, JSON on stdout.
enum Console {
    static func error(_ message: String) {
        FileHandle.standardError.write(Data("error: \(message)\n".utf8))
    }

    static func stderr(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }

    /// Prints a value as one line of JSON on stdout.
    static func printJSON<T: Encodable>(_ value: T, pretty: Bool = false) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }

    static var stderrIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }
}
