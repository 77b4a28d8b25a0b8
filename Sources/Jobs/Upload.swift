import Pipeline

/// A file a user sent, kept in the data directory and probed once.
public struct Upload: Sendable, Codable, Equatable {
    /// Random UUID, lowercase.
    public var id: String
    /// The name the client gave it (never used as a path).
    public var filename: String
    public var contentType: String?
    /// Bytes.
    public var size: Int
    /// Hex SHA-256 of the content.
    public var sha256: String
    /// Where the content is stored.
    public var path: String
    /// Tracks read when it was probed.
    public var tracks: [Track]
    /// Seconds since 1970.
    public var createdAt: Double
    /// The URL the bytes come from, for an input given by URL (never shown unredacted).
    public var sourceURL: String?

    /// An input given by URL whose bytes a worker has not fetched yet (no file, no hash, no tracks).
    public var awaitsFetch: Bool { sourceURL != nil && sha256.isEmpty }

    public init(id: String, filename: String, contentType: String?, size: Int, sha256: String, path: String,
                tracks: [Track], createdAt: Double, sourceURL: String? = nil) {
        self.sourceURL = sourceURL
        self.id = id
        self.filename = filename
        self.contentType = contentType
        self.size = size
        self.sha256 = sha256
        self.path = path
        self.tracks = tracks
        self.createdAt = createdAt
    }
}

extension Upload {
    /// A display name: the last path component, without control characters, at most 255 bytes: a longer one is
    /// shortened by whole characters before its extension (cut at byte 255, a name in Japanese or Cyrillic lost a
    /// character's half, and with it the whole name: "upload").
    public static func cleanFilename(_ name: String?) -> String {
        let last = (name ?? "").split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
        let cleaned = String(last.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        let trimmed = cleaned.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed != ".", trimmed != ".." else { return "upload" }
        guard trimmed.utf8.count > 255 else { return trimmed }
        let dot = trimmed.lastIndex(of: ".").map { trimmed[$0...] } ?? ""
        let suffix = dot.utf8.count <= 16 ? dot : ""
        var stem = trimmed.dropLast(suffix.count)
        while stem.utf8.count + suffix.utf8.count > 255 { stem = stem.dropLast() }
        // A character of more than 255 bytes (a letter and hundreds of combining marks) leaves no stem.
        return stem.isEmpty ? "upload" + suffix : String(stem + suffix)
    }
}
