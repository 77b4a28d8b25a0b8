import Foundation
import Outbound
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
        return entityTags("If-None-Match").contains { $0 == "*" || $0 == strong || $0 == "W/" + strong }
    }

    /// The entity tags (or `*`) a conditional header lists, over all its lines.
    private func entityTags(_ name: String) -> [String] {
        values(name).flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// Whether the validators answer 304 for a representation tagged `etag` and last modified at `lastModified`
    /// (seconds since 1970): `If-None-Match` when there is one (RFC 9110 §13.1.3: `If-Modified-Since` is then
    /// ignored), else an `If-Modified-Since` date no earlier than the modification, in whole seconds as dates are
    /// sent. A date that does not parse (`HTTPDate`) counts as absent, as does the date check without a `lastModified`.
    public func notModified(etag: String, lastModified: Double?) -> Bool {
        if self["If-None-Match"] != nil { return ifNoneMatch(etag) }
        guard let lastModified, let text = self["If-Modified-Since"], let since = HTTPDate.parse(text) else { return false }
        return lastModified.rounded(.down) <= since
    }

    /// Whether the preconditions of a read fail for a representation tagged `etag` (strong) and last modified at
    /// `lastModified` (RFC 9110 §13.2.2, steps 1 and 2): an `If-Match` that names neither `etag` (by the strong
    /// comparison: a `W/` tag never matches) nor `*`, or else an `If-Unmodified-Since` date earlier than the
    /// modification. A date that does not parse counts as absent. A client resuming a download sends them so as
    /// never to splice bytes of two different files.
    public func preconditionFails(etag: String, lastModified: Double?) -> Bool {
        if self["If-Match"] != nil {
            return !entityTags("If-Match").contains { $0 == "*" || $0 == etag }
        }
        guard let lastModified, let text = self["If-Unmodified-Since"], let since = HTTPDate.parse(text) else { return false }
        return lastModified.rounded(.down) > since
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
