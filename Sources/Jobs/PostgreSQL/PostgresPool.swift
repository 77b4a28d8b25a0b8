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
    /// connected one first, then one free to connect (one connect tried per call), else the first connected one to
    /// be let go. Taken round-robin alone, a lease renewal waited behind a slow query (a metrics scrape's counts, a
    /// long listing: up to the 60 s statement timeout) on its slot while others idled, and the lease ran out under a
    /// healthy job, which another node then ran again. A slot that cannot connect (waiting out its backoff after a
    /// database restart, or refused at the database's or the role's connection limit) fails a call only when no
    /// other slot has a connection, busy or free: it failed every call that found the connected ones busy (15 % of
    /// reads at a role's limit of 3 with three clients, a job's lease renewals four times in a row while the
    /// database was up).
    func with<T: Sendable>(slot index: Int? = nil, _ body: (PostgresConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        if let index {
            return try slots[index % slots.count].withLock { (slot: inout Slot) throws(StoreError) -> T in
                try body(try connection(in: &slot))
            }
        }
        let first = Int(UInt(bitPattern: next.wrappingAdd(1, ordering: .relaxed).oldValue) % UInt(slots.count))
        /// Why a connect failed, or a slot could not try one (this call tries at most one connect: with the database
        /// away each could take the connect timeout).
        var failure: StoreError?
        var pause: UInt32 = 200
        var connectedOnly = true
        while true {
            var busy = false
            for offset in 0..<slots.count {
                let position = (first + offset) % slots.count
                let taken = try slots[position].withLockIfAvailable { (slot: inout Slot) throws(StoreError) -> T? in
                    if let connection = slot.connection, connection.isConnected { return try body(connection) }
                    guard !connectedOnly, failure == nil, slot.isUsable else { return nil }
                    let connection: PostgresConnection
                    do throws(StoreError) {
                        connection = try self.connection(in: &slot)
                    } catch {
                        failure = error
                        return nil
                    }
                    return try body(connection)
                }
                switch taken {
                case .some(.some(let value)): return value
                case .some(.none): continue
                case .none: busy = true
                }
            }
            if connectedOnly {
                connectedOnly = false
                continue
            }
            // None taken: wait for a busy slot to be let go (looked for every millisecond or so, up to 10 ms apart),
            // unless none is busy (none has a connection: the database is away).
            guard busy else {
                throw failure ?? StoreError(code: "store_unavailable", message: "PostgreSQL at \(displayURI) is unreachable; trying again shortly.")
            }
            usleep(pause)
            pause = min(pause * 2, 10_000)
        }
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
