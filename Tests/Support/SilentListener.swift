import Foundation
import Glibc

/// A socket listening on 127.0.0.1 that never accepts: connections wait in its backlog and, past it, their packets
/// are dropped, as with a server that hangs or a firewall. Closed by `close()` or when released.
public final class SilentListener {
    public let descriptor: Int32
    public let address: sockaddr_in
    public var port: Int { Int(UInt16(bigEndian: address.sin_port)) }
    private var closed = false

    public init(backlog: Int32) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let descriptor = descriptor
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
        }
        self.address = address
        guard bound, listen(descriptor, backlog) == 0 else {
            Glibc.close(descriptor)
            closed = true
            throw ShellError(message: "listening on 127.0.0.1 failed: \(String(cString: strerror(errno)))")
        }
    }

    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(descriptor)
    }

    deinit { close() }
}
