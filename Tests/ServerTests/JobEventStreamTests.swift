import Foundation
@testable import Jobs
import Locks
import Pipeline
import Testing
import TestSupport
@testable import Server

/// The event stream never goes back: it subscribes before the job is read, and a snapshot read before a change it
/// has already sent live is dropped. The stream is made where a handler makes it (a pool thread) and only started by
/// the loop, which touches no store.
@Suite struct JobEventStreamTests {
    /// Waits, polling its token, until it is cancelled.
    private struct Stuck: JobRunner {
        func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                 progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
            while !cancellation.isCanceled { usleep(5_000) }
            throw MediaError.canceled
        }
    }

    /// The states a stream sent, in order, and whether it ended.
    private final class Received: Sendable {
        private let events = LockedValue<[String]>([])
        var all: [String] { events.withLock { $0 } }
        var send: @Sendable (String?) -> Void {
            { [events] text in events.withLock { $0.append(text.map(Received.state) ?? "end") } }
        }

        private static func state(_ text: String) -> String {
            guard text.contains("event: state\n") else { return "progress" }
            return text.firstMatch(of: /"state":"(\w+)"/).map { String($0.output.1) } ?? "?"
        }
    }

    /// A queued job in a store of its own, and a queue (not started) whose runner waits to be canceled.
    private func queuedJob() throws -> (fixture: StoreFixture, job: Job, queue: JobQueue) {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        return (fixture, job, JobQueue(store: fixture.store, directory: fixture.directory, runner: Stuck()))
    }

    /// A stream of job `id`'s events, each state rendered as its name alone.
    private func eventStream(_ id: String, _ queue: JobQueue) -> JobEventStream {
        JobEventStream(jobID: id, queue: queue) { job in Data(#"{"state":"\#(job.state.rawValue)"}"#.utf8) }
    }

    @Test func aSnapshotOlderThanALiveEventIsDropped() throws {
        let (fixture, job, queue) = try queuedJob()
        // The handler subscribed, then read the job while it was still queued...
        let stream = eventStream(job.id, queue)
        let stale = try #require(try fixture.store.job(id: job.id))
        // ...and before it could hand the snapshot over, the job started (its event reached the stream).
        try queue.start()
        #expect(eventually { stream.eventsWaiting == 1 })
        stream.deliverSnapshot(stale, live: { nil })
        let received = Received()
        let stop = stream.start(send: received.send)
        try queue.cancel(id: job.id)
        #expect(eventually(10) { received.all.last == "end" })
        #expect(received.all == ["running", "canceled", "end"], "\(received.all)")
        stop()
        queue.stop(grace: 1)
        #expect(queue.events.count == 0, "the stream unsubscribed")
    }

    /// A state from before one the stream has seen is stale: with two workers, a failed attempt's worker
    /// published the retry's `queued` after the other worker had claimed the job again and published `running`
    /// (not sent: the first attempt's was). The stream showed the running job as queued, and no progress after.
    @Test func aStateOlderThanOneSeenIsDroppedThoughItDiffers() throws {
        var (_, job, queue) = try queuedJob()
        let stream = eventStream(job.id, queue)
        let received = Received()
        let stop = stream.start(send: received.send)
        defer { stop() }
        // Each claim raises the job's lease token; a retry or a requeue keeps it. Written at times no clock orders.
        func publish(_ state: JobState, claim: Int) {
            job.state = state
            job.leaseToken = claim
            job.updatedAt = 0
            queue.events.publish(job.id, .state(job))
        }
        publish(.running, claim: 1)
        publish(.running, claim: 2) // the second attempt, claimed by the other worker
        publish(.queued, claim: 1) // the retry, published late by the worker that failed
        queue.events.publish(job.id, .progress(TranscodeProgress(presentationTime: 1, duration: 10, framesEncoded: 30, elapsed: 1)))
        publish(.queued, claim: 2) // requeued by a node that stopped: it goes
        publish(.running, claim: 3)
        publish(.succeeded, claim: 3)
        #expect(received.all == ["running", "progress", "queued", "running", "succeeded", "end"], "\(received.all)")
    }

    /// A snapshot newer than a stale state that reached the stream first goes out: the retry's late `queued` (claim
    /// 1) came in before the handler handed over its read (`running`, claim 2), and the snapshot, as not the first
    /// state, was dropped: the stream showed the running job as queued, without its progress, until it ended.
    @Test func aSnapshotNewerThanAStaleLiveStateGoesOut() throws {
        var (_, job, queue) = try queuedJob()
        let stream = eventStream(job.id, queue)
        job.state = .queued
        job.leaseToken = 1
        queue.events.publish(job.id, .state(job))
        job.state = .running
        job.leaseToken = 2
        stream.deliverSnapshot(job, live: { nil })
        let received = Received()
        let stop = stream.start(send: received.send)
        defer { stop() }
        queue.events.publish(job.id, .progress(TranscodeProgress(presentationTime: 1, duration: 10, framesEncoded: 30, elapsed: 1)))
        #expect(received.all == ["queued", "running", "progress"], "\(received.all)")
    }

    /// The snapshot's progress is read after its state is rendered (which shows the progress of its moment), so the
    /// first progress event is never older than the state's: read before, it went back (10.967 s, then 10.7).
    @Test func aSnapshotsProgressIsReadAfterItsState() throws {
        var (_, job, queue) = try queuedJob()
        job.state = .running
        job.leaseToken = 1
        let renders = LockedValue(0)
        let stream = JobEventStream(jobID: job.id, queue: queue) { job in
            renders.withLock { $0 += 1 }
            return Data(#"{"state":"\#(job.state.rawValue)"}"#.utf8)
        }
        // The live progress moves on with every reading: 1 s before the state is rendered, 2 s after.
        stream.deliverSnapshot(job) { TranscodeProgress(presentationTime: Double(1 + renders.withLock { $0 }), duration: 10, framesEncoded: 30, elapsed: 1) }
        let texts = LockedValue<[String]>([])
        let stop = stream.start { text in texts.withLock { $0.append(text ?? "end") } }
        defer { stop() }
        let sent = texts.withLock { $0 }
        #expect(sent.count == 2 && sent[0].contains("event: state") && sent[1].contains("event: progress")
                && sent[1].contains(#""presentationTime":2"#), "\(sent)")
    }

    @Test func aFreshSnapshotComesFirstAndAStreamNeverStartedUnsubscribes() throws {
        let (fixture, job, queue) = try queuedJob()
        let received = Received()
        do {
            let stream = eventStream(job.id, queue)
            stream.deliverSnapshot(try #require(try fixture.store.job(id: job.id)), live: { nil })
            _ = stream.start(send: received.send)
            #expect(received.all == ["queued"])
        }
        // A client that left before its stream started: the response is dropped, and its subscription with it.
        do {
            _ = JobEventStream(jobID: job.id, queue: queue) { _ in Data() }
        }
        #expect(queue.events.count == 0)
    }
}
