import CFFmpeg
import Locks

/// A bounded queue of decoded pictures between the decode side (one producer) and one encode side (its consumer),
/// after the seed documents' `VideoFrameQueue`: the producer blocks while `capacity` frames wait, so a slow encoder
/// holds the decoder back instead of letting frames pile up in memory.
///
/// Each queued frame is a reference of its own (`av_frame_ref`): the pixels are shared with the decoder and with the
/// other encode sides, never written; what a consumer changes (timestamps, cropping, picture type) lives in its own
/// `AVFrame`. Either side may end the exchange: the producer with `close()` (end of input), the consumer with
/// `fail(_:)`, after which `push` throws the consumer's error.
final class FrameQueue: Sendable {
    /// One picture for the consumer, with the time base its `pts` is in.
    struct Item: @unchecked Sendable {
        // Safe to send: the frame is a reference made for this item alone (`Frame.reference(to:)`); the producer
        // never touches it after `push`, and the one consumer owns it after `pop`.
        let frame: Frame
        let timeBase: AVRational
    }

    private struct State {
        /// The waiting frames, oldest first. A taken frame leaves the array at once: a slot kept after the take
        /// would keep the picture's buffers from going back to the decoder's pool.
        var items: [Item] = []
        var closed = false
        var failure: MediaError?
        var canceled = false
    }

    let capacity: Int
    private let state = LockedValue(State())

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    /// Queues a reference to `frame`, waiting while the queue is full; throws the consumer's error if it stopped.
    func push(_ frame: Frame, timeBase: AVRational) throws(MediaError) {
        let item = Item(frame: try Frame.reference(to: frame), timeBase: timeBase)
        var failure: MediaError?
        _ = state.wait { state in
            if let error = state.failure {
                failure = error
                return true
            }
            guard state.items.count < capacity else { return false }
            state.items.append(item)
            return true
        }
        state.notifyAll()
        if let failure { throw failure }
    }

    /// What the consumer gets next.
    enum Next {
        case frame(Item)
        /// The producer closed the queue and every frame was taken: drain and finish.
        case end
        /// The producer gave up: stop without finishing.
        case canceled
    }

    /// The next frame, waiting for one.
    func pop() -> Next {
        var next = Next.canceled
        _ = state.wait { state in
            if state.canceled { return true }
            if !state.items.isEmpty {
                // At most `capacity` items: moving the rest down costs less than the frame it hands over.
                next = .frame(state.items.removeFirst())
                return true
            }
            if state.closed {
                next = .end
                return true
            }
            return false
        }
        state.notifyAll()
        return next
    }

    /// No more frames come; the consumer drains what is queued.
    func close() {
        state.withLock { $0.closed = true }
        state.notifyAll()
    }

    /// The consumer stopped with `error`: the producer's next `push` throws it, and nothing more is queued.
    func fail(_ error: MediaError) {
        state.withLock { state in
            if state.failure == nil { state.failure = error }
            state.items.removeAll()
        }
        state.notifyAll()
    }

    /// The producer gives up (cancellation, its own error): the consumer's next `pop` returns nil at once and the
    /// queued frames are let go.
    func cancel() {
        state.withLock { state in
            state.canceled = true
            state.items.removeAll()
        }
        state.notifyAll()
    }

}
