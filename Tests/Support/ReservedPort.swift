import Foundation
import Glibc

/// A port on 127.0.0.1 held for a test: bound (with SO_REUSEADDR) but not listening, so a connection to it is refused
/// and no other socket of this machine is given it, until a listener of the test's own (which sets SO_REUSEADDR too,
/// as Python's servers do) binds it beside this one, or `release()`. A port found free and let go at once could be
/// taken by any other test's connection or server before the test listened on it.
public final class ReservedPort: @unchecked Sendable {
    // @unchecked: the descriptor is closed once, by release or deinit, on the test's thread.
    public let port: Int
    private var descriptor: Int32

    public init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw ShellError(message: "socket: \(String(cString: strerror(errno)))") }
        var on: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(descriptor, raw, length) == 0 && getsockname(descriptor, raw, &length) == 0
            }
        }
        guard bound else {
            close(descriptor)
            throw ShellError(message: "bind: \(String(cString: strerror(errno)))")
        }
        self.descriptor = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Lets the port go (done by deinit too).
    public func release() {
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
    }

    deinit { release() }
}
