/// A single `Range: bytes=...` request resolved against a file size (RFC 9110 §14).
enum ByteRange {
    case full
    case partial(start: Int64, end: Int64)
    case unsatisfiable

    /// Reads the header; anything but one well-formed byte range (several ranges, other units, bad syntax) is
    /// served as the full file, which RFC 9110 allows.
    static func parse(_ header: String?, size: Int64) -> ByteRange {
        guard let header, header.hasPrefix("bytes=") else { return .full }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .full }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            guard let suffix = Int64(last), suffix > 0 else { return last.isEmpty ? .full : .unsatisfiable }
            return size == 0 ? .unsatisfiable : .partial(start: max(0, size - suffix), end: size - 1)
        }
        guard let start = Int64(first), start >= 0 else { return .full }
        guard start < size else { return .unsatisfiable }
        if last.isEmpty { return .partial(start: start, end: size - 1) }
        guard let end = Int64(last), end >= start else { return .full }
        return .partial(start: start, end: min(end, size - 1))
    }
}
