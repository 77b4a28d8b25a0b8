import Foundation
import Locks
import Pipeline
import Testing
import TestSupport
@testable import Jobs

/// Reports progress every 50 ms for `seconds`, then succeeds with an empty output folder; stops when canceled.
struct PacedRunner: JobRunner {
    var seconds = 1.5
    /// How long a job of priority 1 or more runs instead (one a test cancels: it must still be running then).
    var prioritySeconds: Double?

    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        let seconds = job.priority > 0 ? prioritySeconds ?? seconds : seconds
        let start = Date()
        // The output is written as the job goes, as a real transcode writes its folder.
        try? FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        while Date().timeIntervalSince(start) < seconds {
            if cancellation.isCanceled { throw MediaError.canceled }
            let elapsed = Date().timeIntervalSince(start)
            progress(TranscodeProgress(presentationTime: elapsed, duration: seconds, framesEncoded: Int(elapsed * 30), elapsed: elapsed))
            usleep(50_000)
        }
        _ = FileManager.default.createFile(atPath: outputDirectory + "/output.mp4", contents: Data("x".utf8))
        return TranscodeResult(path: outputDirectory + "/output.mp4", size: 1, container: .mp4, tracks: [], duration: seconds,
                               framesEncoded: 3, elapsed: seconds, mimeType: "video/mp4")
    }
}

/// Runs until released, whatever is canceled (a thread held in a call no stop reaches), then succeeds as
/// `PacedRunner` would, or (`succeeds` false) ends as canceled.
struct HeldRunner: JobRunner {
    let release = DispatchSemaphore(value: 0)
    var succeeds = true

    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        release.wait()
        guard succeeds else { throw MediaError.canceled }
        return try PacedRunner(seconds: 0.05).run(job, input: input, outputDirectory: outputDirectory,
                                                  cancellation: cancellation, progress: progress)
    }
}

/// Nodes of a cluster in one test process: job queues on their own connections to one PostgreSQL database and one
/// data directory, talking only through the database (its rows and its notifications), as separate machines would.
@Suite struct ClusterQueueTests {
    private func node(_ fixture: StoreFixture, workers: Int, runner: any JobRunner = PacedRunner(),
                      configure: (inout JobQueue.Configuration) -> Void = { _ in }) throws -> JobQueue {
        var configuration = JobQueue.Configuration()
        configuration.workers = workers
        configuration.pollInterval = 5 // long: a job that starts sooner was woken by a notification
        configuration.progressSaveInterval = 0.1
        configure(&configuration)
        let queue = JobQueue(store: try fixture.reopen(), directory: fixture.directory, runner: runner, configuration: configuration)
        try queue.start()
        return queue
    }

    @Test func aJobQueuedThroughOneNodeStartsOnAnIdleNodeAtOnce() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let api = try node(fixture, workers: 0)
        defer { api.stop(grace: 5) }
        // Polling every minute: a job that starts within seconds was woken by a notification.
        let worker = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.05)) { $0.pollInterval = 60 }
        defer { worker.stop(grace: 5) }
        var waits: [Double] = []
        for _ in 0..<5 {
            let job = try api.store.createJob(input: upload.id, settings: TranscodeSettings())
            #expect(eventually(10) { (try? api.store.job(id: job.id))?.state == .succeeded })
            let done = try #require(try api.store.job(id: job.id))
            waits.append((done.startedAt ?? .infinity) - done.createdAt)
        }
        // Both times are the database's clock. The worker polls every 60 s: only NOTIFY makes it this quick (well
        // under a second here; 3 s for a busy machine).
        #expect(waits.allSatisfy { $0 < 3 }, "enqueue to start: \(waits)")
    }

    /// A claim that committed but whose answer was lost with the link is found by the worker, which runs the job: it
    /// stayed running under that worker's name, renewed by no one, until its lease ran out and cost it an attempt
    /// (with one attempt allowed, it failed as `worker_crashed` without having run).
    @Test func aJobWhoseClaimLostItsAnswerIsRunNotLeftToItsLease() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let server = try PostgresServer.shared()
        let proxy = try PostgresCutProxy(server: server, trigger: "SET state = 'running', lease")
        var configuration = JobQueue.Configuration()
        configuration.workers = 1
        configuration.maxAttempts = 1
        configuration.leaseSeconds = 30
        configuration.pollInterval = 0.5
        let queue = JobQueue(store: try PostgresJobStore(uri: proxy.proxied(try #require(fixture.uri), server: server), root: fixture.directory.root.path),
                             directory: fixture.directory, runner: PacedRunner(seconds: 0.05), configuration: configuration)
        try queue.start()
        defer { queue.stop(grace: 5) }
        #expect(eventually(10) { proxy.hasCut }, "the claim's answer was lost")
        #expect(eventually(15) { (try? fixture.store.job(id: job.id))?.state == .succeeded }, "\(String(describing: try? fixture.store.job(id: job.id)))")
        let done = try #require(try fixture.store.job(id: job.id))
        #expect(done.attempts == 1 && done.leaseToken == 1, "one claim, one attempt: \(done.attempts), token \(done.leaseToken)")
    }

    /// A queued job whose stored settings hold a key this version does not know, as a newer node would write them.
    private func jobOfANewerVersion(_ fixture: StoreFixture) throws -> (job: Job, store: PostgresJobStore) {
        let store = try #require(fixture.store as? PostgresJobStore)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        _ = try store.rows("UPDATE jobs SET settings = ? WHERE id = ?", [.text(#"{"video": {"aKeyOfANewerVersion": true}}"#), .text(job.id)])
        return (job, store)
    }

    /// In a rolling upgrade a newer node may write settings an older one cannot read (a key it does not know): the
    /// older node gives such a job back, its attempt not counted, claims it no more and goes on with the others, and
    /// a node that can read it runs it. It failed them for good (`invalid_settings`) though a newer node was there.
    @Test func aJobWhoseSettingsANewerNodeWroteIsLeftToANodeThatCanReadThem() throws {
        let fixture = try StoreFixture(.postgres)
        let (newer, store) = try jobOfANewerVersion(fixture)
        #expect(try fixture.store.job(id: newer.id)?.unreadableSettings != nil)
        let older = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.05)) { $0.pollInterval = 0.2 }
        defer { older.stop(grace: 5) }
        let next = try fixture.store.createJob(input: newer.inputUpload, settings: TranscodeSettings())
        #expect(eventually(10) { (try? fixture.store.job(id: next.id))?.state == .succeeded }, "the job behind it is not held up")
        usleep(1_000_000) // polls every 0.2 s meanwhile
        let left = try #require(try fixture.store.job(id: newer.id))
        #expect(left.state == .queued && left.errorCode == nil && left.attempts == 1, "\(left.state) \(left.errorCode ?? "")")
        #expect(left.leaseToken == 1, "claimed once, then left alone: \(left.leaseToken) claims")
        // A node that reads them (here: the settings as a newer version reads them) runs it.
        _ = try store.rows("UPDATE jobs SET settings = ? WHERE id = ?", [.text("{}"), .text(newer.id)])
        let newerNode = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.05)) { $0.pollInterval = 0.2 }
        defer { newerNode.stop(grace: 5) }
        #expect(eventually(10) { (try? fixture.store.job(id: newer.id))?.state == .succeeded })
    }

    /// A job whose settings no node has read fails once its grace is over (settings edited by hand, a rollback): the
    /// node that gave it back claims it again then. It stayed queued for ever on a node that kept running.
    @Test func aJobNoNodeCanReadFailsOnceItsGraceIsOver() throws {
        let fixture = try StoreFixture(.postgres)
        let (job, _) = try jobOfANewerVersion(fixture)
        let older = try node(fixture, workers: 1) { configuration in
            configuration.pollInterval = 0.2
            configuration.unreadableSettingsGrace = 10
        }
        defer { older.stop(grace: 5) }
        #expect(eventually(20) { (try? fixture.store.job(id: job.id)).map { $0?.leaseToken == 1 && $0?.state == .queued } == true },
                "claimed, given back")
        #expect(eventually(30) { (try? fixture.store.job(id: job.id))?.state == .failed })
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.errorCode == "invalid_settings" && failed.errorMessage?.contains("aKeyOfANewerVersion") == true, "\(failed.errorMessage ?? "")")
    }

    /// A node whose shared folder goes away (a mount gone stale or unmounted: here its path, a link, made to point at
    /// an empty folder as the job runs) sends the job it failed back to the queue, its attempt not counted, and
    /// claims nothing until the folder is back; the other nodes run the jobs. Every job this node claimed failed
    /// for good before (`input_missing`, in milliseconds each).
    @Test func aNodeThatLosesTheSharedFolderGivesItsJobsBackAndTakesNoneUntilItIsBack() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let scratch = try Media.scratch()
        let link = scratch.appendingPathComponent("mount").path
        let empty = scratch.appendingPathComponent("empty").path
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: fixture.directory.root.path)
        @Sendable func point(at target: String) throws {
            try? FileManager.default.removeItem(atPath: link + ".new")
            try FileManager.default.createSymbolicLink(atPath: link + ".new", withDestinationPath: target)
            guard rename(link + ".new", link) == 0 else { throw POSIXError(.EIO) }
        }
        /// The mount goes away while the job runs, which then fails as a transcode reading a vanished file does.
        struct LosesTheFolder: JobRunner {
            let lose: @Sendable () -> Void
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                lose()
                throw MediaError(code: "input_unreadable", message: "Reading the input failed: Stale file handle.")
            }
        }
        let root = fixture.directory.root.path
        var configuration = JobQueue.Configuration()
        configuration.workers = 1
        configuration.pollInterval = 0.2
        let lost = JobQueue(store: try PostgresJobStore(uri: try #require(fixture.uri), root: link), directory: DataDirectory(path: link),
                            runner: LosesTheFolder { try? point(at: empty) }, configuration: configuration)
        try lost.start()
        defer { lost.stop(grace: 5) }
        let first = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(eventually(10) { (try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == empty })
        #expect(eventually(10) { (try? fixture.store.job(id: first.id))?.state == .queued }, "given back to the queue")
        #expect(try fixture.store.job(id: first.id)?.attempts == 1, "its attempt not counted")
        #expect(!lost.seesSharedFolder, "not ready: /readyz says so")
        // Claimed again by nobody on the lost node (it would fail them all): another node runs them.
        var more: [Job] = []
        for _ in 0..<3 { more.append(try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())) }
        usleep(1_000_000)
        #expect(try fixture.store.job(id: first.id)?.state == .queued)
        for job in more {
            let now = try #require(try fixture.store.job(id: job.id))
            #expect(now.state == .queued && now.leaseToken == 0, "never claimed: \(now.state) lease \(now.leaseToken)")
        }
        let other = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.05))
        for job in [first] + more {
            #expect(eventually(20) { (try? fixture.store.job(id: job.id))?.state == .succeeded }, "\(job.id)")
        }
        other.stop(grace: 5)
        // Back: the node takes jobs again (and its runner, which loses the folder again, gives this one back too).
        try point(at: root)
        #expect(eventually(10) { lost.seesSharedFolder })
        let last = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(eventually(10) { (try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == empty }, "claimed once back")
        #expect(eventually(10) { (try? fixture.store.job(id: last.id))?.state == .queued })
        #expect(try fixture.store.job(id: last.id)?.errorCode == nil)
    }

    /// A cancel that comes while a crashed attempt's end is being recorded is stored before that end: the end that
    /// sends the job back to the queue is canceled in the same write, and no node hears the job queued. It was noted
    /// only in the node, so the job was queued for a moment (announced to every node, one of which could claim it and
    /// announce it running again) before this node canceled it.
    @Test func aCancelWhileACrashedAttemptEndsNeverQueuesTheJobOnASharedStore() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let heard = LockedValue<[StoreNotice]>([])
        let listener = PostgresListener(uri: try #require(fixture.uri)) { notice in
            heard.withLock { $0.append(notice) }
            heard.notifyAll()
        }
        defer { listener.stop() }
        try #require(heard.wait(timeout: 10) { $0.contains(.listening) })
        let runner = CrashingWithFilesRunner()
        let queue = try node(fixture, workers: 1, runner: runner)
        var stopped = false
        defer { if !stopped { queue.stop(grace: 5) } }
        try #require(runner.failing.wait(timeout: .now() + 30) == .success)
        try #require(runner.removalUnderWay(), "the removal was not caught under way")
        let answered = try queue.cancel(id: job.id)
        #expect(answered.state == .canceled, "the cancel answered \(answered.state)")
        queue.stop(grace: 5)
        stopped = true
        #expect(heard.wait(timeout: 10) { $0.filter { $0 == .changed(job.id) }.count >= 2 }, "running, then canceled: \(heard.withLock { $0 })")
        usleep(300_000)
        #expect(!heard.withLock { $0 }.contains(.queued(job.id)), "the job was announced queued: \(heard.withLock { $0 })")
        #expect(try fixture.store.job(id: job.id)?.state == .canceled && runner.calls.withLock { $0 } == 1)
    }

    @Test func aJobRunningOnAnotherNodeIsWatchedAndCanceledFromThisOne() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let api = try node(fixture, workers: 0)
        defer { api.stop(grace: 5) }

        // Watched: states and progress reach the API node's subscribers (subscribed before any worker is there).
        let job = try api.store.createJob(input: upload.id, settings: TranscodeSettings())
        let seen = LockedValue<[String]>([])
        let key = api.events.subscribe(job.id) { event in
            switch event {
            case .state(let job): seen.withLock { $0.append(job.state.rawValue) }
            case .progress(let progress): seen.withLock { $0.append(progress.presentationTime > 0 ? "progress" : "zero") }
            case .fetching: seen.withLock { $0.append("fetching") }
            case .gone: seen.withLock { $0.append("gone") }
            }
        }
        defer { api.events.unsubscribe(job.id, key) }
        // The second job (priority 1), canceled below, runs long: on a busy machine the waits before the cancel
        // took longer than a short run, which then ended before it.
        // Its heartbeat, which would find the cancel without the notification, every 15 s.
        let worker = try node(fixture, workers: 1, runner: PacedRunner(seconds: 2, prioritySeconds: 30)) {
            $0.heartbeatInterval = 15
            $0.leaseSeconds = 60
        }
        defer { worker.stop(grace: 5) }
        let ended = try api.waitUntilFinished(id: job.id, timeout: 20)
        #expect(ended?.state == .succeeded)
        // The wait's own subscriber may be told before this one.
        #expect(eventually(5) { seen.withLock { $0.last } == "succeeded" })
        let events = seen.withLock { $0 }
        // A notice of the job's creation may come in after the subscription: then "queued" comes first.
        #expect(events.drop { $0 == "queued" }.first == "running" && events.last == "succeeded", "\(events)")
        #expect(events.filter { $0 == "progress" }.count >= 3, "progress saved by the worker reaches this node: \(events)")

        // Canceled: the request crosses to the worker, which stops the job and records it.
        let second = try api.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 1)
        #expect(eventually(10) { (try? api.store.job(id: second.id))?.state == .running })
        let running = try #require(try api.store.job(id: second.id))
        #expect(eventually(5) { FileManager.default.fileExists(atPath: fixture.directory.outputDirectory(for: running)) })
        let asked = Date().timeIntervalSince1970
        try api.cancel(id: second.id)
        let canceled = try #require(try api.waitUntilFinished(id: second.id, timeout: 10))
        #expect(canceled.state == .canceled)
        // The worker recorded the cancellation (database clock, same machine) within a second of the request (3 s
        // for a busy machine; its heartbeat, 15 s, would most often find it later).
        let reached = (canceled.finishedAt ?? .infinity) - asked
        #expect(reached < 3, "cancel reached the other node and stopped the job in \(reached) s")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory.outputDirectory(for: running)), "its output went with it")
    }

    /// A cancel asked for on one node while the job's holder records a retry (its child crashed) and has not heard
    /// the request yet: the retry cancels the job, so a node that missed the notice cannot run it again.
    @Test func aCancelAskedForWhileTheHolderRequeuesTheJobIsNotLost() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let api = try node(fixture, workers: 0)
        defer { api.stop(grace: 5) }
        let job = try api.store.createJob(input: upload.id, settings: TranscodeSettings())
        // The holder: plain store calls, listening to nothing (the request's NOTIFY never reaches it in time).
        let holder = try #require(try fixture.store.claimNext(worker: "holder", leaseSeconds: 20)?.currentLease)
        #expect(try api.cancel(id: job.id).state == .running, "asked while running elsewhere")
        let retried = try fixture.store.retry(holder)
        #expect(retried.state == .canceled && retried.attempts == 1 && retried.errorCode == "canceled", "\(retried.state)")
        // The same for a requeue at shutdown and for a lease that ran out.
        var jobs = [job.id]
        for requeue in [{ (lease: Lease) throws -> Void in _ = try fixture.store.requeue(lease) },
                        { (_: Lease) throws -> Void in
                            Thread.sleep(forTimeInterval: 3.2)
                            _ = try fixture.store.recoverExpiredLeases(maxAttempts: 3)
                        }] {
            let next = try api.store.createJob(input: upload.id, settings: TranscodeSettings())
            let lease = try #require(try fixture.store.claimNext(worker: "holder", leaseSeconds: 3)?.currentLease)
            #expect(lease.jobID == next.id)
            #expect(try api.cancel(id: next.id).state == .running)
            try requeue(lease)
            jobs.append(next.id)
        }
        // A node that missed the notices finds nothing to run.
        let other = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.3)) { $0.pollInterval = 0.2 }
        defer { other.stop(grace: 5) }
        Thread.sleep(forTimeInterval: 1)
        for id in jobs {
            let final = try #require(try api.store.job(id: id))
            #expect(final.state == .canceled && final.attempts == 1 && final.errorCode == "canceled", "\(final.state)")
        }
    }

    /// What nodes that died left in the shared uploads folder goes once an hour old: partial uploads and fetches,
    /// and inputs an attempt fetched under its own name but never recorded. Never a file being written, nor an input
    /// an upload points at.
    @Test func staleUploadFilesOfNodesThatDiedAreSwept() throws {
        let fixture = try StoreFixture(.postgres)
        let source = try Media.path(.audioOnly)
        func file(_ name: String, hoursAgo: Double) throws -> String {
            let path = fixture.directory.uploads.appendingPathComponent(name).path
            try FileManager.default.copyItem(atPath: source, toPath: path)
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-hoursAgo * 3600)], ofItemAtPath: path)
            return path
        }
        func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }
        let deadUpload = try file(".upload-0123-4567.partial", hoursAgo: 2)
        let deadFetch = try file(".upload-fetch-\(UUID().uuidString.lowercased())-2.partial", hoursAgo: 2)
        let recordedID = UUID().uuidString.lowercased()
        // Fetched by an earlier attempt of the same upload, whose row points at a later attempt's file.
        let unrecorded = try file(recordedID + ".2", hoursAgo: 2)
        let liveUpload = try file(".upload-89ab-cdef.partial", hoursAgo: 0.5)
        let recorded = try file(recordedID + ".3", hoursAgo: 2)
        try fixture.store.insert(Upload(id: recordedID, filename: "a.wav", contentType: nil, size: 1, sha256: "0", path: recorded,
                                        tracks: [], createdAt: Date().timeIntervalSince1970))
        let plain = try fixture.upload(source).path
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7200)], ofItemAtPath: plain)
        // A first attempt's fetch under the upload's own name whose recording failed (the row then points at a
        // later attempt's file), or a node that died between an upload's file and its row: kept for good before.
        let orphan = try file(UUID().uuidString.lowercased(), hoursAgo: 2)
        // A resumable upload idle for two hours is still being uploaded (a day to finish).
        let resumable = UUID().uuidString.lowercased()
        let resumableFile = try file(resumable, hoursAgo: 2)
        let tus = TusUploads(directory: fixture.directory, expiryHours: 24)
        try FileManager.default.createDirectory(atPath: URL(fileURLWithPath: tus.infoPath(resumable)).deletingLastPathComponent().path,
                                                withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: tus.infoPath(resumable)))
        let sweeper = try node(fixture, workers: 0) { $0.straySweepInterval = 0.2 }
        let swept = eventually(10) { !exists(deadUpload) && !exists(deadFetch) && !exists(unrecorded) && !exists(orphan) }
        sweeper.stop(grace: 5) // the sweep under way ends first: what it would remove wrongly is gone by the next look
        #expect(swept, "\(Media.files(in: fixture.directory.uploads))")
        #expect(exists(liveUpload) && exists(recorded) && exists(plain) && exists(resumableFile), "\(Media.files(in: fixture.directory.uploads))")
    }

    @Test func aJobWhoseNodeStoppedRenewingIsTakenOverAndTheOldHolderIsFencedOff() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        // A node that claimed the job and then went silent (killed, paused, cut off).
        let ghost = try #require(try fixture.store.claimNext(worker: "ghost", leaseSeconds: 5)?.currentLease)
        let partial = fixture.directory.outputs.path + "/\(job.id).0badc0de.partial"
        try FileManager.default.createDirectory(atPath: partial, withIntermediateDirectories: true)
        let started = Date()
        let rescuer = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.2)) { $0.pollInterval = 0.2 }
        defer { rescuer.stop(grace: 5) }
        // Not at once: the job is the ghost's until its lease runs out (no recovery of everything at start; the 5 s
        // lease leaves a busy machine's node start its time).
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try fixture.store.job(id: job.id)?.lease == "ghost")
        #expect(eventually(15) { (try? fixture.store.job(id: job.id))?.state == .succeeded })
        let done = try #require(try fixture.store.job(id: job.id))
        #expect(done.attempts == 2 && done.leaseToken == ghost.token + 1)
        // Lease 5 s, a poll 0.2 s, the sweeper's tick up to 1 s, the job 0.2 s: generous for a loaded machine.
        #expect(Date().timeIntervalSince(started) < 10, "taken over within the lease and a poll")
        #expect(done.outputPath == fixture.directory.outputs.path + "/\(job.id).2/output.mp4")
        #expect(!FileManager.default.fileExists(atPath: partial), "the old holder's partial folder went at the new claim")
        // The ghost comes back: nothing it writes sticks.
        #expect(try fixture.store.renew(ghost, leaseSeconds: 20) == .lost)
        #expect { try fixture.store.markFailed(ghost, code: "late", message: "late") } throws: {
            ($0 as? StoreError)?.code == "lease_lost"
        }
        #expect(try fixture.store.job(id: job.id) == done)
    }

    /// An attempt stuck where no cancel reaches it (a thread held in a call on a hard mount that went away) stops
    /// having its lease renewed once the watchdog has given up on it for a lease's length: renewed, the job stayed
    /// running on that node for ever, and no other node took it over.
    @Test func aStuckAttemptsLeaseRunsOutAndAnotherNodeTakesTheJob() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        /// Held where no cancel reaches it, saying every 0.1 s that it is 1.234 s in (no advance).
        struct Stuck: JobRunner {
            let release = DispatchSemaphore(value: 0)
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                repeat {
                    progress(TranscodeProgress(presentationTime: 1.234, duration: 10, framesEncoded: 30, elapsed: 1))
                } while release.wait(timeout: .now() + 0.1) == .timedOut
                throw MediaError.canceled
            }
        }
        let stuck = Stuck()
        let first = try node(fixture, workers: 1, runner: stuck) {
            $0.stallTimeout = 1
            $0.leaseSeconds = 2
            $0.heartbeatInterval = 0.5
        }
        defer {
            stuck.release.signal()
            first.stop(grace: 5)
        }
        let job = try first.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .running })
        #expect(eventually(5) { first.liveProgress(of: job.id) != nil }, "the attempt's own progress, while it holds the job")
        // A stream on the stuck attempt's node hears how the job went elsewhere, though the attempt never ends: its
        // entry kept the other node's changes from being relayed here, for good.
        let seen = LockedValue<[String]>([])
        let key = first.events.subscribe(job.id) { event in
            switch event {
            case .state(let job): seen.withLock { $0.append(job.state.rawValue) }
            case .progress(let progress) where progress.presentationTime == 1.234: seen.withLock { $0.append("stuck progress") }
            default: break
            }
        }
        defer { first.events.unsubscribe(job.id, key) }
        let second = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.2)) { $0.pollInterval = 0.2 }
        defer { second.stop(grace: 5) }
        // Stall 1 s, then a stall timeout and a lease (3 s) before renewals stop, a lease (2 s) to run out, then
        // the other node's lease sweep (a poll) and the job.
        #expect(try eventually(20) { try fixture.store.job(id: job.id)?.state == .succeeded }, "another node ran it")
        #expect(try fixture.store.job(id: job.id)?.leaseToken == 2)
        #expect(eventually(10) { seen.withLock { $0.contains("succeeded") } }, "\(seen.withLock { $0 })")
        #expect(first.liveProgress(of: job.id) == nil, "no progress of the stuck attempt stands for the job")
        // The stuck attempt, still reporting, is not heard once its lease was given up, let alone after the end.
        usleep(500_000)
        #expect(seen.withLock { $0.last } == "succeeded", "\(seen.withLock { $0.suffix(5) })")
    }

    /// A node that stopped in the middle of its lease sweep (paused, cut off: its session and the sweep's lock live
    /// on) does not keep the others from taking over dead nodes' jobs: every node sweeps leases.
    @Test func aNodeStoppedInItsLeaseSweepDoesNotHoldUpTakeovers() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        _ = try #require(try fixture.store.claimNext(worker: "ghost", leaseSeconds: 1)?.currentLease)
        let frozen = try fixture.reopen()
        let holding = DispatchSemaphore(value: 0), thaw = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        let held = LockedValue(false)
        NamedThread.start("frozen-node") {
            _ = try? frozen.exclusively("leases") { () throws(StoreError) in
                held.withLock { $0 = true }
                holding.signal()
                thaw.wait()
            }
            holding.signal() // also when the lock was not taken: the test fails below instead of waiting for ever
            done.signal()
        }
        defer {
            thaw.signal()
            done.wait()
            frozen.close()
        }
        try #require(holding.wait(timeout: .now() + 10) == .success && held.withLock { $0 }, "the other node holds the sweep's lock")
        let rescuer = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.2)) { $0.pollInterval = 0.2 }
        defer { rescuer.stop(grace: 5) }
        #expect(eventually(10) { (try? fixture.store.job(id: job.id))?.state == .succeeded }, "taken over with the sweep's lock held elsewhere")
        #expect(try fixture.store.job(id: job.id)?.attempts == 2)
    }

    /// Connections the server ended while they sat idle in the pool (an administrator, a restart, a failover) are
    /// found closed before a statement goes on them: the next calls all succeed on new connections, where each of
    /// the pool's connections failed one call first (an API answer of 500 each).
    @Test func connectionsTheServerEndedWhileIdleAreReplacedBeforeTheyFailACall() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let connections = 4
        let store = try PostgresJobStore(uri: try #require(fixture.uri), root: fixture.directory.root.path, connections: connections)
        defer { store.close() }
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings())
        for _ in 0..<(2 * connections) { _ = try store.job(id: job.id) } // every connection of the pool is made
        let database = try #require(fixture.uri?.split(separator: "?").first?.split(separator: "/").last)
        let psql = { (sql: String) throws -> String in
            try Shell.check("psql", ["-X", "-q", "-t", "-A", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", "postgres", "-c", sql])
        }
        let sessions = "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(database)'"
        #expect(try psql(sessions).trimmingCharacters(in: .whitespacesAndNewlines) != "0")
        _ = try psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(database)'")
        #expect(try eventually(10) { try psql(sessions).trimmingCharacters(in: .whitespacesAndNewlines) == "0" }, "the sessions ended")
        var failures: [String] = []
        for call in 0..<(2 * connections) {
            do {
                if try store.job(id: job.id)?.id != job.id { failures.append("call \(call): no job") }
            } catch {
                failures.append("call \(call): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures)")
    }

    /// A job deleted while its webhook was being sent leaves no delivery behind: the delete kept the delivery (pending
    /// as it began), and the sender, finishing before the delete committed, still saw the job and kept it too, for
    /// good (no job row left for retention to find, counted in /metrics for ever). The delete is held here by a
    /// trigger on a lock the test holds, so the sender finishes in between.
    @Test func aJobDeletedWhileItsWebhookIsSentLeavesNoDelivery() throws {
        let fixture = try StoreFixture(.postgres)
        let store = fixture.store
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0,
                                      webhooks: JobWebhooks(serverURL: "http://hooks.example/all"))
        _ = try #require(try store.claimNext(worker: "w", leaseSeconds: 20))
        let sending = try #require(try store.claimDeliveries(limit: 1, claimSeconds: 60).first)
        let uri = try #require(fixture.uri)
        let holder = try PostgresConnection(uri: uri)
        try holder.execute("""
            CREATE FUNCTION held_delete() RETURNS trigger AS $$
            BEGIN PERFORM pg_advisory_lock(7331); PERFORM pg_advisory_unlock(7331); RETURN OLD; END $$ LANGUAGE plpgsql;
            CREATE TRIGGER held_delete BEFORE DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION held_delete();
            SELECT pg_advisory_lock(7331);
            """)
        let deleted = DispatchSemaphore(value: 0)
        Thread {
            try? store.deleteJob(id: job.id)
            deleted.signal()
        }.start()
        #expect(eventually(10) {
            (try? holder.query("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").first?["n"]) == .integer(1)
        }, "the delete waits inside its statement")
        try store.finishDelivery(sending, .delivered(status: 200), payload: Data("{}".utf8))
        _ = try holder.query("SELECT pg_advisory_unlock(7331)")
        #expect(deleted.wait(timeout: .now() + 10) == .success)
        #expect(try store.job(id: job.id) == nil)
        let left = try store.deliveries(jobID: job.id)
        #expect(left.isEmpty, "\(left.map(\.state))")
    }

    /// Webhook retries go by the store's clock: with the database's 10 minutes ahead of this node's, a retry in 5 s
    /// is not due at once, and an idle sender is told to wait about 5 s. It was written as this node's time + 5 s,
    /// ten minutes in the database's past: every early retry of the schedule went at once (and a node ahead of the
    /// database had its senders spin on a delivery they took for due).
    @Test func webhookRetriesGoByTheStoresClock() throws {
        let server = try PostgresServer(clockOffset: 600)
        defer { withExtendedLifetime(server) {} }
        let fixture = try StoreFixture(.postgres, on: server)
        let store = fixture.store
        let upload = try fixture.upload(try Media.path(.audioOnly))
        _ = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0,
                                webhooks: JobWebhooks(serverURL: "http://hooks.example/all"))
        _ = try #require(try store.claimNext(worker: "w", leaseSeconds: 20))
        let sending = try #require(try store.claimDeliveries(limit: 1, claimSeconds: 60).first)
        try store.finishDelivery(sending, .retry(after: 5, status: 503, error: "The URL answered 503."), payload: Data("{}".utf8))
        #expect(try store.claimDeliveries(limit: 1, claimSeconds: 60).isEmpty, "not due for 5 s")
        let due = try #require(try store.secondsUntilNextDelivery())
        #expect(due > 3 && due <= 5, "due in \(due) s")
        #expect(try eventually(10) { try store.claimDeliveries(limit: 1, claimSeconds: 60).first?.id == sending.id }, "and then due")
    }

    /// A node whose attempt was overtaken (held up past its lease while another node ran the job to its end) tells
    /// its own subscribers how the job ended once that attempt gives up. While its entry stood, the other node's
    /// changes were not relayed here (a job running here is this node's to publish), and nothing came after.
    @Test func anOvertakenAttemptsNodeTellsItsSubscribersHowTheJobEnded() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let held = HeldRunner()
        let first = try node(fixture, workers: 1, runner: held) { $0.heartbeatInterval = 60 }
        defer {
            held.release.signal()
            first.stop(grace: 5)
        }
        let job = try first.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .running })
        let seen = LockedValue<[String]>([])
        let key = first.events.subscribe(job.id) { event in
            if case .state(let job) = event { seen.withLock { $0.append(job.state.rawValue) } }
        }
        defer { first.events.unsubscribe(job.id, key) }
        let database = try #require(fixture.uri?.split(separator: "?").first?.split(separator: "/").last)
        try Shell.check("psql", ["-X", "-q", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", String(database), "-c",
                                 "UPDATE jobs SET lease_expires_at = extract(epoch from clock_timestamp()) - 1 WHERE id = '\(job.id)'"])
        let second = try node(fixture, workers: 1, runner: PacedRunner(seconds: 0.2)) { $0.pollInterval = 0.2 }
        defer { second.stop(grace: 5) }
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .succeeded }, "the other node ran it")
        held.release.signal()
        #expect(eventually(5) { seen.withLock { $0.last } == "succeeded" }, "\(seen.withLock { $0 })")
    }

    /// A job whose lease ran out while its worker here still ran it (a renewal held up behind a slow query) and that
    /// another worker here then claimed: the first attempt stops, and nothing it does touches the second one. It
    /// could not be stopped (its stop looked for its own entry, replaced), and its end marked the second attempt's
    /// entry as ending: a cancel of the job then waited a minute at a time for an end that never came.
    @Test func anAttemptOvertakenOnItsOwnNodeStopsAndLeavesTheNextOneAlone() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        /// The first attempt runs until it is canceled (at most 15 s), noting when it returned; the next ones 20 s.
        struct ByAttempt: JobRunner {
            let firstReturned = LockedValue<Date?>(nil)
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                defer { if job.attempts == 1 { firstReturned.withLock { $0 = Date() } } }
                return try PacedRunner(seconds: job.attempts == 1 ? 15 : 20).run(job, input: input, outputDirectory: outputDirectory,
                                                                                  cancellation: cancellation, progress: progress)
            }
        }
        let runner = ByAttempt()
        // No renewal in the test's time: the lease runs out when the database says so.
        let queue = try node(fixture, workers: 2, runner: runner) {
            $0.pollInterval = 0.2
            $0.heartbeatInterval = 60
        }
        defer { queue.stop(grace: 5) }
        let job = try queue.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .running })
        let database = try #require(fixture.uri?.split(separator: "?").first?.split(separator: "/").last)
        try Shell.check("psql", ["-X", "-q", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", String(database), "-c",
                                 "UPDATE jobs SET lease_expires_at = extract(epoch from clock_timestamp()) - 1 WHERE id = '\(job.id)'"])
        try #require(try eventually(10) { try fixture.store.job(id: job.id)?.leaseToken == 2 }, "the other worker here took it")
        #expect(eventually(5) { runner.firstReturned.withLock { $0 } != nil }, "the overtaken attempt stopped")
        let canceled = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? queue.cancel(id: job.id)
            canceled.signal()
        }
        #expect(canceled.wait(timeout: .now() + 8) == .success, "the cancel came back")
        #expect(try eventually(5) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        let final = try #require(try fixture.store.job(id: job.id))
        #expect(final.state == .canceled && final.attempts == 2, "\(final.state) after \(final.attempts) attempts")
    }

    /// A cancel of a job running on this node is stored as well as signaled: if the attempt's end cannot be written
    /// (the database away until the lease runs out), the node that recovers the job cancels it. It was kept in
    /// memory only, and the recovered job ran again.
    @Test func aCancelOfAJobRunningHereIsStored() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        /// Takes 5 s to notice a cancel, as a transcode busy in a long step does.
        struct SlowToStop: JobRunner {
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                Thread.sleep(forTimeInterval: 5)
                throw cancellation.isCanceled ? MediaError.canceled : MediaError(code: "unexpected", message: "not canceled")
            }
        }
        let queue = try node(fixture, workers: 1, runner: SlowToStop()) { $0.pollInterval = 0.2 }
        defer { queue.stop(grace: 5) }
        let job = try queue.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .running })
        let lease = try #require(try fixture.store.job(id: job.id)?.currentLease)
        #expect(try queue.cancel(id: job.id).state == .running, "signaled; the attempt records it")
        #expect(try fixture.store.renew(lease, leaseSeconds: 20) == .held(cancelRequested: true))
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .canceled })
    }

    /// A claim clears what earlier claims of the job left, never what a later one made: a worker paused before its
    /// clean-up must not remove the result of the worker that took the job over meanwhile.
    @Test func onlyEarlierAttemptsFoldersCountAsLeftovers() throws {
        let fixture = try StoreFixture(.postgres)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        var job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let other = UUID().uuidString.lowercased()
        let names = [job.id, "\(job.id).5c1d.partial", "\(job.id).2", "\(job.id).2.9e.partial", "\(job.id).3",
                     "\(job.id).3.a0b1c2d3.partial", "\(job.id).4", other, "\(other).2"]
        for name in names {
            try FileManager.default.createDirectory(atPath: fixture.directory.outputs.path + "/" + name, withIntermediateDirectories: true)
        }
        job.leaseToken = 3
        let removed = Set(fixture.directory.leftovers(of: job).map { URL(fileURLWithPath: $0).lastPathComponent })
        #expect(removed == [job.id, "\(job.id).5c1d.partial", "\(job.id).2", "\(job.id).2.9e.partial"])
        #expect(fixture.directory.outputDirectory(for: job) == fixture.directory.outputs.path + "/\(job.id).3")
        #expect(Set(fixture.directory.partialOutputs(for: job).map { URL(fileURLWithPath: $0).lastPathComponent })
                == ["\(job.id).3.a0b1c2d3.partial"])
        job.leaseToken = 1
        #expect(fixture.directory.outputDirectory(for: job) == fixture.directory.outputs.path + "/\(job.id)")
        #expect(fixture.directory.partialOutputs(for: job).map { URL(fileURLWithPath: $0).lastPathComponent } == ["\(job.id).5c1d.partial"])
    }

    @Test func oneNodeAtATimeDoesASweep() throws {
        let fixture = try StoreFixture(.postgres)
        let other = try fixture.reopen()
        var inner: Bool?
        let ran = try fixture.store.exclusively("retention") { () throws(StoreError) in
            inner = try other.exclusively("retention") { () throws(StoreError) in }
        }
        #expect(ran && inner == false, "the second node skips the sweep the first is doing")
        #expect(try other.exclusively("retention") { () throws(StoreError) in }, "and does it once the first is done")
    }
}
