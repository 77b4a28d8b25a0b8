import CSystem
import Glibc

/// Connections past the cap and its spares, after their 503: our side is shut, and what the client sends is read
/// and dropped until it closes or a second or two pass. Closed at once, a client whose request had already arrived
/// (most send right after connecting) got a reset, which destroyed the 503 before it was read: under overload
/// clients mostly saw a network error without `Retry-After`, and retried at once. Each costs a descriptor and no
/// connection object; past `limit` of them (on each event loop) they close at once as before.
struct TurnedAwayConnections {
    static let limit = 64
    /// How long one lingers at least (the loop's sweep closes it within a second after).
    static let linger = Duration.seconds(1)

    private var open: [UInt64: (fd: Int32, since: ContinuousClock.Instant)] = [:]

    /// Lingers `fd` (its answer written), watched under `token`; false when full or it cannot be watched (the
    /// caller then closes it).
    mutating func add(_ fd: Int32, token: UInt64, now: ContinuousClock.Instant, eventLoop: EventLoop) -> Bool {
        guard open.count < Self.limit else { return false }
        shutdown(fd, Int32(SHUT_WR))
        do {
            try eventLoop.register(fd, token: token, events: tc_epoll_in | tc_epoll_rdhup)
        } catch {
            return false
        }
        open[token] = (fd, now)
        return true
    }

    func contains(_ token: UInt64) -> Bool { open[token] != nil }

    /// Reads and drops what arrived; closes at the client's end of file or a failed read.
    mutating func drain(_ token: UInt64, into buffer: UnsafeMutableRawBufferPointer, eventLoop: EventLoop) {
        guard let fd = open[token]?.fd else { return }
        for _ in 0..<16 {
            switch try? Posix.read(fd, into: buffer) {
            case .wouldBlock: return
            case .processed(let count) where count > 0: continue
            default:
                close(token, eventLoop: eventLoop)
                return
            }
        }
    }

    /// Closes those that have lingered long enough.
    mutating func closeLingered(now: ContinuousClock.Instant, eventLoop: EventLoop) {
        for (token, entry) in open where entry.since.duration(to: now) >= Self.linger { close(token, eventLoop: eventLoop) }
    }

    mutating func closeAll(eventLoop: EventLoop) {
        for token in Array(open.keys) { close(token, eventLoop: eventLoop) }
    }

    private mutating func close(_ token: UInt64, eventLoop: EventLoop) {
        guard let entry = open.removeValue(forKey: token) else { return }
        eventLoop.unregister(entry.fd)
        Posix.close(entry.fd)
    }
}
