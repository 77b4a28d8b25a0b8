import Outbound
import Testing
import TestSupport

/// Transfers through libcurl against this machine's own addresses.
@Suite struct CurlTransferTests {
    /// A name whose addresses the policy partly refuses (`localhost`: ::1 refused, 127.0.0.1 allowed here) fails, when
    /// the allowed one is down, as a connection failure, which a webhook sender retries: it was reported as a
    /// refusal, which the sender gives up on at once.
    @Test func aDownAddressBesideARefusedOneIsAConnectionFailure() throws {
        let url = "http://localhost:\(OutboundPeer.freePort())/"
        #expect { try CurlTransfer().perform(OutboundRequest(url: url), policy: AddressPolicy()) } throws: {
            ($0 as? OutboundError)?.code == "url_not_allowed"
        }
        let loopbackV4 = AddressPolicy(allowed: [try #require(CIDRBlock("127.0.0.0/8"))])
        #expect { try CurlTransfer().perform(OutboundRequest(url: url), policy: loopbackV4) } throws: {
            ($0 as? OutboundError)?.code == "connection_failed"
        }
    }
}
