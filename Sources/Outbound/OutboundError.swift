/// Why an outbound request failed, with a stable code and a sentence for people (libcurl's own message kept).
public struct OutboundError: Error, Sendable, Equatable {
    /// `url_not_allowed` (the address policy refused where it led), `invalid_url`, `too_large`, `stalled`, `timeout`,
    /// `http_status` (the server answered with an error), `connection_failed`, `canceled`.
    public let code: String
    public let message: String
    /// The final answer's status, when there was one.
    public let status: Int?
    /// Seconds the server asked to be left alone for (`Retry-After` on a 429 or 503), when it said.
    public let retryAfter: Double?

    public init(code: String, message: String, status: Int? = nil, retryAfter: Double? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.retryAfter = retryAfter
    }
}
