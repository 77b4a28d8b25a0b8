import Foundation
import Glibc
@testable import Outbound
import Testing
import TestSupport

/// Transfers through libcurl against this machine's own addresses.
@Suite struct CurlTransferTests {
    /// A name whose addresses the policy partly refuses (`localhost`: ::1 refused, 127.0.0.1 allowed here) fails, when
    /// the allowed one is down, as a connection failure, which a webhook sender retries: it was reported as a
    /// refusal, which the sender gives up on at once.
    @Test func aDownAddressBesideARefusedOneIsAConnectionFailure() throws {
        // Both of `localhost`'s addresses, whatever the hosts file says (this machine's names it 127.0.0.1 alone,
        // and the refused one was then never tried), ::1 first.
        let reserved = try ReservedPort()
        let port = reserved.port
        defer { reserved.release() }
        let url = "http://localhost:\(port)/"
        var request = OutboundRequest(url: url)
        request.resolving = ["localhost:\(port):[::1],127.0.0.1"]
        #expect { try CurlTransfer().perform(request, policy: AddressPolicy()) } throws: {
            ($0 as? OutboundError)?.code == "url_not_allowed"
        }
        let loopbackV4 = AddressPolicy(allowed: [try #require(CIDRBlock("127.0.0.0/8"))])
        #expect { try CurlTransfer().perform(request, policy: loopbackV4) } throws: {
            ($0 as? OutboundError)?.code == "connection_failed"
        }
    }

    /// A connection not made in time (packets dropped, as by a firewall; here a listener whose backlog is full) is a
    /// connection failure, tried again like a refused one: it was `timeout`, as a transfer that took too long in all,
    /// and a job whose input was on a server behind a firewall dropping packets for a moment failed for good; behind a
    /// redirect too.
    @Test func aConnectionNotMadeInTimeIsAConnectionFailure() throws {
        let listener = try SilentListener(backlog: 0)
        var address = listener.address
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        // Never accepted: the backlog fills, and further connections' packets are dropped.
        var clients: [Int32] = []
        defer { clients.forEach { close($0) } }
        for _ in 0..<4 {
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) } }
            clients.append(client)
        }
        let url = "http://127.0.0.1:\(listener.port)/"
        let loopbackV4 = AddressPolicy(allowed: [try #require(CIDRBlock("127.0.0.0/8"))])
        let started = Date()
        #expect { try CurlTransfer().perform(OutboundRequest(url: url, timeout: 2), policy: loopbackV4) } throws: {
            ($0 as? OutboundError)?.code == "connection_failed" && ($0 as? OutboundError)?.message.contains("in time") == true
        }
        #expect(Date().timeIntervalSince(started) < 10)
        // The same behind a redirect from a server that answers (libcurl adds each hop's connect time up: the
        // first one's made the second's look connected, and the failure was a timeout, not tried again).
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let redirected = peer.base + "/redirect?to=" + (url.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? url)
        #expect { try CurlTransfer().perform(OutboundRequest(url: redirected, maxRedirects: 5, timeout: 2), policy: loopbackV4) } throws: {
            ($0 as? OutboundError)?.code == "connection_failed" && ($0 as? OutboundError)?.message.contains("in time") == true
        }
        // A transfer that connected and then took too long is a timeout still.
        #expect { try CurlTransfer().perform(OutboundRequest(url: peer.base + "/silent", timeout: 1), policy: loopbackV4) } throws: {
            ($0 as? OutboundError)?.code == "timeout"
        }
    }
}
