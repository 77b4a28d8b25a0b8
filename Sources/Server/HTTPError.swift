/// An error that becomes an HTTP response: `{"error": {"code", "message"}}` with the status and extra headers.
public struct HTTPError: Error, Sendable {
    public let status: HTTPStatus
    /// Stable snake_case identifier.
    public let code: String
    /// What went wrong and what to change.
    public let message: String
    public var headers: HTTPHeaders
    /// Whether the connection must be closed after the response (the request could not be framed).
    public var closeConnection: Bool

    public init(_ status: HTTPStatus, _ code: String, _ message: String, headers: HTTPHeaders = HTTPHeaders(),
                closeConnection: Bool = false) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.closeConnection = closeConnection
    }

    /// A framing error: 400 and the connection closes, since the rest of the stream cannot be trusted.
    static func malformed(_ message: String) -> HTTPError {
        HTTPError(.badRequest, "malformed_request", message, closeConnection: true)
    }
}
