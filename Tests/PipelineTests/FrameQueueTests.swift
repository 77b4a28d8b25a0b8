import CFFmpeg
import Foundation
@testable import Pipeline
import Testing

/// The queue between the decode side and an encode side, without a decoder: frames made here, one thread, except
/// where waiting is the point.
@Suite struct FrameQueueTests {
    /// A small picture with pixel buffers of its own (as a decoder's pool hands out).
    private func picture(pts: Int64) throws -> Frame {
        let frame = Frame()
        frame.pointer.pointee.width = 64
        frame.pointer.pointee.height = 48
        frame.pointer.pointee.format = AV_PIX_FMT_YUV420P.rawValue
        frame.pointer.pointee.pts = pts
        #expect(av_frame_get_buffer(frame.pointer, 0) == 0)
        return frame
    }

    /// How many frames hold the picture's first buffer (the decoder's own reference included).
    private func holders(_ frame: Frame) -> Int32 {
        av_buffer_get_ref_count(frame.pointer.pointee.buf.0)
    }

    @Test func aTakenFrameIsNoLongerHeldByTheQueue() throws {
        let queue = FrameQueue(capacity: 4)
        let frames = try (0..<3).map { try picture(pts: Int64($0)) }
        for frame in frames { try queue.push(frame, timeBase: AVRational(num: 1, den: 30)) }
        #expect(frames.map(holders) == [2, 2, 2])
        // The consumer takes the first frame and lets it go: its buffers go back to the decoder at once, while the
        // frames still waiting stay held. (The queue used to keep taken slots until 64 had gathered.)
        if case .frame(let item) = queue.pop() {
            #expect(item.frame.pointer.pointee.pts == 0)
        } else {
            Issue.record("no frame")
        }
        #expect(frames.map(holders) == [1, 2, 2])
        for _ in 0..<2 { _ = queue.pop() }
        #expect(frames.map(holders) == [1, 1, 1])
    }

    @Test func framesComeOutInOrderThenTheEnd() throws {
        let queue = FrameQueue(capacity: 8)
        for pts in 0..<5 { try queue.push(try picture(pts: Int64(pts)), timeBase: AVRational(num: 1, den: 30)) }
        queue.close()
        var seen: [Int64] = []
        loop: while true {
            switch queue.pop() {
            case .frame(let item): seen.append(item.frame.pointer.pointee.pts)
            case .end: break loop
            case .canceled:
                Issue.record("canceled")
                break loop
            }
        }
        #expect(seen == [0, 1, 2, 3, 4])
    }

    @Test func theProducerWaitsWhileTheQueueIsFull() throws {
        let queue = FrameQueue(capacity: 2)
        let frames = try (0..<3).map { try picture(pts: Int64($0)) }
        try queue.push(frames[0], timeBase: AVRational(num: 1, den: 30))
        try queue.push(frames[1], timeBase: AVRational(num: 1, den: 30))
        let pushed = DispatchSemaphore(value: 0)
        let third = Handoff(frames[2])
        Thread.detachNewThread {
            try? queue.push(third.value, timeBase: AVRational(num: 1, den: 30))
            pushed.signal()
        }
        #expect(pushed.wait(timeout: .now() + 0.3) == .timedOut, "a full queue took a third frame")
        _ = queue.pop()
        #expect(pushed.wait(timeout: .now() + 5) == .success, "the producer was not let go when a frame was taken")
        #expect(frames.map(holders) == [1, 2, 2])
    }

    @Test func aFailedConsumerStopsTheProducerAndLetsGoOfTheFrames() throws {
        let queue = FrameQueue(capacity: 4)
        let frame = try picture(pts: 0)
        try queue.push(frame, timeBase: AVRational(num: 1, den: 30))
        queue.fail(MediaError(code: "encoder_failed", message: "x"))
        #expect(holders(frame) == 1)
        #expect(throws: MediaError.self) { try queue.push(frame, timeBase: AVRational(num: 1, den: 30)) }
        #expect(holders(frame) == 1)
    }

    @Test func aCanceledQueueAnswersCanceledAndLetsGoOfTheFrames() throws {
        let queue = FrameQueue(capacity: 4)
        let frame = try picture(pts: 0)
        try queue.push(frame, timeBase: AVRational(num: 1, den: 30))
        queue.cancel()
        #expect(holders(frame) == 1)
        guard case .canceled = queue.pop() else {
            Issue.record("a canceled queue handed out a frame or ended normally")
            return
        }
    }
}
