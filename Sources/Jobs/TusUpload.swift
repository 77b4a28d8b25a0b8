import Foundation

/// A resumable (tus) upload as kept beside its bytes: what was declared when it was created, and how it went.
public struct TusUpload: Sendable, Codable, Equatable {
    /// The id, which the upload keeps once complete (`GET /v1/uploads/{id}`).
    public var id: String
    /// Declared total size in bytes; nil while deferred (`Upload-Defer-Length: 1`).
    public var length: Int64?
    /// `Upload-Metadata` as the client sent it (echoed by HEAD).
    public var metadata: String
    /// Seconds since 1970.
    public var createdAt: Double
    /// Set once the bytes became an upload (or were refused as one).
    public var completedAt: Double?
    /// Why the complete file was refused as an upload (not media, no tracks); nil when it was accepted.
    public var refused: String?
    /// The job made on completion from the `settings` metadata.
    public var jobID: String?
    /// Completions given up because reading the file's tracks took too long (`probe_timeout`): a busy machine as
    /// much as a hostile file, so the bytes are kept for a few tries before they are refused.
    public var probeTimeouts: Int?

    public init(id: String, length: Int64?, metadata: String, createdAt: Double) {
        self.id = id
        self.length = length
        self.metadata = metadata
        self.createdAt = createdAt
    }

    /// `Upload-Metadata` as pairs: `key base64value,key2,...`; nil when it is malformed (a key twice, a value that is
    /// not base64, a key with spaces or commas).
    public static func parseMetadata(_ header: String) -> [String: Data]? {
        var pairs: [String: Data] = [:]
        guard !header.trimmingCharacters(in: .whitespaces).isEmpty else { return [:] }
        for item in header.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: true)
            guard let key = parts.first, parts.count <= 2, !key.isEmpty, pairs[String(key)] == nil,
                  key.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else { return nil }
            if parts.count == 2 {
                guard let value = Data(base64Encoded: String(parts[1])) else { return nil }
                pairs[String(key)] = value
            } else {
                pairs[String(key)] = Data()
            }
        }
        return pairs
    }
}
