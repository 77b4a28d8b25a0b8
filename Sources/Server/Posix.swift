import CSystem
import Glibc

/// Every system call the server makes, wrapped once: EINTR is retried, EAGAIN becomes `.wouldBlock`, and any
/// other errno becomes an `IOError` naming the call.
enum Posix {
    enum IOResult: Equatable {
        case processed(Int)
        case wouldBlock
    }

    private static func retrying(_ call: () -> Int, _ reason: @autoclosure () -> String) throws(IOError) -> IOResult {
        while true {
            let result = call()
            if result >= 0 { return .processed(result) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: throw IOError(errnoCode: errno, reason: reason())
            }
        }
    }

    /// Reads into `buffer`; `.processed(0)` means the peer closed.
    static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(IOError) -> IOResult {
        try retrying({ Glibc.read(fd, buffer.baseAddress, buffer.count) }, "read")
    }

    /// Sends without raising SIGPIPE when the peer has gone.
    static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(IOError) -> IOResult {
        try retrying({ Glibc.send(fd, bytes.baseAddress, bytes.count, tc_msg_nosignal()) }, "send")
    }

    /// Sends up to `count` bytes of file `file` from `offset`, advancing it.
    static func sendfile(_ fd: Int32, file: Int32, offset: inout Int64, count: Int) throws(IOError) -> IOResult {
        var position = offset
        let result = try retrying({ tc_sendfile(fd, file, &position, count) }, "sendfile")
        offset = position
        return result
    }

    /// Writes all of `bytes` to a regular file.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(IOError) {
        var written = 0
        while written < bytes.count {
            let chunk = UnsafeRawBufferPointer(rebasing: bytes[written...])
            switch try retrying({ Glibc.write(fd, chunk.baseAddress, chunk.count) }, "write") {
            case .processed(let count): written += count
            case .wouldBlock: continue
            }
        }
    }

    static func accept(_ fd: Int32) throws(IOError) -> Int32? {
        switch try retrying({ Int(tc_accept(fd)) }, "accept") {
        case .processed(let client): return Int32(client)
        case .wouldBlock: return nil
        }
    }

    static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    static func check(_ result: Int32, _ reason: @autoclosure () -> String) throws(IOError) {
        if result < 0 { throw IOError(errnoCode: errno, reason: reason()) }
    }
}
