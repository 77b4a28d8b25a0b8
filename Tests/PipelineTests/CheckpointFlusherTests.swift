import Foundation
@testable import Pipeline
import Testing

/// The thread that makes checkpoint segments durable, with work that stands for a disk: in order, a bounded backlog
/// (each waiting segment holds its file open), failures handed back.
@Suite struct CheckpointFlusherTests {
    @Test func aDiskThatDoesNotKeepUpHoldsTheEncoderBackPastTheBacklog() throws {
        let flusher = CheckpointFlusher()
        defer { flusher.stop() }
        let disk = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        // The first segment's flush is under way and held up; the backlog then fills behind it.
        let flushing = DispatchSemaphore(value: 0)
        try flusher.submit { flushing.signal(); disk.wait(); done.signal(); return nil }
        try #require(flushing.wait(timeout: .now() + 5) == .success)
        // The backlog fills without waiting (from another thread, so a wrong bound fails here instead of hanging).
        let filled = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for _ in 0..<CheckpointFlusher.maxPending { try? flusher.submit { done.signal(); return nil } }
            filled.signal()
        }
        try #require(filled.wait(timeout: .now() + 5) == .success, "the backlog did not take \(CheckpointFlusher.maxPending) segments")
        let handedOver = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? flusher.submit { done.signal(); return nil }
            handedOver.signal()
        }
        #expect(handedOver.wait(timeout: .now() + 0.3) == .timedOut, "a segment was taken past the backlog")
        disk.signal()
        #expect(handedOver.wait(timeout: .now() + 5) == .success, "the encoder was not let go once the disk moved")
        try flusher.drain()
        for _ in 0..<(CheckpointFlusher.maxPending + 2) { #expect(done.wait(timeout: .now() + 5) == .success) }
    }

    @Test func aFailureIsThrownAtTheNextHandOverAndAtTheDrain() throws {
        let flusher = CheckpointFlusher()
        defer { flusher.stop() }
        let failure = MediaError(code: "storage_error", message: "The disk is full.")
        try flusher.submit { failure }
        #expect(throws: MediaError.self) { try flusher.drain() }
        #expect(throws: MediaError.self) { try flusher.submit { nil } }
    }
}
