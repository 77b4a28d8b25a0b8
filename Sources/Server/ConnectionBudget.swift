import Locks

/// The server's open-connection cap, one count for every event loop. Each loop had its own share of the cap, and
/// the kernel spreads connections over the loops by a hash of the client's address, not evenly: a loop refused new
/// ones while another had room, so `--max-connections 3` on two loops let in two.
///
/// Past the cap a few more connections (`spare`) are let in to be answered properly: their request is read, a
/// liveness probe gets its answer, anything else 503, and they close. Closed at once with the 503 written at
/// accept, a client whose request was still unread got a reset instead of the answer, and an orchestrator's
/// liveness probe failed exactly when the server was busiest. Past the spares the 503 is written at accept and the
/// connection lingers, what it sends read and dropped (`TurnedAwayConnections`).
final class ConnectionBudget: Sendable {
    /// How a connection was let in.
    enum Admission: Sendable {
        case withinCap
        /// Over the cap: one request is read and refused unless it is a liveness probe; then it closes.
        case overCap
    }

    let limit: Int
    let spare: Int
    private let open = LockedValue((withinCap: 0, overCap: 0))

    init(limit: Int, spare: Int = 32) {
        self.limit = max(1, limit)
        self.spare = max(0, spare)
    }

    /// Counts one more open connection, and how it is let in; nil past the cap and the spares.
    func take() -> Admission? {
        open.withLock { count in
            if count.withinCap < limit {
                count.withinCap += 1
                return .withinCap
            }
            guard count.overCap < spare else { return nil }
            count.overCap += 1
            return .overCap
        }
    }

    /// A connection counted by `take` has closed.
    func give(_ admission: Admission) {
        open.withLock { count in
            switch admission {
            case .withinCap:
                precondition(count.withinCap > 0, "a connection given back that was never taken")
                count.withinCap -= 1
            case .overCap:
                precondition(count.overCap > 0, "a connection given back that was never taken")
                count.overCap -= 1
            }
        }
    }
}
