import Foundation
import Glibc

/// Writing to the terminal: messages on stderr, JSON on stdout.
enum Console {
    static func error(_ message: String) {
        write(Data("error: \(message)\n".utf8), to: STDERR_FILENO)
    }

    static func stderr(_ text: String) {
        write(Data(text.utf8), to: STDERR_FILENO)
    }

    /// Prints a value as one line of JSON on stdout.
    static func printJSON<T: Encodable>(_ value: T, pretty: Bool = false) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return }
        write(data + Data("\n".utf8), to: STDOUT_FILENO)
    }

    /// Writes all of `data`, or as much as the reader takes: one that went away (`--progress json | head -1`) is
    /// not an error of the command's (FileHandle's write stops the process on EPIPE; SIGPIPE is ignored).
    private static func write(_ data: Data, to descriptor: Int32) {
        data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }

    static var stderrIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }
}
