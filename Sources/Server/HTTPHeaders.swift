import Foundation
import Glibc

/// Header fields in the order received; names compare case-insensitively.
public struct HTTPHeaders: Sendable, Sequence {
    private var fields: [(name: String, value: String)] = []

    public init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    /// The first value of `name`, if any.
    public subscript(_ name: String) -> String? {
        fields.first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    /// Every value of `name`, in order.
    public func values(_ name: String) -> [String] {
        fields.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value)
    }

    public mutating func add(_ name: String, _ value: String) {
        fields.append((name, value))
    }

    /// Replaces every value of `name` with `value`.
    public mutating func set(_ name: String, _ value: String) {
        fields.removeAll { $0.name.caseInsensitiveEquals(name) }
        fields.append((name, value))
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// Whether `If-None-Match` (every line of it) names `etag` or `*`, by the weak comparison RFC 9110 asks for
    /// here: `W/"x"` matches `"x"` (a compressing proxy or a CDN weakens the tags it passes on).
    public func ifNoneMatch(_ etag: String) -> Bool {
        let strong = etag.hasPrefix("W/") ? String(etag.dropFirst(2)) : etag
        return values("If-None-Match").flatMap { $0.split(separator: ",") }.contains { candidate in
            let value = candidate.trimmingCharacters(in: .whitespaces)
            return value == "*" || value == strong || value == "W/" + strong
        }
    }

    /// Whether the validators answer 304 for a representation tagged `etag` and last modified at `lastModified`
    /// (seconds since 1970): `If-None-Match` when there is one (RFC 9110 §13.1.3: `If-Modified-Since` is then
    /// ignored), else an `If-Modified-Since` date no earlier than the modification, in whole seconds as dates are
    /// sent. A date that does not parse counts as absent, as does the date check without a `lastModified`.
    public func notModified(etag: String, lastModified: Double?) -> Bool {
        if self["If-None-Match"] != nil { return ifNoneMatch(etag) }
        guard let lastModified, let text = self["If-Modified-Since"], let since = Self.date(text) else { return false }
        return lastModified.rounded(.down) <= since
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, the form HTTP sends) in seconds since 1970; nil for any
    /// other text, a wrong weekday or an impossible day included (the obsolete RFC 850 and asctime forms too: a
    /// condition that cannot be read is not applied).
    static func date(_ text: String) -> Double? {
        let words = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard words.count == 6, words[0].count == 4, words[0].hasSuffix(","), words[5] == "GMT",
              let day = Int(words[1]), (1...31).contains(day), let month = months.firstIndex(of: String(words[2])),
              let year = Int(words[3]), words[3].count == 4 else { return nil }
        let clock = words[4].split(separator: ":").compactMap { Int($0) }
        guard words[4].count == 8, clock.count == 3, clock[0] < 24, clock[1] < 60, clock[2] < 61 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(clock[0])
        parts.tm_min = Int32(clock[1])
        parts.tm_sec = Int32(clock[2])
        let seconds = Double(timegm(&parts))
        // Written back, it must be the same text: signs, stray characters, 31 February and weekdays are caught.
        return ServerLoop.httpDate(Date(timeIntervalSince1970: seconds)) == text ? seconds : nil
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }
}

extension String {
    /// ASCII case-insensitive equality, as header names and tokens compare.
    func caseInsensitiveEquals(_ other: String) -> Bool {
        let left = utf8, right = other.utf8
        guard left.count == right.count else { return false }
        // Only A–Z fold: `^` and `~` differ by the same bit and are both token characters.
        func lower(_ byte: UInt8) -> UInt8 { byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte }
        return zip(left, right).allSatisfy { lower($0) == lower($1) }
    }
}
