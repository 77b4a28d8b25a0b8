import Locks

/// The server's open-connection cap, one count for every event loop. Each loop had its own share of the cap, and
/// the kernel spreads connections over the loops by a hash of the client's address, not evenly: a loop refused new
/// ones while another had room, so `--max-connections 3` on two loops let in two.
final class ConnectionBudget: Sendable {
    let limit: Int
    private let open = LockedValue(0)

    init(limit: Int) { self.limit = max(1, limit) }

    /// Counts one more open connection, unless the cap is reached.
    func take() -> Bool {
        open.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    /// A connection counted by `take` has closed.
    func give() {
        open.withLock { count in
            precondition(count > 0, "a connection given back that was never taken")
            count -= 1
        }
    }
}
