import Glibc
import Locks

/// Runs actions when their time comes, all on one thread (started with the first action), so a timeout per probe or
/// per cancelled job never costs a thread of its own.
public final class Deadlines: Sendable {
    /// The process's one scheduler.
    public static let shared = Deadlines()

    private struct Entry {
        let id: UInt64
        /// Nanoseconds on the monotonic clock.
        let due: UInt64
        let action: @Sendable () -> Void
    }

    private struct State {
        var entries: [Entry] = []
        var nextID: UInt64 = 0
        /// Moves with every change, so the thread's wait ends when an earlier deadline arrives.
        var version: UInt64 = 0
        var started = false
    }

    private let state = LockedValue(State())

    /// Runs `action` in `seconds`, unless cancelled first; returns what to cancel it with.
    @discardableResult
    public func schedule(after seconds: Double, _ action: @escaping @Sendable () -> Void) -> UInt64 {
        let due = Self.now + UInt64(max(0, seconds) * 1e9)
        let (id, start) = state.withLock { state -> (UInt64, Bool) in
            state.nextID += 1
            state.entries.append(Entry(id: state.nextID, due: due, action: action))
            state.version += 1
            defer { state.started = true }
            return (state.nextID, !state.started)
        }
        state.notifyAll()
        if start { NamedThread.start("deadlines") { [self] in run() } }
        return id
    }

    /// Forgets a scheduled action that has not run.
    public func cancel(_ id: UInt64) {
        state.withLock { state in
            state.entries.removeAll { $0.id == id }
            state.version += 1
        }
        state.notifyAll()
    }

    private static var now: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    private func run() {
        while true {
            let (due, version) = state.withLock { state -> ([Entry], UInt64) in
                let now = Self.now
                let due = state.entries.filter { $0.due <= now }
                state.entries.removeAll { $0.due <= now }
                return (due, state.version)
            }
            for entry in due { entry.action() }
            let next = state.withLock { $0.entries.map(\.due).min() }
            let timeout = next.map { Double($0 &- min($0, Self.now)) / 1e9 }
            _ = state.wait(timeout: timeout) { $0.version != version }
        }
    }
}
