import Locks

/// Counters the HTTP layer keeps for `/metrics`: requests by route and status, durations, bytes, open streams.
public final class ServerMetrics: Sendable {
    /// Upper bounds of the request duration histogram, in seconds.
    public static let durationBuckets: [Double] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30]

    public struct Snapshot: Sendable {
        public var requests: [String: [Int: Int]] = [:]
        /// Cumulative counts per bucket (same order as `durationBuckets`), then the total count and sum.
        public var durationBuckets = [Int](repeating: 0, count: ServerMetrics.durationBuckets.count)
        public var durationCount = 0
        public var durationSum = 0.0
        public var bytesReceived: Int64 = 0
        public var bytesSent: Int64 = 0
        public var openStreams = 0
    }

    private let state = LockedValue(Snapshot())

    public init() {}

    func countResponse(route: String, status: Int, seconds: Double = 0, sent: Int64 = 0, received: Int64 = 0) {
        state.withLock { state in
            state.requests[route, default: [:]][status, default: 0] += 1
            for (index, bound) in Self.durationBuckets.enumerated() where seconds <= bound { state.durationBuckets[index] += 1 }
            state.durationCount += 1
            state.durationSum += seconds
            state.bytesSent += sent
            state.bytesReceived += received
        }
    }

    func streamOpened() { state.withLock { $0.openStreams += 1 } }
    func streamClosed() { state.withLock { $0.openStreams -= 1 } }

    public var snapshot: Snapshot { state.withLock { $0 } }
}
