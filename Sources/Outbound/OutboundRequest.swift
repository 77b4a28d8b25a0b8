import Foundation

/// One outbound HTTP request: where, how, and the limits it runs under.
public struct OutboundRequest: Sendable {
    public var url: String
    /// `GET` or `POST`.
    public var method: String
    public var headers: [(String, String)]
    public var body: Data?
    /// Redirects followed at most (0: none; a 3xx is then the answer).
    public var maxRedirects: Int
    /// The whole exchange, in seconds.
    public var timeout: Double
    /// Seconds without a byte arriving after which the transfer stops (nil: only `timeout`).
    public var stallTimeout: Double?
    /// Bytes a second that must arrive on average over every `stallTimeout` seconds once the body has begun (nil:
    /// any pace): a server that trickles a byte now and then is as stuck as one that sends none.
    public var minimumRate: Int64?
    /// Bytes of body accepted at most (nil: any).
    public var maxBytes: Int64?
    /// Whether the answer's body is read: without, the exchange ends once the final answer's status and headers are
    /// in (a webhook receiver that answers 200 and then takes its time over the body has still answered 200).
    public var readsBody = true
    /// Addresses given for names instead of asking the resolver (libcurl's `CURLOPT_RESOLVE`, `host:port:address,…`),
    /// for tests: a name with several addresses on a machine whose hosts file has none. Each is still checked by the
    /// address policy where it is connected to.
    var resolving: [String] = []

    public init(url: String, method: String = "GET", headers: [(String, String)] = [], body: Data? = nil,
                maxRedirects: Int = 0, timeout: Double = 15, stallTimeout: Double? = nil, minimumRate: Int64? = nil, maxBytes: Int64? = nil) {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.maxRedirects = maxRedirects
        self.timeout = timeout
        self.stallTimeout = stallTimeout
        self.minimumRate = minimumRate
        self.maxBytes = maxBytes
    }
}

/// The final answer to an `OutboundRequest` (after redirects).
public struct OutboundResponse: Sendable {
    public let status: Int
    /// The final answer's headers, names lowercased.
    public let headers: [(String, String)]
    /// Body bytes received (passed to the sink, or kept in `body` when there was none).
    public let bytes: Int64
    /// The body, when no sink took it (at most 64 KiB kept).
    public let body: Data
    /// The URL the answer came from, after redirects.
    public let url: String

    public func header(_ name: String) -> String? {
        let lowered = name.lowercased()
        return headers.first { $0.0 == lowered }?.1
    }
}
