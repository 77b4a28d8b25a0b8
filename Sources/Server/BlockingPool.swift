import Foundation
import Locks

/// A fixed number of threads that run blocking work (SQLite, file I/O, FFmpeg probes) in the order it was submitted,
/// as SwiftNIO's `NIOThreadPool` does.
///
/// Why not a concurrent `DispatchQueue`: libdispatch adds a thread whenever the ones it has block, so a burst of slow
/// requests grows the process by a thread each. Here a burst waits in the queue instead, and the thread count is
/// what the configuration says.
public final class BlockingPool: Sendable {
    private struct State {
        var work: [@Sendable () -> Void] = []
        /// Index of the next item of `work` to run (the array is compacted once it is half consumed).
        var head = 0
        var stopping = false
    }

    public let name: String
    public let threadCount: Int
    private let state = LockedValue(State())
    private let finished = DispatchGroup()

    /// Starts `threads` threads named `name-0`, `name-1`, … (keep `name` short: the kernel keeps 15 bytes).
    public init(name: String, threads: Int) {
        self.name = name
        threadCount = max(1, threads)
        for index in 0..<threadCount {
            finished.enter()
            NamedThread.start("\(name)-\(index)") { [self] in
                runWork()
                finished.leave()
            }
        }
    }

    /// Queues `work` to run on one of the pool's threads.
    public func submit(_ work: @escaping @Sendable () -> Void) {
        state.withLock { $0.work.append(work) }
        state.notifyOne()
    }

    /// Work items submitted and not yet started.
    public var queued: Int { state.withLock { $0.work.count - $0.head } }

    /// Runs what is queued, then ends the threads and waits for them.
    public func shutdown() {
        state.withLock { $0.stopping = true }
        state.notifyAll()
        finished.wait()
    }

    private func runWork() {
        while true {
            var next: (@Sendable () -> Void)?
            _ = state.wait { state in
                if state.head < state.work.count {
                    next = state.work[state.head]
                    // The slot lets go of the work (and what it holds: a request and its body) as it is taken.
                    state.work[state.head] = {}
                    state.head += 1
                    if state.head * 2 >= state.work.count {
                        state.work.removeFirst(state.head)
                        state.head = 0
                    }
                    return true
                }
                return state.stopping
            }
            guard let work = next else { return }
            work()
        }
    }
}

/// Runs work items one after another on a `BlockingPool`, never two at once and in the order they came: the writes of
/// one upload, for instance. It takes a pool thread for one item at a time and then queues itself again behind what
/// others submitted meanwhile, so a busy executor (an upload to a slow disk) never keeps a thread to itself.
final class SerialExecutor: Sendable {
    private struct State {
        var work: [@Sendable () -> Void] = []
        var running = false
    }

    private let pool: BlockingPool
    private let state = LockedValue(State())

    init(pool: BlockingPool) { self.pool = pool }

    /// Queues `work` after everything queued before it.
    func submit(_ work: @escaping @Sendable () -> Void) {
        let start = state.withLock { state -> Bool in
            state.work.append(work)
            guard !state.running else { return false }
            state.running = true
            return true
        }
        if start { pool.submit { [self] in drain() } }
    }

    private func drain() {
        let next = state.withLock { state -> (@Sendable () -> Void)? in
            guard !state.work.isEmpty else {
                state.running = false
                return nil
            }
            return state.work.removeFirst()
        }
        guard let next else { return }
        next()
        pool.submit { [self] in drain() }
    }
}
