import Foundation

/// Calls the progress callback: monotonic, clamped to the duration, throttled, and exactly at the end once.
final class ProgressReporter {
    private let duration: Double
    private let interval: Duration
    private let started: ContinuousClock.Instant
    private var lastCall: ContinuousClock.Instant
    private var reported: Double
    /// The latest time given to `update`, clamped, whether it was reported or throttled away.
    private var latest: Double
    private let resumedFrom: Double?
    /// Steps of the finishing work so far (see `TranscodeProgress.finishing`); nil before it starts.
    private var finishingSteps: Int?

    /// - Parameter resumedFrom: seconds of output an earlier attempt made (a resumed checkpoint): progress starts
    ///   there, and says so.
    init(duration: Double, interval: Double, started: ContinuousClock.Instant, resumedFrom: Double? = nil) {
        self.duration = duration
        self.interval = .milliseconds(Int64(interval * 1000))
        self.started = started
        self.resumedFrom = resumedFrom
        reported = resumedFrom ?? 0
        latest = reported
        lastCall = started
    }

    var elapsed: Double { Self.seconds(since: started) }

    /// Wall-clock seconds from `start` to now.
    static func seconds(since start: ContinuousClock.Instant) -> Double {
        let time = ContinuousClock.now - start
        return Double(time.components.seconds) + Double(time.components.attoseconds) * 1e-18
    }

    func update(_ presentationTime: Double, frames: Int, call: (TranscodeProgress) -> Void) {
        let bound = duration > 0 ? duration : presentationTime
        latest = max(latest, min(presentationTime, bound))
        let now = ContinuousClock.now
        guard now - lastCall >= interval else { return }
        lastCall = now
        reported = latest
        call(TranscodeProgress(presentationTime: reported, duration: bound, framesEncoded: frames, elapsed: elapsed,
                               resumedFrom: resumedFrom))
    }

    /// One more step of the work that completes the output after its last sample: the time stays where the last
    /// sample left it (the last `update`, reported or not: `frames` are all the frames by then), the step count goes
    /// up (throttled like `update`; the first step is reported at once).
    func finishingStep(frames: Int, call: (TranscodeProgress) -> Void) {
        reported = latest
        let steps = (finishingSteps ?? 0) + 1
        finishingSteps = steps
        let now = ContinuousClock.now
        guard steps == 1 || now - lastCall >= interval else { return }
        lastCall = now
        call(TranscodeProgress(presentationTime: reported, duration: duration > 0 ? duration : reported, framesEncoded: frames,
                               elapsed: elapsed, resumedFrom: resumedFrom, finishing: steps))
    }

    func finish(frames: Int, call: (TranscodeProgress) -> Void) {
        let end = max(duration, latest)
        call(TranscodeProgress(presentationTime: end, duration: end, framesEncoded: frames, elapsed: elapsed,
                               resumedFrom: resumedFrom, finishing: finishingSteps))
    }
}
