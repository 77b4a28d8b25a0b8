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
