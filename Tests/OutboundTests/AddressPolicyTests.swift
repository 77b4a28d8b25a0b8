@testable import Outbound
import Testing

/// The address rules outbound requests are held to, as values: no sockets.
@Suite struct AddressPolicyTests {
    @Test(arguments: [
        ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"),
        ("172.16.0.1", "private"), ("172.31.255.255", "private"), ("192.168.1.1", "private"), ("fd12::1", "private"),
        ("169.254.169.254", "cloud metadata"), ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
        ("100.64.0.1", "CGNAT"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"),
        ("::", "unspecified"), ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "cloud metadata"),
        ("255.255.255.255", "reserved"), ("64:ff9b::a9fe:a9fe", "cloud metadata"), ("64:ff9b::7f00:1", "loopback"),
        ("2002:a00:1::1", "private"), ("2002:7f00:1::", "loopback"), ("198.18.0.1", "reserved"), ("192.0.0.8", "reserved"),
        ("fec0::1", "private"), ("2001:0:4136:e378::1", "reserved"), ("192.0.2.2", "documentation"),
        ("198.51.100.7", "documentation"), ("203.0.113.9", "documentation"), ("2001:db8::1", "documentation"),
        ("192.88.99.1", "reserved"), ("3fff::1", "documentation"),
    ])
    func nonPublicAddressesAreRefusedByKind(address: String, kind: String) throws {
        let ip = try #require(IPAddress(address))
        #expect(AddressPolicy().refusal(of: ip) == kind)
    }

    @Test(arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "172.15.255.255", "100.128.0.1", "2606:4700::1111", "192.169.0.1"])
    func publicAddressesPass(address: String) throws {
        #expect(AddressPolicy().refusal(of: try #require(IPAddress(address))) == nil)
    }

    /// This machine's own addresses are refused whatever their block: a public address on its interface reaches
    /// services bound to 0.0.0.0 that a firewall hides from the internet. They were judged by their block alone.
    @Test func thisMachinesOwnAddressesAreRefused() throws {
        let own = try #require(IPAddress("93.184.216.34")), other = try #require(IPAddress("8.8.8.8"))
        #expect(AddressPolicy().refusal(of: own, local: [own]) == "local interface")
        #expect(AddressPolicy().refusal(of: try #require(IPAddress("::ffff:93.184.216.34")), local: [own]) == "local interface")
        #expect(AddressPolicy().refusal(of: other, local: [own]) == nil)
        #expect(try AddressPolicy.parse("93.184.216.34").get().refusal(of: own, local: [own]) == nil, "unless allowed")
        // A block holding it does not open it (an allowed private network opened the server's own address in it, and
        // with it what listens on 0.0.0.0 there); naming it alone does. A loopback block opens loopback addresses.
        let inside = try #require(IPAddress("10.0.0.5")), neighbour = try #require(IPAddress("10.0.0.6"))
        let network = try AddressPolicy.parse("10.0.0.0/8,0.0.0.0/0").get()
        #expect(network.refusal(of: inside, local: [inside]) == "local interface")
        #expect(network.refusal(of: try #require(IPAddress("::ffff:10.0.0.5")), local: [inside]) == "local interface")
        #expect(network.refusal(of: own, local: [own]) == "local interface")
        #expect(network.refusal(of: neighbour, local: [inside]) == nil)
        #expect(try AddressPolicy.parse("10.0.0.0/8,10.0.0.5").get().refusal(of: inside, local: [inside]) == nil)
        let loopback = try #require(IPAddress("127.0.0.1"))
        #expect(try AddressPolicy.parse("127.0.0.0/8").get().refusal(of: loopback, local: [loopback]) == nil)
        #expect(AddressPolicy().refusal(of: inside, local: [inside]) == "private", "not allowed at all: its block's kind")
        // This machine's addresses not known (never read: out of descriptors at the first request): any address may
        // be its own, and only an entry naming it alone opens it. It was an empty list: every own address let through.
        #expect(AddressPolicy().refusal(of: other, local: nil) == "local interface")
        #expect(network.refusal(of: neighbour, local: nil) == "local interface")
        #expect(try AddressPolicy.parse("8.8.8.8").get().refusal(of: other, local: nil) == nil)
        #expect(try AddressPolicy.parse("127.0.0.0/8").get().refusal(of: loopback, local: nil) == nil)
        // The machine's addresses as the kernel lists them, each refused by the policy as it runs: even with every
        // block allowed, as its own (loopback ones are opened by their block). Without the machine's list, each was
        // refused only by its block, which every address a test machine has (private, loopback) already is.
        let listed = try #require(LocalAddresses.read())
        #expect(listed.contains(try #require(IPAddress("127.0.0.1"))), "\(listed)")
        #expect(listed.contains { !AddressPolicy.isLoopback($0) }, "no address but loopback ones to check: \(listed)")
        let everywhere = try AddressPolicy.parse("0.0.0.0/0,::/0").get()
        for address in listed where !AddressPolicy.isLoopback(address) {
            #expect(everywhere.refusal(of: address) == "local interface", "\(address)")
        }
    }

    @Test func kindsReadAsPhrases() {
        #expect(AddressPolicy.phrase("private") == "a private address")
        #expect(AddressPolicy.phrase("unspecified") == "an unspecified address")
        #expect(AddressPolicy.phrase("CGNAT") == "a CGNAT address")
    }

    @Test func allowedBlocksOpenOnlyThemselves() throws {
        let policy = try AddressPolicy.parse("127.0.0.0/8, fd00::/8,192.168.5.7").get()
        #expect(policy.refusal(of: try #require(IPAddress("127.0.0.1"))) == nil)
        #expect(policy.refusal(of: try #require(IPAddress("::ffff:127.0.0.1"))) == nil)
        #expect(policy.refusal(of: try #require(IPAddress("fd00::5"))) == nil)
        #expect(policy.refusal(of: try #require(IPAddress("192.168.5.7"))) == nil)
        #expect(policy.refusal(of: try #require(IPAddress("192.168.5.8"))) == "private")
        #expect(policy.refusal(of: try #require(IPAddress("::1"))) == "loopback")
        #expect(policy.refusal(of: try #require(IPAddress("169.254.169.254"))) == "cloud metadata")
        // A block that happens to hold the metadata address does not open it; naming it alone does.
        let wide = try AddressPolicy.parse("169.254.0.0/16,::/0,0.0.0.0/0").get()
        #expect(wide.refusal(of: try #require(IPAddress("169.254.1.1"))) == nil)
        #expect(wide.refusal(of: try #require(IPAddress("169.254.169.254"))) == "cloud metadata")
        #expect(wide.refusal(of: try #require(IPAddress("64:ff9b::a9fe:a9fe"))) == "cloud metadata")
        #expect(try AddressPolicy.parse("169.254.169.254").get().refusal(of: try #require(IPAddress("169.254.169.254"))) == nil)
        // Nor those of the other credential services: ECS task roles, EKS Pod Identity, Alibaba's, OCI's older one
        // (a CGNAT block is a common allowance for a Tailscale network).
        let wider = try AddressPolicy.parse("169.254.0.0/16,100.64.0.0/10,192.0.0.0/24,::/0").get()
        for address in ["169.254.170.2", "169.254.170.23", "fd00:ec2::23", "100.100.100.200", "192.0.0.192", "169.254.42.42"] {
            #expect(wider.refusal(of: try #require(IPAddress(address))) == "cloud metadata", "\(address)")
        }
        #expect(wider.refusal(of: try #require(IPAddress("100.100.100.201"))) == nil)
        // GCP's IPv6 metadata address and Scaleway's, inside the private IPv6 block a VPC allowance names.
        let vpc = try AddressPolicy.parse("fc00::/7").get()
        for address in ["fd20:ce::254", "fd00:42::42", "fd00:ec2::254"] {
            #expect(vpc.refusal(of: try #require(IPAddress(address))) == "cloud metadata", "\(address)")
        }
        #expect(vpc.refusal(of: try #require(IPAddress("fd20:ce::255"))) == nil)
        // Azure's WireServer is a public-looking address: refused by default, as the metadata service is.
        #expect(policy.refusal(of: try #require(IPAddress("168.63.129.16"))) == "cloud metadata")
        #expect(policy.refusal(ofURL: "http://168.63.129.16/machine/?comp=goalstate")?.kind == "cloud metadata")
        #expect(policy.refusal(of: try #require(IPAddress("168.63.129.17"))) == nil)
    }

    /// A literal address in a URL is refused before anything is sent, in every spelling libcurl reads as one.
    @Test func literalAddressesAreRefusedInEverySpelling() throws {
        let policy = AddressPolicy()
        for url in ["http://127.1/x.mp4", "http://2130706433:1/", "http://0x7f.0.0.1/", "http://0177.0.0.1/", "http://0/",
                    "http://0x7f000001/", "http://[::127.0.0.1]/", "http://[::ffff:10.0.0.1]/", "http://169.254.43518/"] {
            #expect(policy.refusal(ofURL: url) != nil, "\(url)")
        }
        #expect(policy.refusal(ofURL: "http://169.254.43518/")?.kind == "cloud metadata")
        for url in ["http://8.8.8.8/", "http://example.com/", "http://deadbeef/", "http://1.2.3.4.5/", "http://134744072/"] {
            #expect(policy.refusal(ofURL: url) == nil, "\(url)")
        }
    }

    @Test func badListsNameTheirEntry() {
        for (list, entry) in [("10.0.0.0/33", "10.0.0.0/33"), ("127.0.0.1,localhost", "localhost"), ("::/129", "::/129")] {
            guard case .failure(let error) = AddressPolicy.parse(list) else {
                Issue.record("\(list) parsed")
                continue
            }
            #expect(error.entry == entry)
        }
    }

    @Test func blocksMatchOnTheirPrefixOnly() throws {
        let block = try #require(CIDRBlock("172.16.0.0/12"))
        #expect(block.contains(try #require(IPAddress("172.20.1.1"))))
        #expect(!block.contains(try #require(IPAddress("172.32.0.0"))))
        #expect(!block.contains(try #require(IPAddress("::1"))))
        #expect(try #require(CIDRBlock("0.0.0.0/0")).contains(try #require(IPAddress("8.8.8.8"))))
    }
}
