import Testing
@testable import Jobs

/// The wake-ups a node owes its idle workers: however many jobs were announced while they were busy, each worker
/// wakes once and claims until the queue is empty, not once per announcement (a burst of empty claims).
@Suite struct WakeCountTests {
    @Test func atMostOneWakeUpPerWorkerIsOwed() {
        var wakes = WakeCount(workers: 2)
        let signalled = (0..<100).filter { _ in wakes.signal() }.count
        #expect(signalled == 2 && wakes.pending == 2)
        wakes.taken()
        #expect(wakes.pending == 1)
        #expect(wakes.signal() && !wakes.signal())
        wakes.taken()
        wakes.taken()
        wakes.taken() // a wake-up taken that was not counted (none is) leaves nothing owed, never less
        #expect(wakes.pending == 0 && wakes.signal())
        // A node without workers (an API node) still wakes: its queue's stop signals once.
        var none = WakeCount(workers: 0)
        #expect(none.signal() && !none.signal())
    }
}
