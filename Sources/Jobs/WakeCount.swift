/// The wake-ups owed to idle workers: at most one per worker is kept. Every job queued anywhere in a cluster is
/// announced to every node; counted whole while the workers were busy, the notices piled up, and once idle each
/// worker ran that many empty claims back to back (80 jobs queued meanwhile: 80 claims in milliseconds, on every
/// node). One pending wake-up per worker is enough: a worker that wakes claims until the queue has nothing for it.
struct WakeCount {
    let limit: Int
    private(set) var pending = 0

    init(workers: Int) { limit = max(1, workers) }

    /// Notes one more wake-up; whether a waiting worker is to be signalled (false: enough are owed already).
    mutating func signal() -> Bool {
        guard pending < limit else { return false }
        pending += 1
        return true
    }

    /// A worker took one.
    mutating func taken() { pending = max(0, pending - 1) }
}
