import Locks

/// The work at the far end of a `FrameQueue`: an encode side (scale, encode, mux) or the thumbnail maker.
protocol FrameConsumer: AnyObject {
    /// Takes one frame from the decode side.
    func consume(_ item: FrameQueue.Item) throws(MediaError)
    /// The input has ended: drain what is held and complete the output.
    func finish() throws(MediaError)
}

/// Runs one `FrameConsumer` on a thread of its own behind a bounded `FrameQueue`, so decoding and each encoder work
/// at the same time; the consumer belongs to that thread from `start` until `join` returns.
final class EncodeWorker: Sendable {
    let queue: FrameQueue
    private let name: String
    /// nil while running; the outcome once the thread is done.
    private let outcome = LockedValue<Result<Void, MediaError>?>(nil)

    /// Frames a queue holds: enough to ride out an encoder's uneven pace (x264 takes a burst at each key frame)
    /// without holding many decoded pictures.
    static let queueCapacity = 8

    init(name: String, capacity: Int = EncodeWorker.queueCapacity) {
        self.name = name
        queue = FrameQueue(capacity: capacity)
    }

    /// Starts the thread; the caller touches `consumer` no more until `join` returns, except for what is made to be
    /// read from any thread (an encoder input's `progress`).
    func start(_ consumer: any FrameConsumer) {
        let handoff = Handoff(consumer)
        let queue = queue, outcome = outcome
        let started = NamedThread.start(name) {
            let consumer = handoff.value
            var result: Result<Void, MediaError> = .success(())
            do throws(MediaError) {
                loop: while true {
                    switch queue.pop() {
                    case .frame(let item): try consumer.consume(item)
                    case .end:
                        try consumer.finish()
                        break loop
                    case .canceled: break loop
                    }
                }
            } catch {
                queue.fail(error)
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            outcome.notifyAll()
        }
        if !started {
            let error = MediaError.threadNotStarted(name)
            queue.fail(error)
            outcome.withLock { $0 = .failure(error) }
            outcome.notifyAll()
        }
    }

    /// Waits for the thread to end and rethrows its error.
    func join() throws(MediaError) {
        _ = outcome.wait { $0 != nil }
        let result = outcome.withLock { $0 }
        if case .failure(let error)? = result { throw error }
    }

    /// Ends the exchange without finishing (cancellation or the producer's error) and waits for the thread.
    func abandon() {
        queue.cancel()
        _ = outcome.wait { $0 != nil }
    }
}

/// Carries a value that is not `Sendable` to one other thread, whole: the sender gives it up.
struct Handoff<Value>: @unchecked Sendable {
    // Safe by contract: the sender keeps a reference only to read what the value makes thread-safe (a consumer's
    // `progress`), and the value is otherwise used only on the receiving thread.
    let value: Value

    init(_ value: Value) {
        self.value = value
    }
}
