import Foundation
import Locks
import Logging
import Pipeline
import Testing
import TestSupport
@testable import Jobs

/// How a job's end reaches the store, and what the queue says when the store will not take it: every outcome is
/// recorded or retried, every state change is published, every swallowed error is logged with the job's id. The
/// store's failures here are real: triggers installed with raw SQL refuse the writes.
@Suite(.serialized) struct JobOutcomeTests {
    /// Log lines, as a logger's destination.
    final class Lines: Sendable {
        private let lines = LockedValue<[String]>([])
        var all: [String] { lines.withLock { $0 } }
        var logger: Logger { Logger(format: .json, minimumLevel: .debug) { [lines] line in lines.withLock { $0.append(line) } } }
    }

    private func queue(_ fixture: StoreFixture, lines: Lines, runner: any JobRunner = TranscodeRunner(),
                       configure: (inout JobQueue.Configuration) -> Void = { _ in }) -> JobQueue {
        var configuration = JobQueue.Configuration()
        configuration.pollInterval = 0.1
        configuration.recordRetryDelays = [0.05, 0.1, 0.2]
        configure(&configuration)
        return JobQueue(store: fixture.store, directory: fixture.directory, runner: runner, configuration: configuration,
                        logger: lines.logger)
    }

    /// Runs SQL on the store's file through a second connection, as an operator (or a full disk) would.
    private func sql(_ fixture: StoreFixture, _ statements: String) throws {
        try Database(path: fixture.directory.databasePath).execute(statements)
    }

    /// A trigger `name` that refuses every move of a job to `state`, as a full disk would (or with `message`).
    private static func refusing(_ state: String, name: String, message: String = "database or disk is full (test)") -> String {
        """
        CREATE TRIGGER \(name) BEFORE UPDATE OF state ON jobs WHEN NEW.state = '\(state)'
        BEGIN SELECT RAISE(ABORT, '\(message)'); END;
        """
    }

    private static let refuseSuccess = refusing("succeeded", name: "refuse_success")
    private static let refuseFailure = refusing("failed", name: "refuse_failure")

    @Test func aSuccessTheStoreCannotRecordEndsFailedNotRunning() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, Self.refuseSuccess)
        let lines = Lines()
        let queue = queue(fixture, lines: lines)
        try queue.start()
        #expect(try eventually(30) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 5)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "store_error", "\(failed.state) \(failed.errorCode ?? "")")
        #expect(failed.errorMessage?.contains("database or disk is full (test)") == true, "\(failed.errorMessage ?? "")")
        #expect(fixture.outputFiles.isEmpty, "the unrecorded output is removed")
        let retries = lines.all.filter { $0.contains("recording the end of the job failed") && $0.contains(job.id) }
        #expect(retries.count == 4, "one try and three retries: \(lines.all)")
    }

    @Test func aSuccessIsRecordedOnceTheStoreTakesItAgain() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, Self.refuseSuccess)
        let lines = Lines()
        let queue = queue(fixture, lines: lines) { $0.recordRetryDelays = [1, 1, 1, 1] }
        try queue.start()
        #expect(eventually(30) { lines.all.contains { $0.contains("recording the end of the job failed") } })
        try sql(fixture, "DROP TRIGGER refuse_success")
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 5)
        let done = try #require(try fixture.store.job(id: job.id))
        #expect(done.state == .succeeded)
        #expect(fixture.outputFiles == [job.id])
    }

    /// With a store of its own, nobody else records a job's end: its last write is tried until the store takes it.
    /// The job stayed `running`, with nobody running it, until the process started again.
    @Test func theLastWriteOfAnEndIsTriedUntilTheStoreTakesIt() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, Self.refuseSuccess + Self.refuseFailure)
        let lines = Lines()
        let queue = queue(fixture, lines: lines)
        try queue.start()
        defer { queue.stop(grace: 5) }
        // The success's tries (a first and three retries), then the fallback's, more than its delays allow.
        #expect(eventually(30) { lines.all.filter { $0.contains("recording the job as failed failed") && $0.contains(job.id) }.count >= 6 })
        #expect(try fixture.store.job(id: job.id)?.state == .running)
        try sql(fixture, "DROP TRIGGER refuse_success; DROP TRIGGER refuse_failure;")
        #expect(try eventually(5) { try fixture.store.job(id: job.id)?.state == .failed })
        #expect(try fixture.store.job(id: job.id)?.errorCode == "store_error")
    }

    /// A failure whose write is refused is tried until the store takes it, but a stop is not held up by it: the job
    /// stays `running`, for the next start's recovery.
    @Test func aRefusedEndDoesNotHoldUpAStop() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, Self.refuseFailure)
        let lines = Lines()
        let queue = queue(fixture, lines: lines, runner: FailingRunner())
        try queue.start()
        // A first try and three retries, then more than the delays allow.
        #expect(eventually(30) { lines.all.filter { $0.contains("recording the end of the job failed") && $0.contains(job.id) }.count >= 6 })
        let stopping = Date()
        queue.stop(grace: 2)
        #expect(Date().timeIntervalSince(stopping) < 8, "the stop waited \(Date().timeIntervalSince(stopping)) s")
        #expect(try fixture.store.job(id: job.id)?.state == .running)
    }

    /// A cancel the API acknowledged whose end never reached the store (the process killed first, the write
    /// refused until the stop gave up): the next start cancels the job instead of running it again. The request
    /// lived in memory only with a store of its own, and the job was requeued with one more attempt.
    @Test func anAcknowledgedCancelSurvivesTheProcess() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, Self.refusing("canceled", name: "refuse_cancel"))
        let lines = Lines()
        let first = queue(fixture, lines: lines, runner: StuckRunner())
        try first.start()
        var firstStopped = false
        defer { if !firstStopped { first.stop(grace: 1) } }
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .running })
        #expect(try first.cancel(id: job.id).state == .running, "acknowledged; the worker records it")
        #expect(eventually(10) { lines.all.contains { $0.contains("recording the end of the job failed") && $0.contains(job.id) } })
        first.stop(grace: 1)
        firstStopped = true
        #expect(try fixture.store.job(id: job.id)?.state == .running, "its end never stored")
        try sql(fixture, "DROP TRIGGER refuse_cancel")

        let next = queue(fixture, lines: lines, runner: StuckRunner()) { $0.workers = 0 }
        try next.start()
        defer { next.stop(grace: 1) }
        let recovered = try #require(try fixture.store.job(id: job.id))
        #expect(recovered.state == .canceled && recovered.attempts == 1, "\(recovered.state), attempt \(recovered.attempts)")
    }

    /// A cancel that comes while a shutdown waits for the job's attempt to end: the job ends canceled. The shutdown's
    /// reason was kept, the job went back to the queue, and the next start ran it though the cancel was answered.
    @Test func aCancelDuringAShutdownEndsTheJobCanceled() throws {
        /// Takes 1.5 s to stop once told, as a transcode tidying up does.
        struct SlowToStop: JobRunner {
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                while !cancellation.isCanceled { usleep(10_000) }
                Thread.sleep(forTimeInterval: 1.5)
                throw MediaError.canceled
            }
        }
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, lines: Lines(), runner: SlowToStop())
        try queue.start()
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .running })
        let stopped = DispatchSemaphore(value: 0)
        Thread { queue.stop(grace: 0.2); stopped.signal() }.start()
        Thread.sleep(forTimeInterval: 0.6) // the grace is over: the attempt is told to stop for the shutdown
        #expect(try queue.cancel(id: job.id).state == .running)
        stopped.wait()
        #expect(try fixture.store.job(id: job.id)?.state == .canceled)
    }

    @Test func claimErrorsAreLogged() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        _ = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, Self.refusing("running", name: "refuse_claims", message: "claims refused (test)"))
        let lines = Lines()
        let queue = queue(fixture, lines: lines)
        try queue.start()
        #expect(eventually(10) { lines.all.contains { $0.contains("claiming the next job failed") && $0.contains("claims refused (test)") } })
        queue.stop(grace: 1)
    }

    /// A queued job whose upload the store cannot read: the `uploads` table renamed away (SQLite's own error, "no
    /// such table"), as a failover or a locked file would fail the read; renamed back by `uploads_away`.
    private func jobWhoseUploadCannotBeRead() throws -> (StoreFixture, Job) {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, "ALTER TABLE uploads RENAME TO uploads_away")
        return (fixture, job)
    }

    /// A store that fails the read of a job's input (a failover, a locked file) says nothing of the job: it was
    /// failed for good with the store's code. It is read again, then the job goes back to the queue, as after a crash.
    @Test func aStoreFailingBeforeTheJobRunsSendsItBackToTheQueue() throws {
        let (fixture, job) = try jobWhoseUploadCannotBeRead()
        let lines = Lines()
        // A long wait before it goes back: the table is given back well before the second attempt reads.
        let queue = queue(fixture, lines: lines) { $0.unavailableBackoff = 4 }
        try queue.start()
        defer { queue.stop(grace: 5) }
        let failedReads = { lines.all.filter { $0.contains("reading the job's input upload failed") && $0.contains(job.id) }.count }
        #expect(eventually(10) { failedReads() >= 4 }, "the read is tried again: \(lines.all)")
        try sql(fixture, "ALTER TABLE uploads_away RENAME TO uploads")
        #expect(try eventually(30) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        let done = try #require(try fixture.store.job(id: job.id))
        #expect(done.state == .succeeded, "\(done.state) \(done.errorCode ?? "") \(done.errorMessage ?? "")")
        #expect(done.attempts == 2, "the failed start spent an attempt")
    }

    /// A cancel while the read is tried again ends the job at once, not after the tries.
    @Test func aCancelDoesNotWaitOutTheReadsTries() throws {
        let (fixture, job) = try jobWhoseUploadCannotBeRead()
        let lines = Lines()
        let queue = queue(fixture, lines: lines) { $0.recordRetryDelays = [5, 5, 5] }
        try queue.start()
        defer { queue.stop(grace: 5) }
        #expect(eventually(10) { lines.all.contains { $0.contains("reading the job's input upload failed") } })
        _ = try queue.cancel(id: job.id)
        #expect(try eventually(3) { try fixture.store.job(id: job.id)?.state == .canceled }, "\(lines.all)")
    }

    /// A store that keeps failing it ends the job once its attempts are spent, saying so.
    @Test func aStoreThatKeepsFailingEndsTheJobAfterItsAttempts() throws {
        let (fixture, job) = try jobWhoseUploadCannotBeRead()
        let lines = Lines()
        let queue = queue(fixture, lines: lines) { $0.unavailableBackoff = 0.1 }
        try queue.start()
        defer { queue.stop(grace: 5) }
        #expect(try eventually(30) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "store_error", "\(failed.state) \(failed.errorCode ?? "")")
        #expect(failed.errorMessage?.contains("reading the job's input upload") == true, "\(failed.errorMessage ?? "")")
        #expect(failed.errorMessage?.contains("no such table: uploads") == true, "the store's own words: \(failed.errorMessage ?? "")")
        #expect(failed.errorMessage?.hasSuffix("(attempt 3 of 3)") == true, "\(failed.errorMessage ?? "")")
    }

    @Test func settingsThatNoLongerReadFailTheJobInsteadOfRunningWithDefaults() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        // As a later version might have written them, or a hand edit.
        try sql(fixture, #"UPDATE jobs SET settings = '{"video": {"width": "wide"}}' WHERE id = '\#(job.id)'"#)
        let stored = try #require(try fixture.store.job(id: job.id))
        #expect(stored.unreadableSettings?.text == #"{"video": {"width": "wide"}}"#)
        #expect(stored.unreadableSettings?.problem.hasPrefix("settings.video.width:") == true, "\(stored.unreadableSettings?.problem ?? "")")
        let lines = Lines()
        let queue = queue(fixture, lines: lines)
        try queue.start()
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 1)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "invalid_settings")
        #expect(failed.errorMessage?.contains("settings.video.width") == true, "\(failed.errorMessage ?? "")")
        #expect(fixture.outputFiles.isEmpty)
    }

    /// A number out of an integer's reach in an integer column (a hand edit: SQLite keeps `9e999` as a real,
    /// infinity) reads as no number: it trapped the server on every read of the row, after every restart.
    @Test func aNumberOutOfReachInARowDoesNotStopTheServer() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try sql(fixture, "UPDATE jobs SET priority = 9e999, attempts = -1e300 WHERE id = '\(job.id)'")
        let stored = try #require(try fixture.store.job(id: job.id))
        #expect(stored.priority == 0 && stored.attempts == 1, "\(stored.priority) \(stored.attempts)")
        #expect(try fixture.store.jobs(state: nil, limit: 10, cursor: nil).jobs.count == 1)
        #expect(SQLValue.real(2.9).int == 2 && SQLValue.real(-2.9).int == -2 && SQLValue.real(.nan).int == nil)
    }

    @Test func recoveryPublishesTheStatesItChanges() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let orphan = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let dead = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        _ = try fixture.store.claimNext(worker: "dead-process", leaseSeconds: 20)
        _ = try fixture.store.claimNext(worker: "dead-process", leaseSeconds: 20)
        try sql(fixture, "UPDATE jobs SET attempts = 3 WHERE id = '\(dead.id)'")
        let lines = Lines()
        let queue = queue(fixture, lines: lines, runner: FailingRunner())
        let seen = LockedValue<[String: [JobState]]>([:])
        for id in [orphan.id, dead.id] {
            _ = queue.events.subscribe(id) { event in
                if case .state(let job) = event { seen.withLock { $0[id, default: []].append(job.state) } }
            }
        }
        try queue.start()
        #expect(try eventually(10) { try fixture.store.job(id: orphan.id)?.state.isTerminal == true })
        queue.stop(grace: 1)
        #expect(seen.withLock { $0[dead.id] } == [.failed], "worker_crashed is published")
        #expect(seen.withLock { $0[orphan.id] }?.first == .queued, "the requeue is published: \(seen.withLock { $0 })")
        #expect(lines.all.contains { $0.contains(dead.id) && $0.contains("stopped unexpectedly") })
    }

    @Test func waitingForAJobsEndWakesOnItsEvent() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let lines = Lines()
        let queue = queue(fixture, lines: lines, runner: StuckRunner())
        #expect(try queue.waitUntilFinished(id: job.id, timeout: 0.2)?.state == .queued, "a queued job does not end by itself")
        try queue.start()
        #expect(try eventually { try fixture.store.job(id: job.id)?.state == .running })
        let ended = LockedValue<Job?>(nil)
        let waiter = DispatchGroup()
        let before = queue.events.count
        waiter.enter()
        NamedThread.start("waiter") {
            ended.withLock { $0 = try? queue.waitUntilFinished(id: job.id, timeout: 30) }
            waiter.leave()
        }
        // The waiter has subscribed (and found the job running) before the cancel: the event must wake it.
        #expect(eventually { queue.events.count > before })
        usleep(50_000)
        let asked = Date()
        try queue.cancel(id: job.id)
        #expect(waiter.wait(timeout: .now() + 10) == .success)
        // Woken by the event (at once; 5 s for a busy machine), not by its 30 s timeout.
        #expect(Date().timeIntervalSince(asked) < 5, "woken by the event, not by its timeout")
        #expect(ended.withLock { $0?.state } == .canceled)
        #expect(try queue.waitUntilFinished(id: "missing", timeout: 0.1) == nil)
        queue.stop(grace: 1)
    }
}
