import Foundation
import Locks
import Synchronization

/// A few libpq connections for a process's threads, each used by one thread at a time, made as calls overlap. A
/// connection that was lost is replaced on a later call, no sooner than its backoff allows (0.1 s doubling to 5 s),
/// so a database that is down costs one failed connect per slot and backoff, not one per call.
final class PostgresPool: Sendable {
    private struct Slot {
        var connection: PostgresConnection?
        /// No connect is tried before this (a clock that setting the wall clock does not move: stepped back an
        /// hour, the slot refused every call for an hour).
        var nextTry: ContinuousClock.Instant?
        var backoff = 0.1
        /// Whether a call can go ahead here now: connected, or free to try connecting.
        var isUsable: Bool { connection != nil || nextTry.map { ContinuousClock.now >= $0 } ?? true }
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

    /// Runs `body` on a connection of slot `index`, or else of a free slot, from the next one round-robin: a
    /// connected one first, then one free to connect, waiting for a busy one only when none is free.
    /// Taken round-robin alone, a lease renewal waited behind a slow query (a metrics scrape's counts, a long
    /// listing: up to the 60 s statement timeout) on its slot while others idled, and the lease ran out under a
    /// healthy job, which another node then ran again. A free slot that was not connected was taken like one that
    /// was: after a database restart, a call that landed on one still waiting out its backoff failed at once (for up
    /// to 5 s) while another slot was connected again, lease renewals among them; and one the database refused (at
    /// its connection limit) failed every other call while one connection served.
    func with<T: Sendable>(slot index: Int? = nil, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        if let index {
            return try slots[index % slots.count].withLock { (slot: inout Slot) throws(StoreError) -> T in try use(&slot, body) }
        }
        let first = Int(UInt(bitPattern: next.wrappingAdd(1, ordering: .relaxed).oldValue) % UInt(slots.count))
        var waiting: Int?
        for connectedOnly in [true, false] {
            for offset in 0..<slots.count {
                let position = (first + offset) % slots.count
                let free = try slots[position].withLockIfAvailable { (slot: inout Slot) throws(StoreError) -> T? in
                    guard connectedOnly ? slot.connection?.isConnected == true : slot.isUsable else { return nil }
                    return try use(&slot, body)
                }
                switch free {
                case .some(.some(let value)): return value
                case .some(.none): waiting = waiting ?? position
                case .none: continue
                }
            }
        }
        // None free can serve: one free but waiting out its backoff fails at once, as before (waiting behind a busy
        // one could mean a 60 s query).
        if let waiting {
            return try slots[waiting].withLock { (slot: inout Slot) throws(StoreError) -> T in try use(&slot, body) }
        }
        // None free: the first to be let go is taken, looked for every millisecond or so (up to 10 ms apart). Waiting
        // on one chosen in turn, a lease renewal could wait out that slot's 60 s statement while another slot was let
        // go a moment later, and the lease ran out under a healthy job.
        var pause: UInt32 = 200
        while true {
            for offset in 0..<slots.count {
                let position = (first + offset) % slots.count
                let taken = try slots[position].withLockIfAvailable { (slot: inout Slot) throws(StoreError) -> T in
                    try use(&slot, body)
                }
                if let taken { return taken }
            }
            usleep(pause)
            pause = min(pause * 2, 10_000)
        }
    }

    private func use<T>(_ slot: inout Slot, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        try body(try connection(in: &slot))
    }

    private func connection(in slot: inout Slot) throws(StoreError) -> PostgresConnection {
        if let connection = slot.connection, connection.isConnected { return connection }
        slot.connection = nil
        guard slot.isUsable else {
            throw StoreError(code: "store_unavailable", message: "PostgreSQL at \(displayURI) is unreachable; trying again shortly.")
        }
        do {
            let connection = try PostgresConnection(uri: uri)
            try prepare(connection)
            slot.connection = connection
            slot.backoff = 0.1
            return connection
        } catch {
            slot.nextTry = .now + .seconds(slot.backoff)
            slot.backoff = min(slot.backoff * 2, 5)
            throw error
        }
    }

    /// Closes every connection.
    func close() {
        for slot in slots { slot.withLock { $0.connection = nil } }
    }
}
