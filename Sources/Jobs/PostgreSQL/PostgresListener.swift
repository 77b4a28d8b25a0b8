import Foundation
import Glibc
import Locks

/// A thread with a connection of its own that LISTENs to the store's channels and hands each notification to a
/// handler. When the link drops it connects again with backoff (0.1 s doubling to 5 s). Each time it starts
/// listening, the first time included, it reports `.listening`: notifications sent before were never heard (a job
/// queued while the node was starting, or while the link was down), so listeners look at the store again.
final class PostgresListener: Sendable {
    static let channels: [(name: String, notice: @Sendable (String) -> StoreNotice)] = [
        ("transcoderd_queued", StoreNotice.queued), ("transcoderd_changed", StoreNotice.changed),
        ("transcoderd_progress", StoreNotice.progressed), ("transcoderd_cancel", StoreNotice.cancel),
    ]

    private let stopping = LockedValue(false)
    /// Cuts a backoff short when stopping.
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    /// The listening thread, so `stop` called from it (a handler dropping the last reference to the store) does
    /// not wait for itself.
    private let thread = LockedValue<pthread_t?>(nil)

    init(uri: String, handler: @escaping @Sendable (StoreNotice) -> Void) {
        NamedThread.start("pg-listener") { [stopping, wake, done, thread] in
            thread.withLock { $0 = pthread_self() }
            Self.run(uri: uri, stopping: stopping, wake: wake, handler: handler)
            done.signal()
        }
    }

    /// Stops the thread and waits for it: at most a poll (half a second), or a connect under way (its timeout).
    func stop() {
        let already = stopping.withLock { stopping -> Bool in
            defer { stopping = true }
            return stopping
        }
        guard !already else { return }
        wake.signal()
        if let listening = thread.withLock({ $0 }), pthread_equal(listening, pthread_self()) != 0 { return }
        done.wait()
    }

    private static func run(uri: String, stopping: LockedValue<Bool>, wake: DispatchSemaphore, handler: @Sendable (StoreNotice) -> Void) {
        var backoff = 0.1
        // When the failure was last told: it was told nowhere, and a node whose listener could not get in (a role's
        // connection limit sized to the pool) showed jobs of other nodes frozen with nothing in its log to say why.
        var told: Date?
        while !stopping.withLock({ $0 }) {
            let connection: PostgresConnection
            do {
                connection = try PostgresConnection(uri: uri)
                try connection.execute(channels.map { "LISTEN \($0.name)" }.joined(separator: "; "))
            } catch {
                if told.map({ Date().timeIntervalSince($0) >= 60 }) ?? true {
                    told = Date()
                    handler(.unheard(error.message))
                }
                _ = wake.wait(timeout: .now() + backoff)
                backoff = min(backoff * 2, 5)
                continue
            }
            backoff = 0.1
            told = nil
            handler(.listening)
            while !stopping.withLock({ $0 }) {
                var descriptor = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 500) >= 0 || errno == EINTR else { break }
                guard let received = try? connection.notifications() else { break }
                for (channel, payload) in received {
                    if let entry = channels.first(where: { $0.name == channel }) { handler(entry.notice(payload)) }
                }
            }
        }
    }
}
