import Foundation

/// Which addresses an outbound request may connect to. By default only public ones, and none of this machine's
/// own: a URL a user hands the server (an input to fetch, a webhook) must not reach the server's own machine, its
/// private network or the cloud's metadata service. Checked on the address a connection is about to use (after DNS, on every redirect), so a name
/// that resolves somewhere else the second time cannot slip past.
public struct AddressPolicy: Sendable, Equatable {
    /// Blocks allowed although not public (`--allow-private-urls`).
    public var allowed: [CIDRBlock]

    public init(allowed: [CIDRBlock] = []) { self.allowed = allowed }

    /// Parses `CIDR,CIDR,…` (a bare address is a /32 or /128); a failure names the first entry that is not one.
    public static func parse(_ list: String) -> Result<AddressPolicy, ParseError> {
        var blocks: [CIDRBlock] = []
        for entry in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            guard let block = CIDRBlock(entry) else { return .failure(ParseError(entry: entry)) }
            blocks.append(block)
        }
        return .success(AddressPolicy(allowed: blocks))
    }

    public struct ParseError: Error, Sendable {
        public let entry: String
    }

    /// "a private address", "an unspecified address": a kind of `refusal(of:)` in a sentence.
    public static func phrase(_ kind: String) -> String {
        ("aeiou".contains(kind.prefix(1).lowercased()) ? "an " : "a ") + kind + " address"
    }

    /// The kind of non-public address `address` is, when the policy refuses it; nil when it may be connected to.
    /// A cloud's metadata or credentials address stays refused unless it is allowed by itself (a /32 or /128
    /// entry), not by a block that happens to hold it (`169.254.0.0/16`, `100.64.0.0/10`, `0.0.0.0/0`). An IPv6 address carrying an IPv4 one (mapped,
    /// NAT64, 6to4) is judged by the IPv4 address, where it really leads.
    /// An address of one of this machine's own interfaces is refused too, whatever its block, and opened only by an
    /// entry naming it alone (a loopback address also by a block holding it: that is asking for this machine).
    public func refusal(of address: IPAddress) -> String? {
        refusal(of: address, local: LocalAddresses.shared.current)
    }

    /// `refusal(of:)` with `local` as this machine's addresses; nil when they could not be read, and then any address
    /// but a loopback one may be this machine's.
    func refusal(of address: IPAddress, local: [IPAddress]?) -> String? {
        if let inner = address.embeddedIPv4 ?? Self.tunnelled(address) { return refusal(of: inner, local: local) }
        let metadata = Self.metadata.contains(where: { $0.contains(address) })
        // This machine's own address (not a loopback one) in an allowed block: a private network allowed
        // (`10.0.0.0/8`) opened the server's own 10.0.0.5 too, and with it services bound to 0.0.0.0 there, which
        // Linux reaches through `lo`, past a firewall's rules for the network's interface.
        let own = (local?.contains(address) ?? true) && !Self.isLoopback(address)
        if allowed.contains(where: { $0.contains(address) && (!(metadata || own) || $0.prefix == address.bytes.count * 8) }) { return nil }
        if own && allowed.contains(where: { $0.contains(address) }) { return "local interface" }
        for (block, kind) in Self.reserved where block.contains(address) { return kind }
        return own ? "local interface" : nil
    }

    /// Whether `address` is one of this machine's loopback addresses (127.0.0.0/8, `::1`, or one mapped into IPv6).
    public static func isLoopback(_ address: IPAddress) -> Bool {
        let address = address.embeddedIPv4 ?? address
        return reserved.contains { $0.1 == "loopback" && $0.0.contains(address) }
    }

    /// Where clouds hand out instance metadata and credentials: the instance metadata service (AWS, GCP, Azure,
    /// OCI; AWS's and GCP's IPv6 ones), ECS task credentials, EKS Pod Identity (IPv4 and IPv6), Alibaba Cloud's, OCI's
    /// older one, Scaleway's (IPv4 and IPv6), and Azure's WireServer (168.63.129.16: the host agent's goal state and
    /// extension settings), whose address is public-looking and so was let through.
    static let metadata = ["169.254.169.254/32", "fd00:ec2::254/128", "fd20:ce::254/128", "169.254.170.2/32", "169.254.170.23/32",
                           "fd00:ec2::23/128", "100.100.100.200/32", "192.0.0.192/32", "169.254.42.42/32", "fd00:42::42/128",
                           "168.63.129.16/32"].map { CIDRBlock($0)! }

    /// The IPv4 address inside a NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`) address.
    static func tunnelled(_ address: IPAddress) -> IPAddress? {
        if CIDRBlock("64:ff9b::/96")!.contains(address) { return IPAddress(bytes: Array(address.bytes[12...])) }
        if CIDRBlock("2002::/16")!.contains(address) { return IPAddress(bytes: Array(address.bytes[2..<6])) }
        return nil
    }

    /// The address and its kind when `url`'s host is a literal address the policy refuses (names are only known at
    /// connect time): a refusal that can be given before anything is sent.
    /// An IPv4 host may be written as libcurl reads it too (`127.1`, `2130706433`, `0x7f.0.0.1`, `0177.0.0.1`).
    public func refusal(ofURL url: String) -> (address: IPAddress, kind: String)? {
        guard let host = URLComponents(string: url)?.host,
              let address = IPAddress(host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))) ?? IPAddress(numericHost: host),
              let kind = refusal(of: address) else { return nil }
        return (address, kind)
    }

    /// Non-public blocks, the most specific first (the metadata addresses before the blocks holding them).
    static let reserved: [(CIDRBlock, String)] = metadata.map { ($0, "cloud metadata") } + [
        ("0.0.0.0/8", "unspecified"), ("127.0.0.0/8", "loopback"), ("10.0.0.0/8", "private"), ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"), ("100.64.0.0/10", "CGNAT"), ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"), ("240.0.0.0/4", "reserved"), ("192.0.0.0/24", "reserved"), ("198.18.0.0/15", "reserved"),
        ("::/128", "unspecified"), ("::1/128", "loopback"), ("::/96", "reserved"), ("fc00::/7", "private"), ("fec0::/10", "private"),
        ("fe80::/10", "link-local"), ("ff00::/8", "multicast"), ("64:ff9b:1::/48", "reserved"), ("2001::/32", "reserved"),
        ("192.0.2.0/24", "documentation"), ("198.51.100.0/24", "documentation"), ("203.0.113.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"), ("2001:db8::/32", "documentation"), ("3fff::/20", "documentation"),
    ].map { (CIDRBlock($0.0)!, $0.1) }
}
