import Foundation

/// What `/proc/PID/stat` says of a process: its state letter and its parent. The name in parentheses may hold
/// spaces and parentheses, so the fields are read after the last ')'.
public struct ProcessStat: Sendable {
    /// `R`, `S`, `Z` (a zombie), …
    public var state: Character
    public var parent: pid_t

    /// Nil when the process is gone or the file does not read as expected.
    public init?(pid: pid_t) {
        // Read as bytes: the name is whatever the process set (`prctl(PR_SET_NAME)`), not always UTF-8. Read as
        // text, a hostile child's process named "\xff" was no process at all, and its zombie was never reaped.
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count >= 2, let state = fields[0].first, let parent = pid_t(fields[1]) else { return nil }
        self.state = state
        self.parent = parent
    }
}
