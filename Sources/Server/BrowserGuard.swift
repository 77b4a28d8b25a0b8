import Glibc
import Outbound
/// Refuses what a web page on another site can make a local user's browser send to this server, before any token
/// is looked at:
/// - a change (any method but `GET`, `HEAD`, `OPTIONS`) from a page of another origin, unless `--cors-origin` names
///   that origin (a player or upload page elsewhere; `*` covers the tus uploads only, the routes it is documented
///   for). A form or a `no-cors` fetch needs no preflight: without this, any page could start jobs (and webhooks
///   to where it likes) on a server without a token. Another origin is what the browser marks `Sec-Fetch-Site:
///   cross-site` or `same-site` (another port of localhost, another subdomain); a browser that sends no
///   `Sec-Fetch-Site` (plain HTTP to an address on the network, older browsers) is judged by its `Origin`, which
///   must name the server as the request does (`Host`, a proxy's `X-Forwarded-Host` or `Forwarded: host=`) or be
///   one of `--allowed-hosts`. Clients that are not browsers send neither header and pass.
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
        if changes, isFromAnotherOrigin(head), !allowsChanges(from: head) {
            return HTTPError(.forbidden, "cross_site_request",
                             "A page on another site may not change anything here (allow its origin with --cors-origin).")
        }
        return nil
    }

    /// Whether a browser sent `head` for a page of another origin. Without fetch metadata, the `Origin` must name
    /// the server as the request does (`Host`; a proxy's `X-Forwarded-Host` or `Forwarded: host=`), or be one of
    /// `--allowed-hosts` (a proxy that passes none of these, as nginx's default `proxy_pass` does).
    func isFromAnotherOrigin(_ head: RequestHead) -> Bool {
        if let site = head.headers["Sec-Fetch-Site"]?.trimmingCharacters(in: .whitespaces).lowercased() {
            return site == "cross-site" || site == "same-site"
        }
        guard let origin = head.headers["Origin"]?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        // `scheme://host[:port]`; "null" (a sandboxed frame, a file) names no server.
        guard let separator = origin.range(of: "://") else { return true }
        let authority = String(origin[separator.upperBound...])
        if allowedHosts.contains(Self.hostName(authority)) { return false }
        let defaultPort = origin.hasPrefix("https://") ? ":443" : ":80"
        let forwarded = head.headers["Forwarded"]?.split(separator: ",").first?.split(separator: ";").lazy
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .first { $0.lowercased().hasPrefix("host=") }
            .map { String($0.dropFirst(5).filter { $0 != "\"" }) }
        let names = [head.headers["Host"], head.headers["X-Forwarded-Host"]?.split(separator: ",").first.map(String.init), forwarded]
            .compactMap { $0?.trimmingCharacters(in: .whitespaces).lowercased() }
        return !names.contains { $0 == authority || $0 == authority + defaultPort || $0 + defaultPort == authority }
    }

    /// Whether `--cors-origin` lets the request's origin change what it asks to: an origin it names, anything;
    /// `*`, the tus uploads.
    private func allowsChanges(from head: RequestHead) -> Bool {
        guard let origin = head.headers["Origin"] else { return false }
        if cors.origins.contains(CORSPolicy.serialized(origin)) { return true }
        return cors.origins.contains("*") && head.segments.count >= 2 && head.segments[0] == "v1" && head.segments[1] == "tus"
    }

    /// The name of a `Host` value, lowercased, without its port or an IPv6 literal's brackets.
    public static func hostName(_ value: String) -> String {
        let lowered = value.trimmingCharacters(in: .whitespaces).lowercased()
        if lowered.hasPrefix("["), let close = lowered.firstIndex(of: "]") {
            return String(lowered[lowered.index(after: lowered.startIndex)..<close])
        }
        return String(lowered.prefix { $0 != ":" })
    }

    /// Whether every address `host` resolves to for listening (as the server binds it) is a loopback one: a name
    /// the hosts file gives 127.0.1.1 (Debian's own host name), `ip6-localhost`, `127.1`, `0:0:0:0:0:0:0:1`. False
    /// when it does not resolve, or resolves to any other address (a wildcard included).
    public static func resolvesToLoopbackOnly(_ host: String) -> Bool {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, list != nil else { return false }
        defer { freeaddrinfo(list) }
        var entry = list
        var any = false
        while let info = entry {
            entry = info.pointee.ai_next
            guard let socketAddress = info.pointee.ai_addr, let address = IPAddress(socketAddress: socketAddress) else { continue }
            guard AddressPolicy.isLoopback(address) else { return false }
            any = true
        }
        return any
    }

    /// `localhost` (and names under it, RFC 6761), 127.0.0.0/8, `::1`.
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}
