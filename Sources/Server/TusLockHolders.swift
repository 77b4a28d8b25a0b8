import Locks
import Synchronization

/// The PATCHes of this process that hold a resumable upload's lock, so that a newer request for the upload can say
/// it waits. A client whose connection died unseen (its network changed: no FIN, no RST) and that resumed met 423
/// until the old request's body timed out, a minute; tus clients give up after a few seconds of 423. A holder that
/// is wanted gets a short stall timeout instead (`ConnectionState.Timeouts.contended`): one still sending keeps
/// the upload, one that went quiet lets it go (what arrived is kept). Another node's holder cannot be reached from
/// here: its own timeout applies.
final class TusLockHolders: Sendable {
    /// One request's hold on an upload.
    final class Holder: Sendable {
        private let wanted = Atomic<Bool>(false)
        /// Set when its request is gone: a hold registered after that (the file opened late, on a file thread) is
        /// not recorded, so no entry outlives its request.
        fileprivate let released = Atomic<Bool>(false)

        /// Whether another request waits for the upload.
        var isWanted: Bool { wanted.load(ordering: .relaxed) }

        fileprivate func want() { wanted.store(true, ordering: .relaxed) }
    }

    private let holders = LockedValue<[String: Holder]>([:])

    /// `holder` holds upload `id` now (its lock was just taken).
    func hold(_ id: String, by holder: Holder) {
        holders.withLock { holders in
            if !holder.released.load(ordering: .sequentiallyConsistent) { holders[id] = holder }
        }
    }

    /// `holder`'s request is gone; its entry goes (a later holder's stays).
    func release(_ id: String, by holder: Holder) {
        holder.released.store(true, ordering: .sequentiallyConsistent)
        holders.withLock { holders in
            if holders[id] === holder { holders[id] = nil }
        }
    }

    /// Another request found upload `id` locked: its holder here, if any, is told; whether one was.
    func want(_ id: String) -> Bool {
        guard let holder = holders.withLock({ $0[id] }) else { return false }
        holder.want()
        return true
    }
}
