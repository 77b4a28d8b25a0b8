import Testing
@testable import Pipeline

/// The progress reporter as a value: times in, calls out, with an interval that keeps the clock out of it.
@Suite struct ProgressReporterTests {
    /// Once the last sample is in, the finish reports the time it reached, not the last one the throttle let
    /// through: the frame count is complete by then, and a stale time made frames per media second read 38 for a
    /// 30 fps clip.
    @Test func theFinishStartsAtTheLastTimeGivenEvenIfItWasThrottled() {
        let reporter = ProgressReporter(duration: 10, interval: 3600, started: .now)
        var calls: [TranscodeProgress] = []
        reporter.update(2, frames: 60) { calls.append($0) }
        reporter.update(9.5, frames: 285) { calls.append($0) }
        reporter.update(7, frames: 285) { calls.append($0) }
        #expect(calls.isEmpty, "an hour's interval lets nothing through: \(calls)")
        reporter.finishingStep(frames: 285) { calls.append($0) }
        #expect(calls.map(\.presentationTime) == [9.5] && calls.first?.finishing == 1, "\(calls)")
        reporter.finish(frames: 285) { calls.append($0) }
        #expect(calls.last?.presentationTime == 10)
    }

    /// Without a known duration, the end is the latest time given, throttled or not.
    @Test func anEndWithoutADurationIsTheLatestTime() {
        let reporter = ProgressReporter(duration: 0, interval: 3600, started: .now)
        var calls: [TranscodeProgress] = []
        reporter.update(4.5, frames: 135) { calls.append($0) }
        reporter.finish(frames: 135) { calls.append($0) }
        #expect(calls.map(\.presentationTime) == [4.5] && calls.first?.duration == 4.5, "\(calls)")
    }

    /// Reported times only grow; past the declared duration (an input longer than it says) they go on growing, with
    /// a duration as long: clamped to it, the time stood still, and the stall watchdog failed the job.
    @Test func timesOnlyGrowAndGoOnPastTheDeclaredDuration() {
        let reporter = ProgressReporter(duration: 10, interval: 0, started: .now)
        var calls: [TranscodeProgress] = []
        for time in [1.0, 3, 2, 12, 15] { reporter.update(time, frames: 0) { calls.append($0) } }
        #expect(calls.map(\.presentationTime) == [1, 3, 3, 12, 15], "\(calls)")
        #expect(calls.map(\.duration) == [10, 10, 10, 12, 15] && calls.allSatisfy { $0.fraction <= 1 }, "\(calls)")
        reporter.finishingStep(frames: 0) { calls.append($0) }
        #expect(calls.last?.presentationTime == 15 && calls.last?.duration == 15, "\(calls)")
    }

    /// The sound's own pass catching up after the video's end: each advance behind the video's time is a finishing
    /// step (what the stall watchdog counts), one past it is time; a pass that does not advance counts nothing.
    /// Given as time only, its advances moved nothing the watchdog sees, and a long sound behind a short video
    /// failed as stalled.
    @Test func theSoundCatchingUpCountsAsFinishingSteps() {
        let reporter = ProgressReporter(duration: 100, interval: 0, started: .now)
        var calls: [TranscodeProgress] = []
        reporter.update(60, frames: 60) { calls.append($0) }
        for seconds in [10.0, 20, 20, 30] { reporter.catchUp(audioSeconds: seconds, frames: 60) { calls.append($0) } }
        #expect(calls.dropFirst().map(\.finishing) == [1, 2, 3] && calls.allSatisfy { $0.presentationTime == 60 }, "\(calls)")
        reporter.catchUp(audioSeconds: 80, frames: 60) { calls.append($0) }
        #expect(calls.last?.presentationTime == 80, "past the video, the sound's time: \(calls)")
    }
}
