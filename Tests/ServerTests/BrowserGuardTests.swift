import Foundation
import Server
import Testing
import TestSupport

/// What a page on another site can make a local user's browser send: changes marked cross-site, and (on a loopback
/// address without a token) requests to a name rebound to 127.0.0.1. Real servers, curl setting what browsers set.
@Suite struct BrowserGuardTests {
    @Test func hostNamesAndLoopback() {
        #expect(BrowserGuard.hostName("LocalHost:8080") == "localhost" && BrowserGuard.hostName("[::1]:80") == "::1"
                && BrowserGuard.hostName("127.0.0.1") == "127.0.0.1" && BrowserGuard.hostName("media.example:443") == "media.example")
        for host in ["localhost", "app.localhost", "127.0.0.1", "127.9.8.7", "::1"] { #expect(BrowserGuard.isLoopback(host), "\(host)") }
        for host in ["127.0.0.1.nip.io", "evil.example", "128.0.0.1", "127.0.0", "localhost.example", "::2", ""] {
            #expect(!BrowserGuard.isLoopback(host), "\(host)")
        }
    }

    @Test func aNameReboundToLoopbackIsRefusedWithoutAToken() throws {
        let server = try TestServer(["--allowed-hosts", "media.example"])
        let port = server.port
        let rebound = try server.json("/v1/jobs", ["-H", "Host: rebound.example:\(port)"])
        #expect(rebound.status == 403 && (rebound.object["error"] as? [String: Any])?["code"] as? String == "host_not_allowed", "\(rebound)")
        for host in ["localhost:\(port)", "[::1]:\(port)", "127.0.0.1:\(port)", "media.example"] {
            #expect(try server.json("/v1/jobs", ["-H", "Host: \(host)"]).status == 200, "\(host)")
        }
        // With a token, a rebound page has nothing to gain (it has no token, nor the session cookie of this name).
        let guarded = try TestServer(["--token", "s3cret"])
        let answer = try guarded.json("/v1/jobs", ["-H", "Host: rebound.example", "-H", "Authorization: Bearer s3cret"])
        #expect(answer.status == 200, "\(answer)")
    }

    @Test func aCrossSiteChangeIsRefusedUnlessItsOriginIsAllowed() throws {
        let server = try TestServer(["--cors-origin", "https://player.example"])
        let clip = try Media.path(.audioOnly)
        let refused = try server.json("/v1/jobs", ["-F", "file=@" + clip, "-H", "Sec-Fetch-Site: cross-site", "-H", "Origin: https://evil.example"])
        #expect(refused.status == 403 && (refused.object["error"] as? [String: Any])?["code"] as? String == "cross_site_request", "\(refused)")
        #expect((try server.json("/v1/jobs").object["jobs"] as? [Any])?.isEmpty == true, "no job was made")
        // Reads stay open to any page (the outputs' CORS decides what it may see); the allowed origin may change too.
        #expect(try server.json("/v1/jobs", ["-H", "Sec-Fetch-Site: cross-site", "-H", "Origin: https://evil.example"]).status == 200)
        let allowed = try server.json("/v1/jobs", ["-F", "file=@" + clip, "-H", "Sec-Fetch-Site: cross-site", "-H", "Origin: https://player.example"])
        #expect(allowed.status == 201, "\(allowed)")
        let own = try server.json("/v1/jobs", ["-F", "file=@" + clip, "-H", "Sec-Fetch-Site: same-origin", "-H", "Origin: \(server.base)"])
        #expect(own.status == 201, "the page's own requests: \(own)")
    }
}
