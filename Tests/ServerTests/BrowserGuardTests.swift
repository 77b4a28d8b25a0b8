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
        // Where the server would listen, however it is spelled.
        for host in ["127.1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "127.0.0.1", "localhost"] {
            #expect(BrowserGuard.resolvesToLoopbackOnly(host), "\(host)")
        }
        for host in ["0.0.0.0", "::", "192.0.2.1", "::ffff:192.0.2.1", "no-such-name.invalid"] {
            #expect(!BrowserGuard.resolvesToLoopbackOnly(host), "\(host)")
        }
    }

    /// `--host` spelled otherwise than a loopback name (`127.1`, a name the hosts file maps to 127.0.1.1) listens
    /// on loopback all the same, and gets the same Host check: it got none, and a rebound name read every job. The
    /// name given is one requests may use.
    @Test func aLoopbackAddressSpelledOtherwiseIsGuardedToo() throws {
        let server = try TestServer(["--host", "127.1"])
        let port = server.port
        let rebound = try server.json("/v1/jobs", ["-H", "Host: rebound.example:\(port)"])
        #expect(rebound.status == 403 && (rebound.object["error"] as? [String: Any])?["code"] as? String == "host_not_allowed", "\(rebound)")
        for host in ["127.1:\(port)", "127.0.0.1:\(port)", "localhost:\(port)"] {
            #expect(try server.json("/v1/jobs", ["-H", "Host: \(host)"]).status == 200, "\(host)")
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

    /// Another origin on the same site (another port of localhost, another subdomain) is another page too, and a
    /// browser that sends no `Sec-Fetch-Site` (plain HTTP to a name on the network) is judged by its `Origin`.
    @Test func aChangeFromAnotherPortOrWithoutFetchMetadataIsRefused() throws {
        let server = try TestServer()
        let clip = try Media.path(.audioOnly)
        let port = server.port
        for headers in [["Sec-Fetch-Site: same-site", "Origin: http://localhost:3000"],
                        ["Origin: http://evil.example"], ["Origin: null"], ["Origin: http://127.0.0.1:\(port + 1)"]] {
            let refused = try server.json("/v1/jobs", ["-F", "file=@" + clip] + headers.flatMap { ["-H", $0] })
            #expect(refused.status == 403 && (refused.object["error"] as? [String: Any])?["code"] as? String == "cross_site_request",
                    "\(headers): \(refused)")
        }
        #expect((try server.json("/v1/jobs").object["jobs"] as? [Any])?.isEmpty == true, "no job was made")
        // The page's own origin, a proxy's names for it, and clients that are not browsers.
        for headers in [["Origin: \(server.base)"], ["Origin: http://localhost:\(port)", "Host: localhost:\(port)"],
                        ["Origin: https://media.example", "X-Forwarded-Host: media.example"],
                        ["Origin: http://media.example:8080", #"Forwarded: for=10.0.0.1;host="media.example:8080";proto=http"#], []] {
            let made = try server.json("/v1/jobs", ["-F", "file=@" + clip] + headers.flatMap { ["-H", $0] })
            #expect(made.status == 201, "\(headers): \(made)")
        }
    }

    /// Behind a proxy that passes its own `Host` and no forwarded one (nginx's default), `--allowed-hosts` names the
    /// page's host: its changes are its own.
    @Test func anAllowedHostsPageMayMakeChangesBehindAProxyThatHidesItsName() throws {
        let server = try TestServer(["--allowed-hosts", "media.example"])
        let clip = try Media.path(.audioOnly)
        let made = try server.json("/v1/jobs", ["-F", "file=@" + clip, "-H", "Origin: http://media.example:8080"])
        #expect(made.status == 201, "\(made)")
        let other = try server.json("/v1/jobs", ["-F", "file=@" + clip, "-H", "Origin: http://evil.example"])
        #expect(other.status == 403, "\(other)")
    }

    /// `--cors-origin '*'` lets any page upload through tus (what it is documented for), not make every change.
    @Test func anyOriginMayUploadThroughTusButChangeNothingElse() throws {
        let server = try TestServer(["--cors-origin", "*"])
        let page = ["-H", "Sec-Fetch-Site: cross-site", "-H", "Origin: https://uploads.example"]
        let refused = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))] + page)
        #expect(refused.status == 403 && (refused.object["error"] as? [String: Any])?["code"] as? String == "cross_site_request",
                "\(refused)")
        let upload = try server.curl("/v1/tus", ["-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: 10"] + page)
        #expect(upload.status == 201, "\(upload)")
    }
}
