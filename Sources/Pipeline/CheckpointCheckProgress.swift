/// The check of what an earlier attempt left in a checkpoint, each file read whole: reported as `verifying` steps as
/// it goes, throttled like the transcode's progress, or a long film's check looks like a stall.
struct CheckpointCheckProgress {
    private let started: ContinuousClock.Instant
    private let interval: Duration
    private var lastReport: ContinuousClock.Instant
    /// Files checked so far (the steps the read up to the checkpoint's end counts on from: `ProgressReporter`).
    private(set) var steps = 0

    init(started: ContinuousClock.Instant, interval: Double) {
        self.started = started
        self.interval = .milliseconds(Int64(interval * 1000))
        lastReport = started
    }

    /// One file checked: reported when it is the first, or the interval has passed since the last report.
    mutating func step(_ progress: (TranscodeProgress) -> Void) {
        steps += 1
        let now = ContinuousClock.now
        guard steps == 1 || now - lastReport >= interval else { return }
        lastReport = now
        progress(TranscodeProgress(presentationTime: 0, duration: 0, framesEncoded: 0,
                                   elapsed: ProgressReporter.seconds(since: started), verifying: steps))
    }
}
