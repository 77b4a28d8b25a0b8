/// Refuses what a web page on another site can make a local user's browser send to this server, before any token
/// is looked at:
/// - a change (any method but `GET`, `HEAD`, `OPTIONS`) that the browser marks `Sec-Fetch-Site: cross-site`, unless
///   its `Origin` is one `--cors-origin` allows (a player or upload page elsewhere). A form or a `no-cors` fetch
///   needs no preflight: without this, any page could start jobs (and webhooks to where it likes) on a server
///   without a token.
/// - with `checksHost` (bound to a loopback address, no token), a `Host` that is neither a loopback name nor one of
///   `allowedHosts`: a page whose name its owner points at 127.0.0.1 (DNS rebinding) is same-origin with this server
///   and could read every job and output.
public struct BrowserGuard: Sendable {
    let cors: CORSPolicy
    let checksHost: Bool
    let allowedHosts: Set<String>

    public init(cors: CORSPolicy, checksHost: Bool, allowedHosts: [String] = []) {
        self.cors = cors
        self.checksHost = checksHost
        self.allowedHosts = Set(allowedHosts.map { $0.lowercased() })
    }

    public func check(_ head: RequestHead) -> HTTPError? {
        // Health checks say nothing worth rebinding a name for, and monitors may name the server as they like.
        let health = head.segments == ["healthz"] || head.segments == ["readyz"]
        if checksHost, !health, let host = head.headers["Host"].map(Self.hostName), !Self.isLoopback(host), !allowedHosts.contains(host) {
            return HTTPError(.forbidden, "host_not_allowed",
                             "This server listens on a loopback address and answers only to localhost; "
                                 + "add \(host.prefix(100)) with --allowed-hosts (or set a token).")
        }
        let changes = !["GET", "HEAD", "OPTIONS"].contains(head.method)
        if changes, head.headers["Sec-Fetch-Site"]?.lowercased() == "cross-site",
           !cors.allows(origin: head.headers["Origin"]) {
            return HTTPError(.forbidden, "cross_site_request",
                             "A page on another site may not change anything here (allow its origin with --cors-origin).")
        }
        return nil
    }

    /// The name of a `Host` value, lowercased, without its port or an IPv6 literal's brackets.
    public static func hostName(_ value: String) -> String {
        let lowered = value.trimmingCharacters(in: .whitespaces).lowercased()
        if lowered.hasPrefix("["), let close = lowered.firstIndex(of: "]") {
            return String(lowered[lowered.index(after: lowered.startIndex)..<close])
        }
        return String(lowered.prefix { $0 != ":" })
    }

    /// `localhost` (and names under it, RFC 6761), 127.0.0.0/8, `::1`.
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}
