import Synchronization

/// The request-body bytes the server holds in memory at once (JSON bodies, multipart fields), over every connection
/// and loop, against one limit: each body is capped on its own, and this caps how many may be held together, so
/// thousands of clients each sending a body at its cap cannot exhaust memory. Past the limit a request gets 503.
/// Upload writers draw their buffers past the first from an instance of their own (`UploadWriter`): past its limit
/// they wait for their own buffers rather than refuse.
final class BodyMemory: Sendable {
    /// Bytes.
    let limit: Int
    private let used = Atomic<Int>(0)

    init(limit: Int) { self.limit = limit }

    /// Bytes held now.
    var inUse: Int { used.load(ordering: .relaxed) }

    /// Takes `count` bytes if they fit under the limit.
    func take(_ count: Int) -> Bool {
        var current = used.load(ordering: .relaxed)
        while true {
            guard current + count <= limit else { return false }
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + count, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    func give(_ count: Int) {
        used.subtract(count, ordering: .relaxed)
    }

    /// One body's share of the memory; what it took goes back when it is released or dropped (after its handler ran).
    final class Reservation {
        private let memory: BodyMemory
        private(set) var bytes = 0

        init(_ memory: BodyMemory) { self.memory = memory }

        /// Takes `count` more bytes; 503 when the server holds too much already.
        func grow(by count: Int) throws(HTTPError) {
            guard memory.take(count) else {
                throw HTTPError(.serviceUnavailable, "server_busy",
                                "The server is holding too many request bodies in memory; try again shortly.",
                                headers: HTTPHeaders([("Retry-After", "1")]), closeConnection: true)
            }
            bytes += count
        }

        func releaseAll() {
            memory.give(bytes)
            bytes = 0
        }

        deinit { releaseAll() }
    }
}
