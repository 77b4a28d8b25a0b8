import Foundation
import Locks

/// Calls the progress callback: monotonic, throttled, and exactly at the end once. A time past the declared duration
/// (an input longer than it says: recordings joined with `cat` declare the last part's length) is reported as it is,
/// with a duration as long, so the fraction stays within 1 and the time keeps growing.
final class ProgressReporter {
    private let duration: Double
    private let interval: Duration
    private let started: ContinuousClock.Instant
    private var lastCall: ContinuousClock.Instant
    private var reported: Double
    /// The latest time given to `update`, whether it was reported or throttled away.
    private var latest: Double
    private let resumedFrom: Double?
    /// Steps of the finishing work so far (see `TranscodeProgress.finishing`); nil before it starts.
    private var finishingSteps: Int?
    /// On a resume, until time passes the checkpoint's end: steps of the work that gets back to it (see
    /// `TranscodeProgress.verifying`); nil once past it, or when not resuming.
    private var resumingSteps: Int?
    /// Seconds the sound's own pass had written at the last `catchUp`.
    private var audioSeconds = -1.0

    /// - Parameters:
    ///   - resumedFrom: seconds of output an earlier attempt made (a resumed checkpoint): progress starts there,
    ///     and says so.
    ///   - checkedSteps: `verifying` steps reported before (the checkpoint's files checked): the steps of the read
    ///     up to the checkpoint's end count on from there.
    init(duration: Double, interval: Double, started: ContinuousClock.Instant, resumedFrom: Double? = nil, checkedSteps: Int = 0) {
        self.duration = duration
        self.interval = .milliseconds(Int64(interval * 1000))
        self.started = started
        self.resumedFrom = resumedFrom
        reported = resumedFrom ?? 0
        latest = reported
        lastCall = started
        resumingSteps = resumedFrom == nil ? nil : checkedSteps
    }

    var elapsed: Double { Self.seconds(since: started) }

    /// Wall-clock seconds from `start` to now.
    static func seconds(since start: ContinuousClock.Instant) -> Double {
        (ContinuousClock.now - start).inSeconds
    }

    func update(_ presentationTime: Double, frames: Int, call: (TranscodeProgress) -> Void) {
        // Not clamped to the declared duration: the time stood still past it, and the stall watchdog failed an input
        // that went on for long enough (a second half of a recording) as stalled, every time it was tried.
        latest = max(latest, presentationTime)
        let bound = max(duration, latest)
        let now = ContinuousClock.now
        if let steps = resumingSteps, let resumedFrom {
            if presentationTime <= resumedFrom {
                // Nothing past the checkpoint yet: the input is read again up to it (from its start when it cannot
                // seek there) or the sound's own pass catches up with the video, minutes for a long film with no new
                // time. Each sample is a step, reported as the check before it, or a watchdog would see a stall.
                resumingSteps = steps + 1
                guard now - lastCall >= interval else { return }
                lastCall = now
                call(TranscodeProgress(presentationTime: 0, duration: 0, framesEncoded: frames, elapsed: elapsed,
                                       resumedFrom: resumedFrom, verifying: steps + 1))
                return
            }
            resumingSteps = nil
        }
        guard now - lastCall >= interval else { return }
        lastCall = now
        reported = latest
        call(TranscodeProgress(presentationTime: reported, duration: bound, framesEncoded: frames, elapsed: elapsed,
                               resumedFrom: resumedFrom))
    }

    /// The sound's own pass catching up once the video's is done (`audioSeconds` written): its time while past the
    /// video's, else a finishing step each time it advances. Given as time only, it moved nothing a watchdog sees
    /// (the time stays at the video's end), and minutes of normalized sound behind a still picture's seconds of video
    /// failed the job as stalled. A pass that does not advance counts no step.
    func catchUp(audioSeconds seconds: Double, frames: Int, call: (TranscodeProgress) -> Void) {
        guard seconds > audioSeconds else { return }
        audioSeconds = seconds
        if resumingSteps != nil || seconds > latest {
            update(seconds, frames: frames, call: call)
        } else {
            finishingStep(frames: frames, call: call)
        }
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
        call(TranscodeProgress(presentationTime: reported, duration: max(duration, reported), framesEncoded: frames,
                               elapsed: elapsed, resumedFrom: resumedFrom, finishing: steps))
    }

    func finish(frames: Int, call: (TranscodeProgress) -> Void) {
        let end = max(duration, latest)
        call(TranscodeProgress(presentationTime: end, duration: end, framesEncoded: frames, elapsed: elapsed,
                               resumedFrom: resumedFrom, finishing: finishingSteps))
    }
}
