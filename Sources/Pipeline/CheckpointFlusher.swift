import Locks

/// Makes finished checkpoint segments durable on a thread of its own, in the order they finished: the file's
/// fsync and rename, then the manifest's update (three more flushes). The video's encode thread hands a segment over
/// and goes on encoding instead of waiting on the disk, up to `maxPending` segments behind: past that it waits, so
/// a disk that does not keep up slows the encode (and the job's progress shows it) instead of piling up open
/// segment files until the job runs out of descriptors. A failure is kept and thrown at the next hand-over or at
/// `drain()`. The thread starts with the first segment and ends with `stop()`.
final class CheckpointFlusher: Sendable {
    /// Segments waiting behind the one being flushed, at most (each holds its file open).
    static let maxPending = 8

    private struct State {
        var pending: [@Sendable () -> MediaError?] = []
        var busy = false
        var started = false
        var stopped = false
        var failure: MediaError?
    }

    private let state = LockedValue(State())

    /// Queues `work` (it returns its failure, if any); throws a failure of earlier work instead.
    func submit(_ work: @escaping @Sendable () -> MediaError?) throws(MediaError) {
        var failure: MediaError?
        var start = false
        _ = state.wait { state in
            if let error = state.failure {
                failure = error
                return true
            }
            guard state.pending.count < Self.maxPending else { return false }
            state.pending.append(work)
            start = !state.started
            state.started = true
            return true
        }
        if let failure { throw failure }
        state.notifyAll()
        if start, !NamedThread.start("checkpoint-flush", { [self] in run() }) {
            state.withLock { $0.failure = $0.failure ?? .threadNotStarted("checkpoint-flush") }
            state.notifyAll()
            throw .threadNotStarted("checkpoint-flush")
        }
    }

    /// Waits until everything queued is done; throws the first failure.
    func drain() throws(MediaError) {
        _ = state.wait { state in state.failure != nil || (state.pending.isEmpty && !state.busy) }
        if let failure = state.withLock({ $0.failure }) { throw failure }
    }

    /// Lets the thread end once what is queued is done.
    func stop() {
        state.withLock { $0.stopped = true }
        state.notifyAll()
    }

    private func run() {
        while true {
            var next: (@Sendable () -> MediaError?)?
            _ = state.wait { state in
                if state.failure == nil, !state.pending.isEmpty {
                    next = state.pending.removeFirst()
                    state.busy = true
                    return true
                }
                return state.stopped
            }
            guard let work = next else { return }
            let failure = work()
            state.withLock { state in
                state.busy = false
                if let failure, state.failure == nil { state.failure = failure }
            }
            state.notifyAll()
        }
    }
}
