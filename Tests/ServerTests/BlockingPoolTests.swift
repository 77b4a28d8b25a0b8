import Foundation
import Testing
@testable import Server

/// The pool's queue lets go of a work item (and what it captured: a request, its body) once it has run, even while
/// other items wait behind it.
@Suite struct BlockingPoolTests {
    /// Something a work item holds, seen through a weak reference.
    private final class Held: Sendable {}

    @Test func aWorkItemThatRanIsNotHeldByTheQueue() throws {
        let pool = BlockingPool(name: "one", threads: 1)
        let firstRelease = DispatchSemaphore(value: 0), lastStarted = DispatchSemaphore(value: 0)
        let lastRelease = DispatchSemaphore(value: 0)
        pool.submit { firstRelease.wait() }
        weak var watched: Held?
        do {
            let held = Held()
            watched = held
            pool.submit { _ = held }
        }
        // Items behind it, so the queue is not emptied when the watched item is taken.
        pool.submit {
            lastStarted.signal()
            lastRelease.wait()
        }
        for _ in 0..<4 { pool.submit {} }
        #expect(watched != nil)
        firstRelease.signal()
        #expect(lastStarted.wait(timeout: .now() + 5) == .success)
        #expect(watched == nil, "the queue still holds a work item that ran")
        lastRelease.signal()
        pool.shutdown()
    }
}
