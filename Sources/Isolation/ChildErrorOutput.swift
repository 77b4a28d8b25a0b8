import Foundation
import Glibc
import Locks

/// What a child writes on its standard error, read by `ChildErrorReader` (one thread for every child) and handed on
/// line by line. A child's standard error was the server's own, its log: a child taken over by a hostile file could
/// write lines that read as the server's (a forged `{"level":"error",...}`), or flood it. Handed on as text, its
/// owner logs each line as a field of a line of its own.
///
/// Bounded: a line is cut at `maxLineBytes`; past `maxBytes` (its line ends counted) or `maxLines` from one child the
/// rest is read and dropped (one line says so); blank lines are counted, not handed on (a child writing nothing but
/// line ends passed the byte bound uncounted, and filled the log with empty warnings, 1.5 million in 20 s). Control
/// characters (C0, DEL, C1, and the bidirectional overrides and isolates) are shown escaped (`\x1b`, `\u{202e}`),
/// so a terminal reading a text log cannot be redrawn by them. The reading ends at end of file,
/// or `drainSeconds` after the owner says the child has ended (a process that left the child's group could hold the
/// pipe open for ever).
final class ChildErrorOutput: Sendable {
    /// Longest line handed on, bytes; the rest of a longer line is dropped.
    static let maxLineBytes = 4096
    /// Bytes handed on from one child; past them the rest is dropped.
    static let maxBytes = 256 * 1024
    /// Lines handed on from one child; past them the rest is dropped.
    static let maxLines = 1000
    /// Seconds the reading goes on after the child ended.
    static let drainSeconds = 1.0

    /// The child's task, given with each line (set by its owner when the child takes a job).
    let task = LockedValue("")
    /// When the owner said the child ended (system uptime, seconds).
    private let ended = LockedValue<Double?>(nil)

    /// Hands `descriptor` (the pipe's read end, closed once read to its end) to the reader, its lines to `lines`.
    init(descriptor: Int32, lines: @escaping @Sendable (_ line: String, _ task: String) -> Void) {
        ChildErrorReader.shared.add(ChildErrorReader.Source(descriptor: descriptor, output: self, lines: lines))
    }

    /// Tells the reader the child has ended: the reading stops `drainSeconds` later if the pipe has not ended by then.
    func childEnded() {
        ended.withLock { $0 = $0 ?? ProcessInfo.processInfo.systemUptime }
        ChildErrorReader.shared.wake()
    }

    /// Whether `factor` times `drainSeconds` have passed since the child ended, at `now` (system uptime).
    func isOverdue(at now: Double, factor: Double) -> Bool {
        guard let end = ended.withLock({ $0 }) else { return false }
        return now - end >= Self.drainSeconds * factor
    }

    /// Splitting bytes into bounded, printable lines.
    struct Lines {
        private var pending: [UInt8] = []
        /// Dropping the rest of a line that was cut.
        private var skipping = false
        /// Bytes and lines read so far.
        private var total = 0
        private var count = 0
        private var dropping = false

        /// The whole lines `bytes` completes, cut and escaped.
        mutating func add(_ bytes: ArraySlice<UInt8>) -> [String] {
            guard !dropping else { return [] }
            var found: [String] = []
            var rest = bytes
            while let newline = rest.firstIndex(of: UInt8(ascii: "\n")) {
                if skipping {
                    skipping = false
                } else {
                    let part = rest[rest.startIndex..<newline], room = Self.room(pending)
                    pending += part.prefix(room)
                    if let line = emit(pending, cut: part.count > room) { found.append(line) }
                    pending = []
                }
                rest = rest[(newline + 1)...]
                if dropping { return found }
            }
            guard !skipping else { return found }
            pending += rest.prefix(Self.room(pending) + 1)
            if pending.count > ChildErrorOutput.maxLineBytes {
                if let line = emit(Array(pending.prefix(ChildErrorOutput.maxLineBytes)), cut: true) { found.append(line) }
                pending = []
                skipping = true
            }
            return found
        }

        /// The last line if it had no newline.
        mutating func finish() -> String? {
            guard !dropping, !skipping, !pending.isEmpty else { return nil }
            defer { pending = [] }
            return emit(pending, cut: false)
        }

        private static func room(_ pending: [UInt8]) -> Int { max(0, ChildErrorOutput.maxLineBytes - pending.count) }

        /// The line to hand on, or nil for a blank one.
        private mutating func emit(_ bytes: [UInt8], cut: Bool) -> String? {
            var line = bytes
            total += line.count + 1
            count += 1
            if total > ChildErrorOutput.maxBytes || count > ChildErrorOutput.maxLines {
                dropping = true
                return total > ChildErrorOutput.maxBytes
                    ? "(more than \(ChildErrorOutput.maxBytes) bytes: the rest is dropped)"
                    : "(more than \(ChildErrorOutput.maxLines) lines: the rest is dropped)"
            }
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            guard line.contains(where: { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") && $0 != UInt8(ascii: "\r") }) else { return nil }
            var text = ""
            for scalar in String(decoding: line, as: UTF8.self).unicodeScalars {
                let value = scalar.value
                if value < 0x20 && scalar != "\t" || (0x7F...0x9F).contains(value) {
                    let hex = String(value, radix: 16)
                    text += "\\x" + (hex.count < 2 ? "0" : "") + hex
                } else if (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value) {
                    text += "\\u{" + String(value, radix: 16) + "}"
                } else {
                    text.unicodeScalars.append(scalar)
                }
            }
            return cut ? text + " (cut)" : text
        }
    }
}
