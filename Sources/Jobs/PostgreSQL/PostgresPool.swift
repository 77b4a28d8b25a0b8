import Foundation
import Locks
import Synchronization

/// A few libpq connections for a process's threads, each used by one thread at a time. A connection that was lost
/// is replaced on a later call, no sooner than its backoff allows (0.1 s doubling to 5 s), so a database that is
/// down costs one failed connect per slot and backoff, not one per call.
final class PostgresPool: Sendable {
    private struct Slot {
        var connection: PostgresConnection?
        var nextTry = Date.distantPast
        var backoff = 0.1
    }

    private let slots: [LockedValue<Slot>]
    private let next = Atomic<Int>(0)
    let uri: String
    /// The URI without its password, for messages.
    let displayURI: String
    /// Runs on every new connection before it is used (migrations on the first).
    private let prepare: @Sendable (PostgresConnection) throws(StoreError) -> Void

    init(uri: String, size: Int, prepare: @escaping @Sendable (PostgresConnection) throws(StoreError) -> Void) {
        self.uri = uri
        displayURI = PostgresConnection.withoutPassword(uri)
        self.prepare = prepare
        slots = (0..<max(1, size)).map { _ in LockedValue(Slot()) }
    }

    /// Runs `body` on a connection of slot `index`, or else of the first free slot from the next one round-robin
    /// (waiting for that one when all are busy). Taken round-robin alone, a lease renewal waited behind a slow
    /// query (a metrics scrape's counts, a long listing: up to the 60 s statement timeout) on its slot while others
    /// idled, and the lease ran out under a healthy job, which another node then ran again.
    func with<T: Sendable>(slot index: Int? = nil, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        if let index {
            return try slots[index % slots.count].withLock { (slot: inout Slot) throws(StoreError) -> T in try use(&slot, body) }
        }
        let first = Int(UInt(bitPattern: next.wrappingAdd(1, ordering: .relaxed).oldValue) % UInt(slots.count))
        for offset in 0..<slots.count {
            let free = try slots[(first + offset) % slots.count].withLockIfAvailable { (slot: inout Slot) throws(StoreError) -> T in
                try use(&slot, body)
            }
            if let free { return free }
        }
        return try slots[first].withLock { (slot: inout Slot) throws(StoreError) -> T in try use(&slot, body) }
    }

    private func use<T>(_ slot: inout Slot, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try body(try connection(in: &slot))
    }

    private func connection(in slot: inout Slot) throws(StoreError) -> PostgresConnection {
        if let connection = slot.connection, connection.isConnected { return connection }
        slot.connection = nil
        guard Date() >= slot.nextTry else {
            throw StoreError(code: "store_unavailable", message: "PostgreSQL at \(displayURI) is unreachable; trying again shortly.")
        }
        do {
            let connection = try PostgresConnection(uri: uri)
            try prepare(connection)
            slot.connection = connection
            slot.backoff = 0.1
            return connection
        } catch {
            slot.nextTry = Date().addingTimeInterval(slot.backoff)
            slot.backoff = min(slot.backoff * 2, 5)
            throw error
        }
    }

    /// Closes every connection.
    func close() {
        for slot in slots { slot.withLock { $0.connection = nil } }
    }
}
