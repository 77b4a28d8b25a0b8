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

    public init(id: String, filename: String, contentType: String?, size: Int, sha256: String, path: String,
                tracks: [Track], createdAt: Double) {
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
