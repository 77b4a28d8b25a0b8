import Glibc

/// An IPv4 or IPv6 address as its bytes (4 or 16, network order): what a connection is actually about to reach.
public struct IPAddress: Sendable, Equatable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// Parses dotted IPv4 (`10.0.0.1`) or IPv6 text (`fe80::1`, `::ffff:127.0.0.1`).
    public init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: v4) { Array($0) }
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: v6) { Array($0) }
        } else {
            return nil
        }
    }

    /// An IPv4 address in any of the spellings `inet_aton` (and libcurl's URL parser) accepts: one to four
    /// numbers, each decimal, octal (`0177`) or hexadecimal (`0x7f`), the last filling the bytes left (`127.1`,
    /// `2130706433`). Nil for anything else, names included.
    public init?(numericHost text: String) {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "x") || $0 == UInt8(ascii: "X")
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
                || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains($0) }) else { return nil }
        var v4 = in_addr()
        guard inet_aton(text, &v4) != 0 else { return nil }
        bytes = withUnsafeBytes(of: v4) { Array($0) }
    }

    /// The address of a `sockaddr_in` or `sockaddr_in6`; nil for other families.
    public init?(socketAddress: UnsafePointer<sockaddr>) {
        switch Int32(socketAddress.pointee.sa_family) {
        case AF_INET:
            let address = UnsafeRawPointer(socketAddress).assumingMemoryBound(to: sockaddr_in.self).pointee.sin_addr
            bytes = withUnsafeBytes(of: address) { Array($0) }
        case AF_INET6:
            let address = UnsafeRawPointer(socketAddress).assumingMemoryBound(to: sockaddr_in6.self).pointee.sin6_addr
            bytes = withUnsafeBytes(of: address) { Array($0) }
        default:
            return nil
        }
    }

    public var isIPv4: Bool { bytes.count == 4 }

    /// The IPv4 address an IPv6 one carries (`::ffff:a.b.c.d`, mapped), which is where it really goes.
    public var embeddedIPv4: IPAddress? {
        guard bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return nil }
        return IPAddress(bytes: Array(bytes[12...]))
    }

    public var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        bytes.withUnsafeBytes { raw in
            _ = inet_ntop(isIPv4 ? AF_INET : AF_INET6, raw.baseAddress, &text, socklen_t(text.count))
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A block of addresses (`10.0.0.0/8`, `fc00::/7`).
public struct CIDRBlock: Sendable, Equatable, CustomStringConvertible {
    public let address: IPAddress
    /// Leading bits that must match.
    public let prefix: Int

    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let address = IPAddress(String(parts[0])) else { return nil }
        let bits = address.bytes.count * 8
        if parts.count == 2 {
            guard let prefix = Int(parts[1]), (0...bits).contains(prefix) else { return nil }
            self.prefix = prefix
        } else {
            prefix = bits
        }
        self.address = address
    }

    public func contains(_ other: IPAddress) -> Bool {
        guard other.bytes.count == address.bytes.count else { return false }
        var left = prefix
        for (mine, theirs) in zip(address.bytes, other.bytes) where left > 0 {
            let mask: UInt8 = left >= 8 ? 0xFF : ~(0xFF >> UInt8(left))
            if mine & mask != theirs & mask { return false }
            left -= 8
        }
        return true
    }

    public var description: String { "\(address)/\(prefix)" }
}
