import Foundation

/// A complete request as a handler sees it: the head, the route's parameters, and the body as collected.
public struct Request: Sendable {
    /// How the body arrived.
    public enum Body: Sendable {
        case none
        /// A small body held in memory (JSON).
        case data(Data)
        /// A body streamed to a temporary file; the handler moves it into place or the server deletes it.
        case file(UploadBody)
        /// A multipart/form-data body: the `file` part on disk, other parts in memory.
        case multipart(file: UploadBody?, fields: [String: Data])
    }

    public var head: RequestHead
    /// Values of the `{name}` segments of the route.
    public var parameters: [String: String]
    public var body: Body
    /// Request id for logs.
    public var id: String
    /// Whether the client is still there to hear the answer.
    public var client = ClientPresence()
    public var method: String { head.method }
    public var headers: HTTPHeaders { head.headers }
}

/// A body written to disk as it arrived, with its size and SHA-256 (what `UploadBody.complete()` gives).
public struct UploadedFile: Sendable {
    /// Temporary path inside the data directory.
    public let path: String
    /// Bytes.
    public let size: Int64
    /// Lowercase hex SHA-256 of the content.
    public let sha256: String
    /// Filename the client gave (multipart `filename=` or the PUT path), not sanitised: never use it as a path.
    public var filename: String?
    /// Content type the client declared.
    public var contentType: String?
}
