import Crypto
import Foundation

/// Optional API authentication: with a token set, every route but `/healthz`, `/readyz`, CORS preflights
/// (`OPTIONS`) and the browser page with its assets needs `Authorization: Bearer <token>`, compared in constant time.
///
/// The page signs in once (`POST /v1/session` with the header) and gets a session cookie (`HttpOnly`,
/// `SameSite=Strict`, 12 hours, signed with a key derived from the token, so every node with the same token accepts
/// it and a new token ends every session). The cookie is accepted for reads only (`GET`, `HEAD`): it lets the
/// browser's own requests (an event stream, a `<video>`, a download link) through without the token in a URL,
/// while a change always needs the header, which another site cannot make a browser send (no CSRF).
///
/// Signing out clears the cookie in that browser; a copy of it stays valid until it expires or the token changes
/// (sessions are not stored anywhere). The cookie's name carries a digest of the key, so servers with different
/// tokens on one host (cookies ignore ports) do not overwrite each other's sessions.
public struct BearerToken: Sendable {
    private let token: [UInt8]?
    private let sessionKey: Data?
    /// `transcoderd_session_<8 hex digits of the key's digest>`.
    let cookieName: String

    /// Seconds a session lasts.
    static let sessionLifetime = 12 * 3600

    public init(_ token: String?) {
        let token = token.flatMap { $0.isEmpty ? nil : $0 }
        self.token = token.map { Array($0.utf8) }
        sessionKey = token.map { token in
            let digest = Digest()
            Data(("transcoderd session key\n" + token).utf8).withUnsafeBytes { digest.update($0) }
            return digest.finishBytes()
        }
        cookieName = "transcoderd_session_" + (sessionKey.map { Digest.hex(Digest.hmacSHA256(key: $0, message: Data("cookie name".utf8))).prefix(8) } ?? "none")
    }

    /// Whether requests need the token.
    public var isEnabled: Bool { token != nil }

    /// The `Set-Cookie` value of a new session, from `now`; nil without a token. A browser session's cookie (no
    /// `Max-Age`), its signed expiry still `sessionLifetime` away: the page keeps the token for its tab only, and a
    /// cookie kept 12 hours outlived it, authorising every read in that browser after the tab and the browser were
    /// closed (a shared computer) while the page, without the token, showed its sign-in form.
    /// `secure`: the page came over HTTPS (through a proxy that says so): the cookie is then never sent in clear.
    func sessionCookie(now: Date = Date(), secure: Bool = false) -> String? {
        guard let sessionKey else { return nil }
        let expiry = Int(now.timeIntervalSince1970) + Self.sessionLifetime
        return "\(cookieName)=\(expiry).\(Self.signature(expiry: expiry, key: sessionKey)); Path=/; HttpOnly; SameSite=Strict"
            + (secure ? "; Secure" : "")
    }

    /// Whether a proxy in front says the request came over HTTPS (`X-Forwarded-Proto: https`, or `proto=https` in
    /// `Forwarded`). Only ever used to add `Secure` to a cookie: a client lying about it only restricts its own.
    static func cameOverHTTPS(_ headers: HTTPHeaders) -> Bool {
        if headers["X-Forwarded-Proto"]?.split(separator: ",").first?.trimmingCharacters(in: .whitespaces).lowercased() == "https" { return true }
        guard let forwarded = headers["Forwarded"]?.split(separator: ",").first else { return false }
        return forwarded.split(separator: ";").contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "proto=https" }
    }

    /// The `Set-Cookie` value that ends a session.
    var expiredCookie: String { "\(cookieName)=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" }

    /// Whether the request's `Cookie` header holds a session this token signed that has not expired: the first
    /// cookie of the session's name only (one signature checked per request, whatever the header holds).
    public func hasSession(_ head: RequestHead, now: Date = Date()) -> Bool {
        guard let sessionKey, let header = head.headers["Cookie"] else { return false }
        let pairs = header.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1) }
        guard let pair = pairs.first(where: { $0.count == 2 && $0[0] == cookieName }) else { return false }
        let value = pair[1].split(separator: ".", maxSplits: 1)
        // The expiry as this server writes it (digits only), still ahead.
        guard value.count == 2, !value[0].isEmpty, value[0].count <= 12, value[0].allSatisfy(\.isASCII), value[0].allSatisfy(\.isNumber),
              value[0].first != "0", let expiry = Int(value[0]), expiry > Int(now.timeIntervalSince1970) else { return false }
        return Self.constantTimeEquals(Array(value[1].utf8), Array(Self.signature(expiry: expiry, key: sessionKey).utf8))
    }

    /// A session's signature: HMAC-SHA256 of its expiry under the key, in hex.
    private static func signature(expiry: Int, key: Data) -> String {
        Digest.hex(Digest.hmacSHA256(key: key, message: Data("session \(expiry)".utf8)))
    }

    /// nil when the request may go on; a 401 otherwise.
    public func check(_ head: RequestHead) -> HTTPError? {
        guard let token else { return nil }
        if head.segments == ["healthz"] || head.segments == ["readyz"] { return nil }
        // A CORS preflight never carries credentials; the routes that answer one send back headers only.
        if head.method == "OPTIONS" { return nil }
        let reading = head.method == "GET" || head.method == "HEAD"
        // The page, its assets and whether a token is needed hold no data: anyone may read them (the page then asks
        // for the token).
        if reading && (head.segments == [""] || head.segments.first == "assets" || head.segments == ["v1", "session"]) { return nil }
        let presented = head.headers["Authorization"].flatMap { value -> [UInt8]? in
            guard value.count > 7, value.prefix(7).lowercased() == "bearer " else { return nil }
            return Array(value.dropFirst(7).trimmingCharacters(in: .whitespaces).utf8)
        }
        if let presented, Self.constantTimeEquals(presented, token) { return nil }
        if presented == nil, reading, hasSession(head) { return nil }
        // A token given and wrong is said to be (RFC 6750 §3), so a client tells it from one it forgot to send.
        guard presented != nil else {
            return HTTPError(.unauthorized, "unauthorized", "Send Authorization: Bearer <token>.",
                             headers: HTTPHeaders([("WWW-Authenticate", "Bearer")]))
        }
        return HTTPError(.unauthorized, "unauthorized", "The token sent is not this server's.",
                         headers: HTTPHeaders([("WWW-Authenticate", #"Bearer error="invalid_token""#)]))
    }

    /// Compares every byte whatever the first difference, so timing says nothing about the token.
    static func constantTimeEquals(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        var difference = UInt8(left.count == right.count ? 0 : 1)
        for index in 0..<max(left.count, right.count) {
            difference |= (index < left.count ? left[index] : 0) ^ (index < right.count ? right[index] : 0)
        }
        return difference == 0
    }
}
