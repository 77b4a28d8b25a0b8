import Foundation
import Glibc
import Locks

/// The addresses of this machine's own interfaces (`getifaddrs`), read again at most every 10 s. A URL leading to one
/// reaches the server's machine whatever block the address is in: a public address on `eth0` reaches services bound
/// to `0.0.0.0` that a firewall hides from the internet (Linux delivers such traffic through `lo`).
final class LocalAddresses: Sendable {
    static let shared = LocalAddresses()
    private let cache = LockedValue<(read: ContinuousClock.Instant, addresses: [IPAddress])?>(nil)

    /// A list that could not be read is not kept: the last one read stands, and the next call reads again; nil when
    /// none was ever read (then every address may be this machine's). An empty list was kept for 10 s (out of
    /// descriptors, say), and with it URLs to this machine's own public address were let through.
    var current: [IPAddress]? {
        let now = ContinuousClock.now
        let cached = cache.withLock { $0 }
        if let cached, now - cached.read < .seconds(10) { return cached.addresses }
        guard let addresses = Self.read() else { return cached?.addresses }
        cache.withLock { $0 = (now, addresses) }
        return addresses
    }

    /// Every interface's IPv4 and IPv6 addresses now; nil when they cannot be listed.
    static func read() -> [IPAddress]? {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return nil }
        defer { freeifaddrs(list) }
        var addresses: [IPAddress] = []
        var entry = list
        while let current = entry {
            if let address = current.pointee.ifa_addr, let ip = IPAddress(socketAddress: address) { addresses.append(ip) }
            entry = current.pointee.ifa_next
        }
        return addresses
    }
}
