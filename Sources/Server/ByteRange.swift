/// A single `Range: bytes=...` request resolved against a file size (RFC 9110 §14).
enum ByteRange {
    case full
    case partial(start: Int64, end: Int64)
    case unsatisfiable

    /// Reads the header; anything but one well-formed byte range (several ranges, other units, bad syntax) is
    /// served as the full file, which RFC 9110 allows.
    static func parse(_ header: String?, size: Int64) -> ByteRange {
        // The unit is case-insensitive (RFC 9110 §14.1).
        guard let header, header.lowercased().hasPrefix("bytes=") else { return .full }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .full }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            // "bytes=-abc" is bad syntax like "bytes=abc-": ignored. A zero suffix overlaps nothing (416); any other
            // suffix of an empty file is satisfiable, but no 206 can say so (there is no last byte): the file is
            // sent whole, empty, as RFC 9110 lets a server ignore a range.
            guard let suffix = number(last) else { return .full }
            guard suffix > 0 else { return .unsatisfiable }
            return size == 0 ? .full : .partial(start: max(0, size - suffix), end: size - 1)
        }
        guard let start = number(first) else { return .full }
        guard start < size else { return .unsatisfiable }
        if last.isEmpty { return .partial(start: start, end: size - 1) }
        guard let end = number(last), end >= start else { return .full }
        return .partial(start: start, end: min(end, size - 1))
    }

    /// Digits only; a number past 64 bits is as good as the largest (a range "to the end" whatever the size).
    private static func number(_ text: Substring) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int64(text) ?? Int64.max
    }
}
