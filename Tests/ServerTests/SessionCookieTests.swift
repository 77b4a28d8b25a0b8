import Foundation
import Testing
@testable import Server

/// The page's session cookie as a value: who accepts it, for what, and until when (no sockets, no clock).
@Suite struct SessionCookieTests {
    private func head(_ method: String, _ path: String, cookie: String? = nil, bearer: String? = nil) -> RequestHead {
        var headers = HTTPHeaders()
        if let cookie { headers.set("Cookie", cookie) }
        if let bearer { headers.set("Authorization", "Bearer \(bearer)") }
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map(String.init)
        return RequestHead(method: method, target: path, segments: segments, query: [:], minorVersion: 1, headers: headers)
    }

    /// `name=value` of a `Set-Cookie` line.
    private func pair(_ setCookie: String?) -> String { String(setCookie?.split(separator: ";").first ?? "") }

    @Test func aSessionAuthorizesReadsUntilItExpires() throws {
        let token = BearerToken("first-token")
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let cookie = pair(token.sessionCookie(now: now))
        #expect(cookie.hasPrefix(token.cookieName + "="))
        #expect(token.hasSession(head("GET", "/v1/jobs", cookie: cookie), now: now.addingTimeInterval(11 * 3600)))
        #expect(!token.hasSession(head("GET", "/v1/jobs", cookie: cookie), now: now.addingTimeInterval(12 * 3600 + 1)), "expired after 12 h")
        // Reads only: a cookie made now, on a change, is refused (`check` reads the clock).
        let current = pair(token.sessionCookie())
        #expect(token.check(head("GET", "/v1/jobs", cookie: current)) == nil)
        #expect(token.check(head("HEAD", "/v1/jobs/x/output", cookie: current)) == nil)
        for method in ["POST", "DELETE", "PATCH", "PUT"] {
            #expect(token.check(head(method, "/v1/jobs", cookie: current))?.status == .unauthorized, "\(method) needs the header")
        }
        // A wrong header is not rescued by a good cookie.
        #expect(token.check(head("GET", "/v1/jobs", cookie: current, bearer: "wrong"))?.status == .unauthorized)
        #expect(token.check(head("GET", "/v1/jobs"))?.status == .unauthorized)
        // The page, its assets and whether a token is needed are public; nothing else is.
        for path in ["/", "/assets/abc/app.js", "/v1/session", "/healthz"] { #expect(token.check(head("GET", path)) == nil, "\(path)") }
        #expect(token.check(head("POST", "/v1/session"))?.status == .unauthorized)
        #expect(token.check(head("GET", "/metrics"))?.status == .unauthorized)
    }

    @Test func onlyTheTokensOwnWellFormedSignatureCounts() throws {
        let first = BearerToken("first-token"), second = BearerToken("second-token")
        #expect(first.cookieName != second.cookieName, "servers with different tokens keep apart on one host")
        let cookie = pair(first.sessionCookie())
        let value = String(cookie.split(separator: "=", maxSplits: 1)[1])
        // Another token's server does not take it, even under its own cookie name.
        #expect(!second.hasSession(head("GET", "/", cookie: "\(second.cookieName)=\(value)")))
        let parts = value.split(separator: ".").map(String.init)
        let expiry = parts[0], signature = parts[1]
        let tampered = String(signature.dropLast()) + (signature.last == "0" ? "1" : "0")
        for bad in ["\(expiry).\(tampered)", "0\(expiry).\(signature)", "+\(expiry).\(signature)", "\(Int(expiry)! + 1).\(signature)",
                    "\(expiry)", ".\(signature)", ""] {
            #expect(!first.hasSession(head("GET", "/", cookie: "\(first.cookieName)=\(bad)")), "\(bad)")
        }
        // Other cookies beside it do not matter; only the first of its name is looked at.
        #expect(first.hasSession(head("GET", "/", cookie: "theme=dark; \(cookie); other=1")))
        #expect(!first.hasSession(head("GET", "/", cookie: "\(first.cookieName)=1.2; \(cookie)")))
        #expect(BearerToken(nil).sessionCookie() == nil && !BearerToken(nil).isEnabled && BearerToken("").isEnabled == false)
    }
}
