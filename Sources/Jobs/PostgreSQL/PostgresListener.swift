import Foundation
import Glibc
import Locks

/// A thread with a connection of its own that LISTENs to the store's channels and hands each notification to a
/// handler. When the link drops it connects again with backoff (0.1 s doubling to 5 s) and, once back, reports
/// `.reconnected`: notifications sent meanwhile are gone, so listeners look at the store again.
final class PostgresListener: Sendable {
    static let channels: [(name: String, notice: @Sendable (String) -> StoreNotice)] = [
        ("transcoderd_queued", StoreNotice.queued), ("transcoderd_changed", StoreNotice.changed),
        ("transcoderd_cancel", StoreNotice.cancel),
    ]

    private let stopping = LockedValue(false)
    private let done = DispatchSemaphore(value: 0)

    init(uri: String, handler: @escaping @Sendable (StoreNotice) -> Void) {
        NamedThread.start("pg-listener") { [stopping, done] in
            Self.run(uri: uri, stopping: stopping, handler: handler)
            done.signal()
        }
    }

    /// Stops the thread and waits for it (at most one wait of half a second).
    func stop() {
        let already = stopping.withLock { stopping -> Bool in
            defer { stopping = true }
            return stopping
        }
        guard !already else { return }
        done.wait()
    }

    private static func run(uri: String, stopping: LockedValue<Bool>, handler: @Sendable (StoreNotice) -> Void) {
        var backoff = 0.1
        var connectedBefore = false
        while !stopping.withLock({ $0 }) {
            let connection: PostgresConnection
            do {
                connection = try PostgresConnection(uri: uri)
                try connection.execute(channels.map { "LISTEN \($0.name)" }.joined(separator: "; "))
            } catch {
                Thread.sleep(forTimeInterval: backoff)
                backoff = min(backoff * 2, 5)
                continue
            }
            backoff = 0.1
            if connectedBefore { handler(.reconnected) }
            connectedBefore = true
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
