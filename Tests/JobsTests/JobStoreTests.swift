import Foundation
import Pipeline
import Locks
import Testing
import TestSupport
@testable import Jobs

/// The job store's contract, run against both backends (SQLite, and PostgreSQL on a real server): the same tests,
/// so neither drifts.
@Suite struct JobStoreConformanceTests {
    static let backends = StoreBackend.allCases

    /// Priorities that only grow, so the job made last is the one claimed next.
    private let priorities = LockedValue(0)

    /// Brings a new job to `state` through the store's own calls.
    private func job(in state: JobState, _ fixture: StoreFixture, upload: Upload) throws -> Job {
        let priority = priorities.withLock { value in
            value += 1
            return value
        }
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: priority)
        if state == .queued { return job }
        if state == .canceled { return try fixture.store.cancelQueued(id: job.id) }
        let running = try #require(try fixture.store.claimNext(worker: "test", leaseSeconds: 20))
        #expect(running.id == job.id)
        let lease = try #require(running.currentLease)
        switch state {
        case .succeeded:
            return try fixture.store.markSucceeded(lease, outputPath: fixture.directory.outputs.path + "/x/output.mp4", size: 1,
                                                   tracks: [], files: nil, duration: 1, framesEncoded: 1, seconds: 1)
        case .failed: return try fixture.store.markFailed(lease, code: "test", message: "test")
        default: return running
        }
    }

    /// Sets a column through the backend's own SQL, as an operator (or a bug) might.
    private func rawUpdate(_ fixture: StoreFixture, _ sql: String, _ id: String) throws {
        if let uri = fixture.uri {
            try PostgresConnection(uri: uri).query(sql.replacingOccurrences(of: "?", with: "$1"), [.text(id)])
        } else {
            try Database(path: fixture.directory.databasePath).query(sql, [.text(id)])
        }
    }

    @Test(arguments: backends) func theDatabaseItselfRefusesEveryMoveOutsideTheStateMachine(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        var allowed: [String] = []
        for from in JobState.allCases {
            for to in JobState.allCases {
                let subject = try job(in: from, fixture, upload: upload)
                #expect(subject.state == from)
                do {
                    try rawUpdate(fixture, "UPDATE jobs SET state = '\(to.rawValue)' WHERE id = ?", subject.id)
                    allowed.append("\(from.rawValue)→\(to.rawValue)")
                    #expect(try fixture.store.job(id: subject.id)?.state == to)
                } catch let error as StoreError {
                    #expect(error.isConstraint && error.message.contains("invalid job state transition"), "\(from)→\(to): \(error)")
                    #expect(try fixture.store.job(id: subject.id)?.state == from, "a refused move changes nothing")
                }
                #expect(allowed.contains("\(from.rawValue)→\(to.rawValue)") == from.canMove(to: to))
            }
        }
        #expect(allowed.sorted() == ["queued→canceled", "queued→running", "running→canceled", "running→failed",
                                     "running→queued", "running→succeeded"])
    }

    @Test(arguments: backends) func claimsFollowPriorityThenAgeAndCarryALease(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let low = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0)
        let high = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 5)
        let lowLater = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0)
        let before = Date().timeIntervalSince1970
        let claims = try (0..<4).map { _ in try fixture.store.claimNext(worker: "test", leaseSeconds: 20) }
        #expect(claims.map { $0?.id } == [high.id, low.id, lowLater.id, nil])
        let claimed = try #require(try fixture.store.job(id: high.id))
        #expect(claimed.state == .running && claimed.lease == "test" && claimed.startedAt != nil && claimed.leaseToken == 1)
        let expires = try #require(claimed.leaseExpiresAt)
        #expect(expires > before + 19 && expires < Date().timeIntervalSince1970 + 21, "lease 20 s from the claim: \(expires - before)")
    }

    @Test(arguments: backends) func eightConnectionsClaimEachOfAThousandJobsExactlyOnce(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        for _ in 0..<1000 { _ = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings()) }
        let claims = LockedValue<[String]>([])
        let failures = LockedValue<[String]>([])
        let group = DispatchGroup()
        for worker in 0..<8 {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    let store = try fixture.reopen()
                    while let job = try store.claimNext(worker: "worker-\(worker)", leaseSeconds: 20) {
                        claims.withLock { $0.append(job.id) }
                    }
                    store.close()
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }.start()
        }
        group.wait()
        #expect(failures.withLock { $0 }.isEmpty)
        let claimed = claims.withLock { $0 }
        #expect(claimed.count == 1000)
        #expect(Set(claimed).count == 1000)
        #expect(try fixture.store.counts()[.running] == 1000)
    }

    /// The fencing token: a worker whose job was taken over can renew nothing, save nothing and end nothing; the
    /// new holder's writes go through.
    @Test(arguments: backends) func writesOfAWorkerWhoseJobWasTakenOverAreRefused(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let first = try #require(try fixture.store.claimNext(worker: "a", leaseSeconds: 0.2)?.currentLease)
        #expect(try fixture.store.renew(first, leaseSeconds: 0.2) == .held(cancelRequested: false))
        Thread.sleep(forTimeInterval: 0.4)
        let recovered = try fixture.store.recoverExpiredLeases(maxAttempts: 3)
        #expect(recovered.requeued == [job.id] && recovered.failed.isEmpty)
        let second = try #require(try fixture.store.claimNext(worker: "b", leaseSeconds: 20)?.currentLease)
        #expect(second.token == first.token + 1 && second.worker == "b")
        #expect(try fixture.store.job(id: job.id)?.attempts == 2)

        #expect(try fixture.store.renew(first, leaseSeconds: 20) == .lost)
        let store = fixture.store
        func refused(_ what: String, _ write: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) {
            do {
                try write()
                Issue.record("\(what) by the old holder went through", sourceLocation: sourceLocation)
            } catch {
                #expect((error as? StoreError)?.code == "lease_lost", "\(what): \(error)", sourceLocation: sourceLocation)
            }
        }
        refused("progress") { try store.saveProgress(first, time: 9, duration: 9) }
        refused("success") {
            _ = try store.markSucceeded(first, outputPath: "/x", size: 1, tracks: [], files: nil, duration: 1, framesEncoded: 1, seconds: 1)
        }
        refused("failure") { _ = try store.markFailed(first, code: "x", message: "x") }
        refused("cancellation") { _ = try store.markCanceled(first) }
        refused("requeue") { _ = try store.requeue(first) }
        refused("retry") { _ = try store.retry(first) }
        let untouched = try #require(try fixture.store.job(id: job.id))
        #expect(untouched.state == .running && untouched.lease == "b" && untouched.progressTime == 0)

        try fixture.store.saveProgress(second, time: 1, duration: 2)
        let done = try fixture.store.markSucceeded(second, outputPath: fixture.directory.outputs.path + "/\(job.id).2/output.mp4",
                                                   size: 5, tracks: [], files: nil, duration: 2, framesEncoded: 3, seconds: 1)
        #expect(done.state == .succeeded && done.outputPath == fixture.directory.outputs.path + "/\(job.id).2/output.mp4")
        #expect { try fixture.store.markFailed(first, code: "x", message: "x") } throws: { ($0 as? StoreError)?.code == "lease_lost" }
        #expect(try fixture.store.job(id: job.id)?.state == .succeeded)
        // The new holder's end written again (its answer was lost with the connection): the row as it is, no error.
        let again = try fixture.store.markSucceeded(second, outputPath: "/elsewhere", size: 9, tracks: [], files: nil, duration: 9,
                                                    framesEncoded: 9, seconds: 9)
        #expect(again == done)
        #expect { try fixture.store.markFailed(second, code: "x", message: "x") } throws: { ($0 as? StoreError)?.code == "lease_lost" }
    }

    @Test(arguments: backends) func recoveryRequeuesOrphansAndFailsThemAfterThreeAttempts(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(job.attempts == 1)
        for attempt in 2...3 {
            _ = try fixture.store.claimNext(worker: "dead", leaseSeconds: 20)
            #expect(try fixture.store.recoverExpiredLeases(maxAttempts: 3) == ([], []), "a live lease is not recovered")
            let recovered = try fixture.store.recoverOrphans(maxAttempts: 3)
            #expect(recovered.requeued == [job.id])
            let requeued = try #require(try fixture.store.job(id: job.id))
            #expect(requeued.state == .queued && requeued.attempts == attempt && requeued.lease == nil)
        }
        _ = try fixture.store.claimNext(worker: "dead", leaseSeconds: 0)
        Thread.sleep(forTimeInterval: 0.05)
        let last = try fixture.store.recoverExpiredLeases(maxAttempts: 3)
        #expect(last.failed == [job.id] && last.requeued.isEmpty)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "worker_crashed" && failed.finishedAt != nil)
    }

    /// A job whose cancel was asked for, whose process then died: it ends canceled (the API answered 202), whether
    /// attempts are left (it does not run again) or not (it is not failed as crashed).
    @Test(arguments: backends) func aJobAskedToCancelWhoseProcessDiedEndsCanceled(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let early = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        _ = try fixture.store.claimNext(worker: "dead", leaseSeconds: 20)
        #expect(try fixture.store.requestCancel(id: early.id))
        #expect(try fixture.store.recoverOrphans(maxAttempts: 3) == ([early.id], []))
        let first = try #require(try fixture.store.job(id: early.id))
        #expect(first.state == .canceled && first.errorCode == "canceled" && first.attempts == 1 && first.finishedAt != nil, "\(first)")

        let last = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        for _ in 2...3 {
            _ = try fixture.store.claimNext(worker: "dead", leaseSeconds: 20)
            #expect(try fixture.store.recoverOrphans(maxAttempts: 3).requeued == [last.id])
        }
        _ = try fixture.store.claimNext(worker: "dead", leaseSeconds: 0)
        #expect(try fixture.store.requestCancel(id: last.id))
        Thread.sleep(forTimeInterval: 0.05)
        #expect(try fixture.store.recoverExpiredLeases(maxAttempts: 3) == ([last.id], []))
        let ended = try #require(try fixture.store.job(id: last.id))
        #expect(ended.state == .canceled && ended.errorCode == "canceled" && ended.attempts == 3, "\(ended)")
    }

    @Test(arguments: backends) func aCancelRequestReachesTheLeaseHolder(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let queued = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(try fixture.store.requestCancel(id: queued.id) == false, "only a running job has a worker to ask")
        let lease = try #require(try fixture.store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        #expect(try fixture.store.requestCancel(id: queued.id))
        #expect(try fixture.store.renew(lease, leaseSeconds: 20) == .held(cancelRequested: true))
        let canceled = try fixture.store.markCanceled(lease)
        #expect(canceled.state == .canceled && canceled.errorCode == "canceled")
        #expect { try fixture.store.cancelQueued(id: queued.id) } throws: { ($0 as? StoreError)?.code == "invalid_transition" }
    }

    /// The stray sweep's batch: the file each known upload's row points at, over more ids than one query asks.
    @Test(arguments: backends) func uploadFileNamesAreReadInBatches(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let first = try fixture.upload(try Media.path(.audioOnly))
        let second = try fixture.upload(try Media.path(.audioOnly))
        let unknown = (0..<(JobRows.idsPerQuery + 10)).map { _ in UUID().uuidString.lowercased() }
        let names = try fixture.store.uploadFileNames(ids: [first.id] + unknown + [second.id])
        #expect(names == [first.id: URL(fileURLWithPath: first.path).lastPathComponent,
                          second.id: URL(fileURLWithPath: second.path).lastPathComponent], "\(names)")
        #expect(try fixture.store.uploadFileNames(ids: []).isEmpty)
    }

    /// An id with a NUL after a real one names nothing on either store: PostgreSQL's parameters are C strings, and
    /// cut at the NUL it found the upload or job named by what came before. Other values with one are refused.
    @Test(arguments: backends) func anIdWithANulFindsNothing(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(try fixture.store.upload(id: upload.id + "\u{0}x") == nil)
        #expect(try fixture.store.job(id: job.id + "\u{0}x") == nil)
        #expect(try fixture.store.job(id: job.id) != nil)
        #expect { try fixture.store.cancelQueued(id: job.id + "\u{0}x") } throws: { ($0 as? StoreError)?.code == "invalid_text" }
        #expect(try fixture.store.job(id: job.id)?.state == .queued)
    }

    @Test(arguments: backends) func pagesAreNewestFirstAndFilteredByState(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        var ids: [String] = []
        for _ in 0..<7 { ids.append(try fixture.store.createJob(input: upload.id, settings: TranscodeSettings()).id) }
        _ = try fixture.store.cancelQueued(id: ids[0])
        var seen: [String] = []
        var cursor: String?
        repeat {
            let page = try fixture.store.jobs(limit: 3, cursor: cursor)
            #expect(page.jobs.count <= 3)
            seen += page.jobs.map(\.id)
            cursor = page.next
        } while cursor != nil
        #expect(seen == ids.reversed())
        #expect(try fixture.store.jobs(state: .canceled).jobs.map(\.id) == [ids[0]])
        #expect(try fixture.store.counts() == [.queued: 6, .canceled: 1])
        #expect(throws: StoreError.self) { try fixture.store.jobs(cursor: "not-a-cursor") }
    }

    @Test(arguments: backends) func rowsComeBackAsWrittenWithPathsStoredRelative(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let settings = try TranscodeSettings(json: .string("720p"))
        let job = try fixture.store.createJob(input: upload.id, settings: settings, priority: 3)
        let reopened = try fixture.reopen()
        #expect(try reopened.job(id: job.id) == job)
        #expect(try reopened.upload(id: upload.id) == upload)
        #expect(try reopened.lastUpdate(of: job.id) == job.updatedAt)
        let lease = try #require(try reopened.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        let output = fixture.directory.outputDirectory(for: try #require(try reopened.job(id: job.id))) + "/output.mp4"
        let files = [OutputFile(path: "output.mp4", size: 7, mimeType: "video/mp4")]
        let done = try reopened.markSucceeded(lease, outputPath: output, size: 7, tracks: upload.tracks, files: files,
                                              duration: 1.5, framesEncoded: 45, seconds: 0.25)
        #expect(try fixture.store.job(id: job.id) == done)
        #expect(done.outputPath == output && done.outputFiles == files && done.outputTracks == upload.tracks)
        #expect(done.framesEncoded == 45 && done.transcodeSeconds == 0.25 && done.progressTime == 1.5)
        // In the database: paths relative to the data directory, so nodes may mount it elsewhere.
        let prefix = fixture.directory.root.path + "/"
        let stored: [String]
        if let uri = fixture.uri {
            let connection = try PostgresConnection(uri: uri)
            stored = try connection.query("SELECT path FROM uploads").compactMap { $0["path"].string }
                + connection.query("SELECT output_path FROM jobs").compactMap { $0["output_path"].string }
        } else {
            let database = try Database(path: fixture.directory.databasePath)
            stored = try database.query("SELECT path FROM uploads").compactMap { $0["path"].string }
                + database.query("SELECT output_path FROM jobs").compactMap { $0["output_path"].string }
        }
        #expect(stored == [String(upload.path.dropFirst(prefix.count)), String(output.dropFirst(prefix.count))], "\(stored)")
        #expect(stored.allSatisfy { !$0.hasPrefix("/") })
    }

    @Test(arguments: backends) func aJobNeedsAnExistingUploadAndKeepsItAlive(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        #expect { try fixture.store.createJob(input: "nope", settings: TranscodeSettings()) } throws: {
            ($0 as? StoreError)?.code == "upload_not_found"
        }
        let upload = try fixture.upload(try Media.path(.audioOnly))
        _ = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect { try fixture.store.deleteUpload(id: upload.id) } throws: { error in
            (error as? StoreError)?.isStillReferenced == true
        }
        #expect(try fixture.store.upload(id: upload.id) == upload)
    }

    /// Retention reads unused uploads a batch at a time, oldest first. A worker whose claim lost its answer finds the
    /// jobs leased to it, oldest claim first, and only while their lease holds (one run out is the lease sweep's).
    @Test(arguments: backends) func unusedUploadsComeInBatchesAndLostClaimsOnlyWhileTheirLeaseHolds(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        var uploads: [Upload] = []
        for _ in 0..<3 {
            uploads.append(try fixture.upload(try Media.path(.audioOnly)))
            usleep(20_000)
        }
        let now = Date().timeIntervalSince1970 + 1
        #expect(try fixture.store.unusedUploads(before: now, limit: 2).map(\.id) == uploads.prefix(2).map(\.id))
        #expect(try fixture.store.unusedUploads(before: now, limit: 10).map(\.id) == uploads.map(\.id))
        for _ in 0..<3 { _ = try fixture.store.createJob(input: uploads[0].id, settings: TranscodeSettings()) }
        let first = try #require(try fixture.store.claimNext(worker: "w", leaseSeconds: 20))
        usleep(20_000)
        let second = try #require(try fixture.store.claimNext(worker: "w", leaseSeconds: 20))
        #expect(try fixture.store.runningJobs(leasedTo: "w").map(\.id) == [first.id, second.id])
        #expect(try fixture.store.runningJobs(leasedTo: "w/other").isEmpty)
        _ = try #require(try fixture.store.claimNext(worker: "x", leaseSeconds: 0.05))
        usleep(200_000)
        #expect(try fixture.store.runningJobs(leasedTo: "x").isEmpty, "its lease ran out")
    }

    /// A watermark image a job names is kept like its input: deleting it is refused, retention passes it by, and a job
    /// cannot name one that does not exist.
    @Test(arguments: backends) func aWatermarkAJobUsesIsKeptLikeItsInput(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let input = try fixture.upload(try Media.path(.audioOnly))
        let mark = try fixture.upload(try Media.path(.audioOnly))
        let settings = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "\#(mark.id)"}}}}"#.utf8))
        let job = try fixture.store.createJob(input: input.id, settings: settings)
        #expect { try fixture.store.deleteUpload(id: mark.id) } throws: { ($0 as? StoreError)?.isStillReferenced == true }
        #expect(try fixture.store.unusedUploads(before: Date().timeIntervalSince1970 + 1, limit: 10).isEmpty)
        let missing = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "gone"}}}}"#.utf8))
        #expect { try fixture.store.createJob(input: input.id, settings: missing) } throws: {
            ($0 as? StoreError)?.code == "watermark_not_found"
        }
        try fixture.store.deleteJob(id: job.id)
        try fixture.store.deleteUpload(id: mark.id)
        #expect(try fixture.store.unusedUploads(before: Date().timeIntervalSince1970 + 1, limit: 10).map(\.id) == [input.id])
    }

    /// A job made under an id another job has is refused as such (a second completion of one tus upload finds
    /// the first's job by it), not named a missing watermark or a store failure.
    @Test(arguments: backends) func aSecondJobUnderOneIdIsRefusedAsAJobThatExists(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let input = try fixture.upload(try Media.path(.audioOnly))
        let mark = try fixture.upload(try Media.path(.audioOnly))
        let marked = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "\#(mark.id)"}}}}"#.utf8))
        for settings in [TranscodeSettings(), marked] {
            let id = UUID().uuidString.lowercased()
            let first = try fixture.store.createJob(id: id, input: input.id, settings: settings, priority: 0, webhooks: JobWebhooks())
            #expect { try fixture.store.createJob(id: id, input: input.id, settings: settings, priority: 0, webhooks: JobWebhooks()) }
                throws: { ($0 as? StoreError)?.code == "job_exists" }
            #expect(try fixture.store.job(id: id)?.createdAt == first.createdAt)
        }
    }

    @Test(arguments: backends) func finishedJobsAreListedOldestFirst(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        // Made in one order, ended in the other: the list follows the ends.
        let madeFirst = try job(in: .running, fixture, upload: upload)
        let madeSecond = try job(in: .canceled, fixture, upload: upload)
        let lease = try #require(madeFirst.currentLease)
        Thread.sleep(forTimeInterval: 0.01)
        let endedLast = try fixture.store.markFailed(lease, code: "test", message: "test")
        _ = try job(in: .queued, fixture, upload: upload)
        _ = try job(in: .running, fixture, upload: upload)
        let later = Date().timeIntervalSince1970 + 1
        #expect(try fixture.store.finishedJobs(before: later).map(\.id) == [madeSecond.id, endedLast.id])
        let first = try #require(try fixture.store.job(id: madeSecond.id))
        #expect(try fixture.store.finishedJobs(before: first.finishedAt ?? 0).isEmpty)
        // Where outputs lie, read without the rest of the rows: a folder with its file list, a lone file of an older
        // version without, none for a job that made none.
        let fresh = try StoreFixture(backend)
        let store = fresh.store
        let input = try fresh.upload(try Media.path(.audioOnly))
        for files in [[OutputFile(path: "output.mp4", size: 1, mimeType: "video/mp4")], nil] {
            let made = try store.createJob(input: input.id, settings: TranscodeSettings())
            let lease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
            #expect(lease.jobID == made.id)
            let done = try store.markSucceeded(lease, outputPath: fresh.directory.outputs.path + "/\(made.id)/output.mp4", size: 1, tracks: [],
                                               files: files, duration: 1, framesEncoded: 1, seconds: 1)
            let output = try #require(try store.output(of: made.id))
            #expect(output == JobOutput(id: made.id, state: .succeeded, outputRoot: done.outputRoot) && done.outputRoot != nil, "\(output)")
            #expect(output.outputRoot?.hasSuffix(files == nil ? "/output.mp4" : "/\(made.id)") == true, "\(output)")
            #expect(try store.finishedJobs(before: Date().timeIntervalSince1970 + 1).contains(output))
        }
        #expect(try fixture.store.output(of: madeSecond.id) == JobOutput(id: madeSecond.id, state: .canceled, outputRoot: nil))
        #expect(try store.output(of: "nope") == nil)
    }

    /// An idle sender sleeps until a claim can find something: a delivery in flight is due when its claim runs out,
    /// and one queued behind another for the same URL is not due before that one; before, both counted as due at
    /// once and idle senders polled every 10 ms.
    @Test(arguments: backends) func theNextDeliveryIsDueOnlyWhenAClaimCouldTakeIt(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let store = fixture.store
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0,
                                      webhooks: JobWebhooks(serverURL: "http://hooks.example/all"))
        let lease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        _ = try store.markSucceeded(lease, outputPath: fixture.directory.outputs.path + "/x/output.mp4", size: 1, tracks: [], files: nil,
                                    duration: 1, framesEncoded: 1, seconds: 1)
        #expect(try store.deliveries(jobID: job.id).map(\.event) == ["job.running", "job.succeeded"])
        let due = try #require(try store.secondsUntilNextDelivery())
        #expect(due > -5 && due <= 1, "the first delivery is due now: \(due)")
        let sending = try #require(try store.claimDeliveries(limit: 4, claimSeconds: 60).first)
        #expect(sending.event == "job.running")
        let inFlight = try #require(try store.secondsUntilNextDelivery())
        #expect(inFlight > 50, "due \(inFlight) s from now while the first is being sent")
        try store.finishDelivery(sending, .retry(after: 300, status: 503, error: "The URL answered 503."), payload: Data("{}".utf8))
        let afterRetry = try #require(try store.secondsUntilNextDelivery())
        #expect(abs(afterRetry - 300) < 1, "due \(afterRetry) s from now: the second waits behind the retry")
    }

    /// A delivery sent again while an earlier attempt's sender had stalled past its claim: that sender's late
    /// outcome matched by the attempt count alone and ended the delivery the user had just been told would go out.
    @Test(arguments: backends) func aStalledSendersLateOutcomeLeavesARedeliveryAlone(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let store = fixture.store
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0,
                                      webhooks: JobWebhooks(serverURL: "http://hooks.example/all"))
        _ = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        let stalled = try #require(try store.claimDeliveries(limit: 1, claimSeconds: 0.2).first)
        Thread.sleep(forTimeInterval: 0.5)
        let again = try store.redeliver(jobID: job.id, deliveryID: stalled.id)
        #expect(again?.state == .pending)
        try store.finishDelivery(stalled, .failed(status: 500, error: "No attempts are left."), payload: Data("{}".utf8))
        #expect(try store.deliveries(jobID: job.id).first { $0.id == stalled.id }?.state == .pending, "the redelivery stands")
        let next = try #require(try store.claimDeliveries(limit: 1, claimSeconds: 60).first)
        #expect(next.id == stalled.id && next.attempts == stalled.attempts + 1)
        try store.finishDelivery(next, .delivered(status: 204), payload: nil)
        let delivered = try store.deliveries(jobID: job.id).first { $0.id == stalled.id }
        #expect(delivered?.state == .delivered && delivered?.payload == nil, "no body made, none kept")
    }

    /// An event its URL refused outright (400) holds back none of the job's later ones; once one of them is
    /// delivered, the refused one ends as stale, also when its retry was in flight meanwhile (refused again then).
    @Test(arguments: backends) func anEventItsURLRefusedHoldsNothingBackAndGoesStale(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let store = fixture.store
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let own = "http://hooks.example/job"
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 100,
                                      webhooks: JobWebhooks(target: WebhookTarget(url: own, events: [.running, .succeeded])))
        let lease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        _ = try store.markSucceeded(lease, outputPath: fixture.directory.outputs.path + "/x/output.mp4", size: 1, tracks: [], files: nil,
                                    duration: 1, framesEncoded: 1, seconds: 1)
        let claimed = try store.claimDeliveries(limit: 10, claimSeconds: 60)
        let running = try #require(claimed.first)
        #expect(claimed.count == 1 && running.event == "job.running")
        try store.finishDelivery(running, .retry(after: -1, status: 400, error: "The URL answered 400."), payload: Data("{}".utf8))
        // Refused: the later event is handed out with the refused one's retry (which is in flight from here on).
        let both = try store.claimDeliveries(limit: 10, claimSeconds: 60)
        #expect(Set(both.map(\.event)) == ["job.running", "job.succeeded"], "\(both.map(\.event))")
        let retry = try #require(both.first { $0.event == "job.running" }), succeeded = try #require(both.first { $0.event == "job.succeeded" })
        try store.finishDelivery(succeeded, .delivered(status: 200), payload: Data("{}".utf8))
        #expect(try store.deliveries(jobID: job.id).first { $0.id == retry.id }?.state == .pending, "in flight: left to its attempt")
        try store.finishDelivery(retry, .retry(after: -1, status: 400, error: "The URL answered 400."), payload: Data("{}".utf8))
        let stale = try store.deliveries(jobID: job.id).first { $0.id == retry.id }
        #expect(stale?.state == .failed && stale?.lastError?.contains("later event") == true, "\(String(describing: stale))")
        #expect(try store.claimDeliveries(limit: 10, claimSeconds: 60).isEmpty)
    }

    /// The outbox: every state change a webhook wants writes its delivery with it; claims hand out, per job and URL,
    /// only the earliest pending one; an attempt whose claim was taken over records nothing.
    @Test(arguments: backends) func stateChangesWriteTheirWebhookDeliveriesAndClaimsKeepTheirOrder(_ backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let store = fixture.store
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let own = "http://hooks.example/job", server = "http://hooks.example/all"
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 100,
                                      webhooks: JobWebhooks(target: WebhookTarget(url: own, events: [.running, .succeeded]), serverURL: server))
        let stored = try store.job(id: job.id)
        #expect(job.webhook?.url == own && stored?.webhook == WebhookTarget(url: own, events: [.running, .succeeded]))
        #expect(try store.deliveries(jobID: job.id).isEmpty, "queued is no event")
        let lease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        #expect(lease.jobID == job.id)
        _ = try store.markSucceeded(lease, outputPath: fixture.directory.outputs.path + "/x/output.mp4", size: 1, tracks: [], files: nil,
                                    duration: 1, framesEncoded: 1, seconds: 1)
        let written = try store.deliveries(jobID: job.id)
        #expect(written.map { "\($0.scope.rawValue) \($0.event)" } == ["job job.running", "server job.running", "job job.succeeded", "server job.succeeded"])
        #expect(Set(written.map(\.id)).count == 4 && written.allSatisfy { $0.id.hasPrefix("msg_") && $0.id.count == 36 && $0.state == .pending })
        // Each carries the job as its state change left it, whenever it is sent.
        #expect(written.map { $0.job?.state } == [.running, .running, .succeeded, .succeeded])
        #expect(written[0].job?.id == job.id && written[0].job?.outputPath == nil && written[2].job?.outputSize == 1
                && written[2].job?.webhook?.url == own, "\(String(describing: written[2].job))")

        // Only the first of each URL's deliveries is due; a claimed one is not handed out twice.
        let first = try store.claimDeliveries(limit: 10, claimSeconds: 60)
        #expect(first.map(\.event) == ["job.running", "job.running"] && first.allSatisfy { $0.attempts == 1 })
        #expect(try store.claimDeliveries(limit: 10, claimSeconds: 60).isEmpty)
        let ownRunning = try #require(first.first { $0.scope == .job }), serverRunning = try #require(first.first { $0.scope == .server })
        try store.finishDelivery(ownRunning, .delivered(status: 204), payload: Data("{\"a\":1}".utf8))
        try store.finishDelivery(serverRunning, .retry(after: -1, status: 500, error: "The URL answered 500."),
                                 payload: Data("{\"b\":1}".utf8))
        let second = try store.claimDeliveries(limit: 10, claimSeconds: 60)
        #expect(Set(second.map { "\($0.scope.rawValue) \($0.event)" }) == ["job job.succeeded", "server job.running"])
        let retried = try #require(second.first { $0.scope == .server })
        #expect(retried.attempts == 2 && retried.payload == Data("{\"b\":1}".utf8) && retried.lastStatus == 500)
        // Once its body is kept, a delivery keeps no copy of the job (each event held all of the job's JSON).
        let kept = try store.deliveries(jobID: job.id).first { $0.id == ownRunning.id }
        #expect(retried.job == nil && kept?.payload != nil && kept?.job == nil)
        #expect(second.first { $0.scope == .job }?.job?.state == .succeeded, "one still to be sent keeps it")
        // The first claim's attempt reports late: its claim was taken over, so nothing changes.
        try store.finishDelivery(serverRunning, .delivered(status: 200), payload: Data())
        #expect(try store.deliveries(jobID: job.id).first { $0.id == serverRunning.id }?.state == .pending)
        // 410 from the job's own URL: that delivery and the job's webhook are off.
        let ownSucceeded = try #require(second.first { $0.scope == .job })
        let before = try #require(try store.lastUpdate(of: job.id))
        Thread.sleep(forTimeInterval: 0.01)
        try store.finishDelivery(ownSucceeded, .disabled(status: 410), payload: Data("{}".utf8))
        #expect(try store.job(id: job.id)?.webhook?.disabled == true)
        #expect(try #require(try store.lastUpdate(of: job.id)) > before, "a change the job's cached JSON is told by")
        #expect(try store.deliveries(jobID: job.id).first { $0.id == ownSucceeded.id }?.state == .disabled)
        try store.finishDelivery(retried, .failed(status: 500, error: "No attempts are left."), payload: Data())
        let counts = try store.deliveryCounts()
        #expect(counts[.delivered] == 1 && counts[.disabled] == 1 && counts[.failed] == 1 && counts[.pending] == 1)

        // Retention waits while a delivery is pending; a redelivery makes one pending again, due now.
        let later = Date().timeIntervalSince1970 + 60
        #expect(!(try store.finishedJobs(before: later).map(\.id).contains(job.id)))
        let serverSucceeded = try #require(try store.claimDeliveries(limit: 10, claimSeconds: 60).first)
        try store.finishDelivery(serverSucceeded, .delivered(status: 200), payload: Data("{}".utf8))
        #expect(try store.finishedJobs(before: later).map(\.id).contains(job.id))
        let again = try #require(try store.redeliver(jobID: job.id, deliveryID: ownRunning.id))
        #expect(again.state == .pending && again.id == ownRunning.id && again.payload == Data("{\"a\":1}".utf8))
        #expect(again.scheduleBase == again.attempts && again.attempts == 1, "the retry schedule starts over")
        #expect(try store.redeliver(jobID: job.id, deliveryID: "msg_nope") == nil)
        #expect(try store.claimDeliveries(limit: 10, claimSeconds: 60).map(\.id) == [ownRunning.id])
        #expect { try store.redeliver(jobID: job.id, deliveryID: ownRunning.id) } throws: { ($0 as? StoreError)?.code == "delivery_in_flight" }

        // A canceled queued job with the default events: one delivery. Deleting the job keeps it until it is sent
        // (it carries the job), then it goes; a 410 turns off every pending delivery of the job to that URL.
        let canceled = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0,
                                           webhooks: JobWebhooks(target: WebhookTarget(url: own)))
        _ = try store.cancelQueued(id: canceled.id)
        #expect(try store.deliveries(jobID: canceled.id).map(\.event) == ["job.canceled"])
        try store.deleteJob(id: canceled.id)
        #expect(try store.job(id: canceled.id) == nil)
        let orphan = try #require(try store.claimDeliveries(limit: 10, claimSeconds: 60).first { $0.jobID == canceled.id })
        #expect(orphan.job?.state == .canceled && orphan.job?.id == canceled.id)
        try store.finishDelivery(orphan, .delivered(status: 200), payload: Data("{}".utf8))
        #expect(try store.deliveries(jobID: canceled.id).isEmpty)

        let twice = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 200,
                                        webhooks: JobWebhooks(target: WebhookTarget(url: own, events: [.running, .failed])))
        let twiceLease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        #expect(twiceLease.jobID == twice.id)
        _ = try store.markFailed(twiceLease, code: "x", message: "x")
        let running = try #require(try store.claimDeliveries(limit: 10, claimSeconds: 60).first { $0.jobID == twice.id })
        try store.finishDelivery(running, .disabled(status: 410), payload: Data("{}".utf8))
        #expect(try store.deliveries(jobID: twice.id).map(\.state) == [.disabled, .disabled], "the later job.failed is off too")

        // A deleted job's 410: the deliveries it turns off go with the one answered (they stayed for ever: nothing
        // takes them again, and no job row is left for retention to find).
        // The server's own deliveries of the job, still to be sent, stay.
        let gone = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 300,
                                       webhooks: JobWebhooks(target: WebhookTarget(url: own, events: [.running, .failed]), serverURL: server))
        let goneLease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        #expect(goneLease.jobID == gone.id)
        _ = try store.markFailed(goneLease, code: "x", message: "x")
        try store.deleteJob(id: gone.id)
        #expect(try store.deliveries(jobID: gone.id).map(\.state) == [.pending, .pending, .pending, .pending])
        let answered = try #require(try store.claimDeliveries(limit: 10, claimSeconds: 60).first { $0.jobID == gone.id && $0.scope == .job })
        try store.finishDelivery(answered, .disabled(status: 410), payload: Data("{}".utf8))
        let left = try store.deliveries(jobID: gone.id)
        #expect(left.map { "\($0.scope.rawValue) \($0.state.rawValue)" } == ["server pending", "server pending"], "\(left)")
    }
}

/// What only the SQLite file does: its schema steps, its generation counter, its transactions.
@Suite struct JobStoreTests {
    /// The queries that run against every job or upload ever kept use an index, in the order they want (no sort of
    /// all the rows they match): the job list by state, retention, unused uploads; the store's own SQL texts.
    @Test func queriesOverGrowingTablesUseIndexes() throws {
        let fixture = try StoreFixture()
        let database = try Database(path: fixture.directory.databasePath)
        func plan(_ sql: String, _ arguments: [SQLValue]) throws -> [String] {
            try database.query("EXPLAIN QUERY PLAN " + sql, arguments).compactMap { $0["detail"].string }
        }
        let byState = try plan(SQLiteJobStore.jobListSQL(filter: "WHERE state = ?"), [.text("failed"), .integer(51)])
        #expect(byState.contains { $0.contains("jobs_state_created") } && !byState.contains { $0.contains("TEMP B-TREE") }, "\(byState)")
        // A later page seeks to its cursor in the index (with and without a state), not walks to it from the newest.
        let after = try JobRows.afterCursor(JobRows.encodeCursor(time: 1, id: UUID().uuidString.lowercased()))
        let page = try plan(SQLiteJobStore.jobListSQL(filter: "WHERE " + after.condition), after.arguments + [.integer(51)])
        #expect(page.contains { $0.contains("jobs_created ((created_at,id)<(?,?))") }, "\(page)")
        let statePage = try plan(SQLiteJobStore.jobListSQL(filter: "WHERE state = ? AND " + after.condition),
                                 [.text("failed")] + after.arguments + [.integer(51)])
        #expect(statePage.contains { $0.contains("jobs_state_created (state=? AND (created_at,id)<(?,?))") }, "\(statePage)")
        let retention = try plan(SQLiteJobStore.finishedJobsSQL, [.real(1), .integer(500)])
        #expect(retention.contains { $0.contains("jobs_finished") } && !retention.contains { $0.contains("TEMP B-TREE") }, "\(retention)")
        let uploads = try plan(SQLiteJobStore.unusedUploadsSQL, [.real(1), .integer(500)])
        #expect(uploads.contains { $0.contains("uploads_created") } && !uploads.contains { $0.contains("TEMP B-TREE") }, "\(uploads)")
        let deliveries = try plan(WebhookRows<SQLiteJobStore>.countsSQL, [])
        #expect(deliveries.contains { $0.contains("COVERING INDEX webhook_deliveries_state") } && !deliveries.contains { $0.contains("TEMP B-TREE") },
                "\(deliveries)")
        // A delivery's earlier ones are looked up by job, never among every pending delivery by state: that walked
        // them all for each one (a receiver down for a while, 8,000 pending: 4 s a claim, 6 s a look for the next
        // due, the store's connection held and every request waiting).
        let sqlite = try #require(fixture.store as? SQLiteJobStore)
        for (name, sql, arguments) in [("claim", sqlite.webhookRows.claimSQL(), [SQLValue.real(1), .integer(4)]),
                                       ("claim skipping", sqlite.webhookRows.claimSQL(skipping: 2), [.real(1), .text("a"), .text("b"), .integer(4)]),
                                       ("due", sqlite.webhookRows.dueSQL, []), ("retention", SQLiteJobStore.finishedJobsSQL, [.real(1), .integer(4)])] {
            let steps = try plan(sql, arguments)
            let lookups = steps.drop { !$0.contains("CORRELATED") }.dropFirst()
            #expect(lookups.first?.contains("USING INDEX webhook_deliveries_job (job_id=?") == true, "\(name): \(steps)")
        }
    }

    @Test func schemaIsVersionedAndReopensCleanly() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: try TranscodeSettings(json: .string("720p")))
        let reopened = try SQLiteJobStore(path: fixture.directory.databasePath)
        #expect(try reopened.job(id: job.id) == job)
        #expect(try reopened.upload(id: upload.id) == upload)
        let database = try Database(path: fixture.directory.databasePath)
        #expect(try database.query("PRAGMA user_version").first?["user_version"].int == Migrations.steps.count)
        #expect(try database.query("PRAGMA journal_mode").first?["journal_mode"].string == "wal")
        #expect(try reopened.integrityCheck() == "ok")
    }

    /// A process that died after the migrations committed, before the absolute paths were made relative, left them
    /// absolute for good (the schema said it was done): the next open makes them relative.
    @Test func pathsLeftAbsoluteByAMigrationCutShortBecomeRelativeAtTheNextOpen() throws {
        let folder = try Media.scratch()
        let path = try firstSchemaDatabase(in: folder,
            "INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('inside', 'in.mov', 1, 'x', '\(folder.path)/uploads/inside', 1)")
        try Migrations.migrate(try Database(path: path)) // and the process stops here
        _ = try SQLiteJobStore(path: path)
        let raw = try Database(path: path)
        #expect(try raw.query("SELECT path FROM uploads WHERE id = 'inside'").first?["path"] == .text("uploads/inside"))
    }

    /// A database whose step 6 ran as a release had it, before that step gained `uploads.source_url`,
    /// `webhook_deliveries.job` and `schedule_base` (and its trigger filled the last two), is repaired by step 10:
    /// before, the server crashed at the first upload row it read (a missing column is a precondition failure), and
    /// again at every restart, or at the first delivery it claimed.
    @Test func aStepSixRunBeforeItGainedItsColumnsIsRepaired() throws {
        let path = try Media.scratch().appendingPathComponent("old.sqlite").path
        let old = try Database(path: path)
        for step in Migrations.steps.prefix(5) { try old.execute(step) }
        try old.execute(Self.releasedStepSix)
        try old.execute("PRAGMA user_version = 6")
        try old.execute("""
            INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('u', 'in.mov', 1, 'x', 'uploads/u', 1);
            INSERT INTO jobs (id, state, settings, input_upload, created_at, updated_at, webhook_url, webhook_events)
                VALUES ('j', 'queued', '{}', 'u', 1, 1, 'http://hooks.example/j', 'job.running,job.succeeded');
            INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at)
                VALUES ('msg_old', 'gone', 'job.failed', 'http://hooks.example/gone', 'job', 1, 1);
            """)
        let store = try SQLiteJobStore(path: path)
        // Looked at first: without them the reads below stop the test process (a missing column is a precondition
        // failure), rather than fail.
        let columns = try Database(path: path).query("""
            SELECT name FROM pragma_table_info('uploads') UNION ALL SELECT name FROM pragma_table_info('webhook_deliveries')
            """).compactMap { $0["name"].string }
        try #require(["source_url", "job", "schedule_base"].allSatisfy(columns.contains), "\(columns)")
        let upload = try #require(try store.upload(id: "u"))
        #expect(upload.sourceURL == nil && upload.sha256 == "x")
        let running = try #require(try store.claimNext(worker: "w", leaseSeconds: 20))
        #expect(running.id == "j")
        // The trigger made again: the delivery carries the job's row as the change left it; the one made before
        // the repair has none (its job is read when it is sent).
        let claimed = try store.claimDeliveries(limit: 10, claimSeconds: 30)
        #expect(Set(claimed.map(\.id)).count == 2 && claimed.allSatisfy { $0.scheduleBase == 0 }, "\(claimed)")
        let made = try #require(claimed.first { $0.jobID == "j" })
        #expect(made.event == "job.running" && made.job?.state == .running && made.job?.lease == "w", "\(made)")
        #expect(claimed.first { $0.id == "msg_old" }?.job == nil)
        #expect(try Database(path: path).query("PRAGMA user_version").first?["user_version"].int == Migrations.steps.count)
        #expect(try store.integrityCheck() == "ok")
        // A database made by the steps as they are now goes through step 10 unchanged.
        let fresh = try StoreFixture()
        #expect(try fresh.store.upload(id: "none") == nil)
    }

    /// Step 6 as a release ran it (238f380), before it gained three columns.
    private static let releasedStepSix = """
        ALTER TABLE jobs ADD COLUMN webhook_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_events TEXT;
        ALTER TABLE jobs ADD COLUMN server_webhook_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_disabled INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE webhook_deliveries (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            job_id TEXT NOT NULL,
            event TEXT NOT NULL,
            url TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('job', 'server')),
            created_at REAL NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed', 'disabled')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            claimed_until REAL,
            last_status INTEGER,
            last_error TEXT,
            payload TEXT,
            delivered_at REAL
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
        CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id, seq);
        CREATE TRIGGER jobs_webhooks AFTER UPDATE OF state ON jobs
        WHEN NEW.state <> OLD.state AND NEW.state <> 'queued'
        BEGIN
            INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at)
            SELECT 'msg_' || lower(hex(randomblob(16))), NEW.id, 'job.' || NEW.state, NEW.webhook_url, 'job',
                NEW.updated_at, NEW.updated_at
            WHERE NEW.webhook_url IS NOT NULL AND NEW.webhook_disabled = 0
                AND instr(',' || NEW.webhook_events || ',', ',job.' || NEW.state || ',') > 0;
        END;
        """

    /// A database of the first schema, `old.sqlite` in `folder`, holding what `rows` inserts; its path.
    private func firstSchemaDatabase(in folder: URL, _ rows: String) throws -> String {
        let path = folder.appendingPathComponent("old.sqlite").path
        let old = try Database(path: path)
        try old.execute(Migrations.steps[0])
        try old.execute("PRAGMA user_version = 1")
        try old.execute(rows)
        return path
    }

    /// A database left by the first schema (before jobs kept their frame count and transcode time) is brought up to
    /// date on open, its rows intact; the new columns stay empty for jobs that finished before.
    @Test func aFirstSchemaDatabaseIsMigratedInPlace() throws {
        let folder = try Media.scratch()
        let path = try firstSchemaDatabase(in: folder, """
            INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('u', 'in.mov', 1, 'x', '/nowhere', 1);
            INSERT INTO uploads (id, filename, size, sha256, path, created_at)
                VALUES ('inside', 'in.mov', 1, 'x', '\(folder.path)/uploads/inside', 1);
            INSERT INTO jobs (id, state, settings, input_upload, output_path, progress_time, progress_duration, created_at,
                              started_at, finished_at, updated_at)
                VALUES ('j', 'succeeded', '{}', 'u', '\(folder.path)/outputs/j.mp4', 4, 4, 1, 2, 3, 3);
            """)
        let store = try SQLiteJobStore(path: path)
        let job = try #require(try store.job(id: "j"))
        #expect(job.state == .succeeded && job.progressDuration == 4 && job.startedAt == 2)
        // Absolute paths inside the data directory became relative to it, and still resolve to the same files.
        #expect(job.outputPath == folder.path + "/outputs/j.mp4")
        #expect(try store.upload(id: "inside")?.path == folder.path + "/uploads/inside")
        #expect(try store.upload(id: "u")?.path == "/nowhere", "a path outside it is kept as it was")
        let raw = try Database(path: path)
        #expect(try raw.query("SELECT path FROM uploads WHERE id = 'inside'").first?["path"] == .text("uploads/inside"))
        #expect(try raw.query("SELECT output_path FROM jobs WHERE id = 'j'").first?["output_path"] == .text("outputs/j.mp4"))
        #expect(job.framesEncoded == nil && job.transcodeSeconds == nil)
        let database = try Database(path: path)
        #expect(try database.query("PRAGMA user_version").first?["user_version"].int == Migrations.steps.count)
        #expect(try store.integrityCheck() == "ok")

        let upload = try #require(try store.upload(id: "u"))
        let next = try store.createJob(input: upload.id, settings: TranscodeSettings())
        let lease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        #expect(lease.jobID == next.id)
        let done = try store.markSucceeded(lease, outputPath: "/out.mp4", size: 1, tracks: [], files: nil, duration: 4,
                                           framesEncoded: 120, seconds: 2)
        #expect(done.framesEncoded == 120 && done.transcodeSeconds == 2)
        #expect(try SQLiteJobStore(path: path).job(id: next.id) == done)
    }

    @Test func aFailedTransactionRollsBackAndRethrowsTheFirstError() throws {
        let fixture = try StoreFixture()
        let database = try Database(path: fixture.directory.databasePath)
        #expect {
            try database.transaction { () throws(StoreError) in
                try database.query("INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('u', 'f', 1, 's', 'p', 0)")
                try database.query("INSERT INTO nowhere VALUES (1)")
            }
        } throws: { ($0 as? StoreError)?.message.contains("no such table: nowhere") == true }
        #expect(try database.query("SELECT count(*) AS n FROM uploads").first?["n"].int == 0)
    }

    /// The generation is what lets the API answer a poll from memory: every write moves it, reads never do.
    @Test func theGenerationMovesWithEveryWriteAndOnlyThen() throws {
        let fixture = try StoreFixture()
        let store = fixture.store
        var last = store.generation
        func moved(_ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(store.generation > last, "\(what) moves the generation", sourceLocation: sourceLocation)
            last = store.generation
        }
        func unchanged(_ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(store.generation == last, "\(what) leaves it", sourceLocation: sourceLocation)
        }
        let upload = try fixture.upload(try Media.path(.audioOnly))
        moved("an upload")
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings())
        moved("a new job")
        _ = try store.job(id: job.id)
        _ = try store.lastUpdate(of: job.id)
        _ = try store.jobs()
        unchanged("reading")
        let lease = try #require(try store.claimNext(worker: "test", leaseSeconds: 20)?.currentLease)
        moved("a claim")
        try store.saveProgress(lease, time: 1, duration: 2)
        moved("progress")
        _ = try store.markFailed(lease, code: "test", message: "test")
        moved("a failure")
        #expect(throws: StoreError.self) { try store.markCanceled(lease) }
        unchanged("a refused write")
        _ = try store.markFailed(lease, code: "test", message: "test")
        unchanged("the same end written again (its first answer lost): the row as it is")
        try store.deleteJob(id: job.id)
        moved("a deletion")
    }

    /// A database from before jobs referred to their watermark gets the reference filled in from the settings.
    @Test func aSchemaTwoDatabaseGetsItsWatermarkReferences() throws {
        // Schema 2, with a job naming a watermark, migrated: the reference is there.
        let path = try Media.scratch().appendingPathComponent("old.sqlite").path
        do {
            let old = try Database(path: path)
            for step in Migrations.steps.prefix(2) { try old.execute(step) }
            try old.execute("PRAGMA user_version = 2")
            try old.execute("""
                INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('in', 'a.wav', 1, 'x', '/a', 1);
                INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('mark', 'm.png', 1, 'x', '/m', 1);
                INSERT INTO jobs (id, state, settings, input_upload, created_at, updated_at)
                    VALUES ('j', 'queued', '{"filters": {"video": {"watermark": {"upload": "mark"}}}}', 'in', 1, 1);
                """)
        }
        let migrated = try SQLiteJobStore(path: path)
        #expect { try migrated.deleteUpload(id: "mark") } throws: { ($0 as? StoreError)?.code == "constraint" }
        #expect(try migrated.integrityCheck() == "ok")
    }
}

/// What PostgreSQL announces to every node.
@Suite struct PostgresNoticeTests {
    /// Saved progress has a notice of its own: a change of state wakes every node's webhook senders, and progress
    /// used to as well, once per running job and second.
    @Test func progressIsAnnouncedApartFromChangesOfState() throws {
        let fixture = try StoreFixture(.postgres)
        let store = fixture.store
        let notices = LockedValue<[StoreNotice]>([])
        store.watch { notice in notices.withLock { $0.append(notice) } }
        #expect(eventually(10) { notices.withLock { $0.contains(.listening) } })
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings())
        let lease = try #require(try store.claimNext(worker: "w", leaseSeconds: 20)?.currentLease)
        try store.saveProgress(lease, time: 1, duration: 4)
        _ = try store.markSucceeded(lease, outputPath: fixture.directory.outputs.path + "/x/output.mp4", size: 1, tracks: [], files: nil,
                                    duration: 4, framesEncoded: 1, seconds: 1)
        // A later job marks the end: notices come in commit order, so all of the first job's are in before its.
        let marker = try store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(eventually(10) { notices.withLock { $0.contains(.queued(marker.id)) } })
        let heard = notices.withLock { $0.filter { $0 != .listening }.prefix { $0 != .queued(marker.id) } }
        #expect(Array(heard) == [.queued(job.id), .changed(job.id), .changed(job.id), .progressed(job.id), .changed(job.id)])
    }
}

/// The SQLite connection's prepared statements: one per statement text, so a text must not change from call to call.
@Suite struct SQLiteStatementCacheTests {
    /// The webhook senders claim every 2 s whether or not anything is due: each claim (and each outcome, each
    /// redelivery) used to write the time into its SQL, so each prepared and kept a statement of its own, for as long
    /// as the server ran.
    @Test func repeatedWebhookClaimsAndOutcomesPrepareNoNewStatements() throws {
        let fixture = try StoreFixture(.sqlite)
        let store = try #require(fixture.store as? SQLiteJobStore)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0,
                                      webhooks: JobWebhooks(serverURL: "http://hooks.example/all"))
        _ = try #require(try store.claimNext(worker: "w", leaseSeconds: 60), "the job starts: a delivery is written")
        var sent = 0
        func round() throws {
            for delivery in try store.claimDeliveries(limit: 4, claimSeconds: 60) {
                try store.finishDelivery(delivery, .delivered(status: 204), payload: Data("{}".utf8))
                _ = try store.redeliver(jobID: job.id, deliveryID: delivery.id)
                sent += 1
            }
            _ = try store.secondsUntilNextDelivery()
        }
        try round()
        let prepared = store.cachedStatements
        for _ in 0..<50 { try round() }
        #expect(sent == 51, "every round claims, sends and redelivers the delivery")
        #expect(store.cachedStatements == prepared, "\(store.cachedStatements - prepared) statements prepared by 50 rounds")
    }
}

/// A resumable upload's files: the lock that says a request is completing it, and the sweep.
@Suite struct TusUploadsTests {
    /// A waiter for the completion lock whose holder saved a new description before letting go (a completion given
    /// up on a probe timeout) holds the lock of the description as it is named now: it held the old file, which no
    /// one else opens, so the next request took the new one's lock at once and two completions ran on the same
    /// bytes.
    @Test func aWaiterHoldsTheLockOfTheDescriptionAsItIsNow() throws {
        let directory = DataDirectory(path: try Media.scratch().path)
        let uploads = TusUploads(directory: directory)
        let id = UUID().uuidString.lowercased()
        try FileManager.default.createDirectory(atPath: URL(fileURLWithPath: uploads.dataPath(id)).deletingLastPathComponent().path,
                                                withIntermediateDirectories: true)
        var upload = TusUpload(id: id, length: 10, metadata: "", createdAt: Date().timeIntervalSince1970)
        try uploads.create(upload)
        var first = try #require(uploads.lockCompletion(id))
        defer { if first >= 0 { close(first) } } // a check failing early must not leave the waiter blocked for good
        let waiter = LockedValue<Int32?>(nil)
        let waiting = DispatchSemaphore(value: 0)
        NamedThread.start("lock-waiter") {
            waiting.signal()
            let descriptor = uploads.lockCompletion(id, waiting: true)
            waiter.withLock { $0 = descriptor }
            waiter.notifyAll()
        }
        waiting.wait()
        // Until the waiter is blocked in flock on the description as it is now (the kernel lists a blocked lock with
        // "->" and the file's device and inode): the new description is saved only then.
        var status = stat()
        try #require(stat(uploads.infoPath(id), &status) == 0)
        let major = UInt32((status.st_dev >> 8) & 0xfff), minor = UInt32((status.st_dev & 0xff) | ((status.st_dev >> 12) & 0xfff00))
        let file = String(format: "%02x:%02x:%lu ", major, minor, UInt(status.st_ino))
        try #require(eventually(10) {
            let locks = (try? String(contentsOfFile: "/proc/locks", encoding: .utf8)) ?? ""
            return locks.split(separator: "\n").contains { $0.contains("->") && $0.contains("FLOCK") && $0.contains(file) }
        }, "the waiter is blocked on the description's lock (\(file))")
        upload.probeTimeouts = 1
        try uploads.save(upload) // a new file under the name, as the probe timeout's save
        close(first)
        first = -1
        #expect(waiter.wait(timeout: 10) { $0 != nil }, "the waiter got the lock")
        defer { if let held = waiter.withLock({ $0 }) ?? nil { close(held) } }
        let another = uploads.lockCompletion(id)
        if let another { close(another) }
        #expect(another == nil, "another request took the lock while the waiter held it")
    }

    /// The sweep leaves an upload whose description cannot be read now, or is damaged, while its bytes are recent:
    /// it judged such an upload by whichever of its files it listed first, and an upload created long ago (its
    /// description as old) whose bytes were still arriving was deleted. One whose files are all old goes.
    @Test func theSweepJudgesAnUploadItCannotReadByItsNewestFile() throws {
        let directory = DataDirectory(path: try Media.scratch().path)
        let uploads = TusUploads(directory: directory, expiryHours: 1)
        let twoHoursAgo = Date().addingTimeInterval(-7200)
        func make(_ description: (String) throws -> Void, recentBytes: Bool) throws -> String {
            let id = UUID().uuidString.lowercased()
            try FileManager.default.createDirectory(atPath: URL(fileURLWithPath: uploads.dataPath(id)).deletingLastPathComponent().path,
                                                    withIntermediateDirectories: true)
            try uploads.create(TusUpload(id: id, length: 10, metadata: "", createdAt: twoHoursAgo.timeIntervalSince1970))
            try Data("abc".utf8).write(to: URL(fileURLWithPath: uploads.dataPath(id)))
            try description(uploads.infoPath(id))
            try FileManager.default.setAttributes([.modificationDate: twoHoursAgo], ofItemAtPath: uploads.infoPath(id))
            if !recentBytes { try FileManager.default.setAttributes([.modificationDate: twoHoursAgo], ofItemAtPath: uploads.dataPath(id)) }
            return id
        }
        let damage: (String) throws -> Void = { path in try Data("{".utf8).write(to: URL(fileURLWithPath: path)) }
        let unreadable: (String) throws -> Void = { path in // read() fails (EISDIR), as an I/O error would
            try FileManager.default.removeItem(atPath: path)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        }
        // Several of each: which file a folder lists first is the file system's choice.
        let kept = try (0..<8).map { _ in try make(damage, recentBytes: true) } + (0..<8).map { _ in try make(unreadable, recentBytes: true) }
        let old = try make(damage, recentBytes: false)
        let removed = Set(uploads.sweep(at: Date().timeIntervalSince1970))
        #expect(removed == [old], "kept: \(kept.filter { !removed.contains($0) }.count) of \(kept.count); the old one removed: \(removed.contains(old))")
        for id in kept { #expect(FileManager.default.fileExists(atPath: uploads.dataPath(id))) }
        #expect(throws: MediaError.self) { try uploads.readUpload(kept[0]) }
        #expect(throws: MediaError.self) { try uploads.readUpload(kept[8]) }
        #expect(try uploads.readUpload(old) == nil, "gone")
    }
}
