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

        /// Whether another request waits for the upload.
        var isWanted: Bool { wanted.load(ordering: .relaxed) }

        fileprivate func want() { wanted.store(true, ordering: .relaxed) }
    }

    private let holders = LockedValue<[String: Holder]>([:])

    /// `holder` holds upload `id` now (its lock was just taken).
    func hold(_ id: String, by holder: Holder) { holders.withLock { $0[id] = holder } }

    /// `holder` let upload `id` go; a later holder's entry stays.
    func release(_ id: String, by holder: Holder) {
        holders.withLock { holders in
            if holders[id] === holder { holders[id] = nil }
        }
    }

    /// Another request found upload `id` locked: its holder here, if any, is told.
    func want(_ id: String) { holders.withLock { $0[id] }?.want() }
}
