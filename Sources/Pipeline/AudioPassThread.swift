import Locks

/// The audio pass of a checkpointed transcode, on a thread of its own: its own reader decodes the audio only, while
/// the session's thread runs the video.
final class AudioPassThread: @unchecked Sendable {
    // @unchecked: the reader, output and plan are used by the pass's thread only, between `start` and the end of
    // `join` or `stop`; `outcome` and `stopped` are thread-safe.
    private let reader: MediaReader
    private let output: any TranscodeOutput
    private let plan: TranscodePlan
    private let limits: MediaLimits
    /// Seconds of input per second of output (a tempo filter changes the pace): the read limit is on the input.
    private let pace: Double
    /// The pass's own token, its reader's too (`token(following:)`): `stop` cancels it.
    private let cancellation: CancellationToken
    /// Called on the pass's thread once its output is finished (the whole sound written).
    private let finished: () throws(MediaError) -> Void
    private let stopped = LockedValue(false)
    private let outcome = LockedValue<Result<Void, MediaError>?>(nil)
    private var started = false

    init(reader: MediaReader, output: any TranscodeOutput, plan: TranscodePlan, limits: MediaLimits, pace: Double,
         cancellation: CancellationToken, finished: @escaping () throws(MediaError) -> Void = {}) {
        self.reader = reader
        self.output = output
        self.plan = plan
        self.limits = limits
        self.pace = pace
        self.cancellation = cancellation
        self.finished = finished
    }

    /// A token for the pass and its reader: canceled with the session's, and by `stop` alone. A stop only set a flag
    /// the pass looked at after each audio sample: once the sound had ended (or in a long gap) its reader went on
    /// through the video's bytes to the end of the file before it looked, so a video pass's failure waited for a
    /// whole read of the input (on slow storage long enough for the watchdog to call the job stalled).
    static func token(following session: CancellationToken) -> CancellationToken {
        CancellationToken(external: { session.isCanceled })
    }

    func start() {
        started = true
        let running = NamedThread.start("audio-pass") { [self] in
            let result: Result<Void, MediaError>
            do throws(MediaError) {
                try run()
                result = .success(())
            } catch {
                output.cancelWriting()
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            outcome.notifyAll()
        }
        if !running {
            output.cancelWriting()
            outcome.withLock { $0 = .failure(.threadNotStarted("audio-pass")) }
            outcome.notifyAll()
        }
    }

    private func run() throws(MediaError) {
        plan.start()
        do throws(MediaError) {
            while let sample = try reader.nextSample() {
                if cancellation.isCanceled || stopped.withLock({ $0 }) { throw MediaError.canceled }
                try plan.handle(sample)
                try limits.checkRead(seconds: output.writtenSeconds * pace)
            }
            if cancellation.isCanceled || stopped.withLock({ $0 }) { throw MediaError.canceled }
            try plan.finish()
        } catch {
            plan.abandon()
            throw error
        }
        try output.finishWriting()
        try finished()
    }

    /// The pass's error, once it has failed (any thread may ask).
    var failure: MediaError? {
        if case .failure(let error)? = outcome.withLock({ $0 }) { return error }
        return nil
    }

    /// Waits for the pass and rethrows its error; meanwhile tells `waiting`, about four times a second, how many
    /// seconds of audio are written (the video may have ended long before: a still picture's single frame).
    func join(waiting: (Double) -> Void = { _ in }) throws(MediaError) {
        guard started else { return }
        while !outcome.wait(timeout: 0.25, until: { $0 != nil }) {
            waiting(output.writtenSeconds)
        }
        if case .failure(let error)? = outcome.withLock({ $0 }) { throw error }
    }

    /// Stops the pass (another part failed) and waits for it.
    func stop() {
        guard started else { return }
        stopped.withLock { $0 = true }
        cancellation.cancel() // a read under way stops at once (FFmpeg's interrupt callback asks the token)
        _ = outcome.wait { $0 != nil }
    }
}
