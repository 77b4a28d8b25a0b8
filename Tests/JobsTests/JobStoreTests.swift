import Foundation
import Pipeline
import Locks
import Testing
import TestSupport
@testable import Jobs

@Suite struct JobStoreTests {
    /// Brings a new job to `state` through allowed moves only.
    private func job(in state: JobState, _ fixture: StoreFixture, upload: Upload) throws -> Job {
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        switch state {
        case .queued: return job
        case .canceled: return try fixture.store.markCanceled(id: job.id)
        default:
            let running = try fixture.store.move(job.id, to: .running)
            return state == .running ? running : try fixture.store.move(job.id, to: state)
        }
    }

    @Test func everyTransitionIsAllowedOrRefusedByTheStore() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        var allowed: [String] = []
        for from in JobState.allCases {
            for to in JobState.allCases {
                let subject = try job(in: from, fixture, upload: upload)
                #expect(subject.state == from)
                do {
                    let moved = try fixture.store.move(subject.id, to: to)
                    #expect(moved.state == to)
                    allowed.append("\(from.rawValue)→\(to.rawValue)")
                } catch {
                    #expect(error.code == "invalid_transition", "\(from)→\(to): \(error)")
                    #expect(try fixture.store.job(id: subject.id)?.state == from, "a refused move changes nothing")
                }
                #expect(allowed.contains("\(from.rawValue)→\(to.rawValue)") == from.canMove(to: to))
            }
        }
        #expect(allowed.sorted() == ["queued→canceled", "queued→running", "running→canceled", "running→failed",
                                     "running→queued", "running→succeeded"])
    }

    @Test func theDatabaseItselfRefusesABadUpdate() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let database = try Database(path: fixture.directory.databasePath)
        #expect {
            try database.query("UPDATE jobs SET state = 'succeeded' WHERE id = ?", [.text(job.id)])
        } throws: { error in
            let storeError = error as? StoreError
            return storeError?.isConstraint == true && storeError?.message.contains("invalid job state transition") == true
        }
    }

    @Test func claimsFollowPriorityThenAge() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let low = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0)
        let high = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 5)
        let lowLater = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(), priority: 0)
        let order = try (0..<4).map { _ in try fixture.store.claimNext(lease: "test")?.id }
        #expect(order == [high.id, low.id, lowLater.id, nil])
        let claimed = try #require(try fixture.store.job(id: high.id))
        #expect(claimed.state == .running && claimed.lease == "test" && claimed.startedAt != nil)
    }

    @Test func eightConnectionsClaimEachOfAThousandJobsExactlyOnce() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let database = try Database(path: fixture.directory.databasePath)
        try database.transaction { () throws(StoreError) in
            for index in 0..<1000 {
                try database.query("""
                    INSERT INTO jobs (id, state, settings, input_upload, created_at, updated_at) VALUES (?, 'queued', '{}', ?, ?, ?)
                    """, [.text("job-\(index)"), .text(upload.id), .real(Double(index)), .real(0)])
            }
        }
        let claims = LockedValue<[String]>([])
        let failures = LockedValue<[String]>([])
        let group = DispatchGroup()
        for worker in 0..<8 {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    let store = try JobStore(path: fixture.directory.databasePath)
                    while let job = try store.claimNext(lease: "worker-\(worker)") {
                        claims.withLock { $0.append(job.id) }
                    }
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

    @Test func recoveryRequeuesOrphansAndFailsThemAfterThreeAttempts() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect(job.attempts == 1)
        for attempt in 2...3 {
            _ = try fixture.store.claimNext(lease: "dead")
            let recovered = try fixture.store.recoverOrphans(maxAttempts: 3)
            #expect(recovered.requeued == [job.id])
            let requeued = try #require(try fixture.store.job(id: job.id))
            #expect(requeued.state == .queued && requeued.attempts == attempt && requeued.lease == nil)
        }
        _ = try fixture.store.claimNext(lease: "dead")
        let last = try fixture.store.recoverOrphans(maxAttempts: 3)
        #expect(last.failed == [job.id] && last.requeued.isEmpty)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "worker_crashed" && failed.finishedAt != nil)
    }

    @Test func pagesAreNewestFirstAndFilteredByState() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        var ids: [String] = []
        for _ in 0..<7 { ids.append(try fixture.store.createJob(input: upload.id, settings: TranscodeSettings()).id) }
        try fixture.store.markCanceled(id: ids[0])
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

    @Test func schemaIsVersionedAndReopensCleanly() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: try TranscodeSettings(json: .string("720p")))
        let reopened = try JobStore(path: fixture.directory.databasePath)
        #expect(try reopened.job(id: job.id) == job)
        #expect(try reopened.upload(id: upload.id) == upload)
        let database = try Database(path: fixture.directory.databasePath)
        #expect(try database.query("PRAGMA user_version").first?["user_version"].int == Migrations.steps.count)
        #expect(try database.query("PRAGMA journal_mode").first?["journal_mode"].string == "wal")
        #expect(try reopened.integrityCheck() == "ok")
    }

    /// A database left by the first schema (before jobs kept their frame count and transcode time) is brought up to
    /// date on open, its rows intact; the new columns stay empty for jobs that finished before.
    @Test func aFirstSchemaDatabaseIsMigratedInPlace() throws {
        let folder = try Media.scratch()
        let path = folder.appendingPathComponent("old.sqlite").path
        do {
            let old = try Database(path: path)
            try old.execute(Migrations.steps[0])
            try old.execute("PRAGMA user_version = 1")
            try old.execute("""
                INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('u', 'in.mov', 1, 'x', '/nowhere', 1);
                INSERT INTO jobs (id, state, settings, input_upload, progress_time, progress_duration, created_at,
                                  started_at, finished_at, updated_at)
                    VALUES ('j', 'succeeded', '{}', 'u', 4, 4, 1, 2, 3, 3);
                """)
        }
        let store = try JobStore(path: path)
        let job = try #require(try store.job(id: "j"))
        #expect(job.state == .succeeded && job.progressDuration == 4 && job.startedAt == 2)
        #expect(job.framesEncoded == nil && job.transcodeSeconds == nil)
        let database = try Database(path: path)
        #expect(try database.query("PRAGMA user_version").first?["user_version"].int == Migrations.steps.count)
        #expect(try store.integrityCheck() == "ok")

        let upload = try #require(try store.upload(id: "u"))
        let next = try store.createJob(input: upload.id, settings: TranscodeSettings())
        try store.move(next.id, to: .running)
        let done = try store.markSucceeded(id: next.id, outputPath: "/out.mp4", size: 1, tracks: [], files: nil, duration: 4,
                                           framesEncoded: 120, seconds: 2)
        #expect(done.framesEncoded == 120 && done.transcodeSeconds == 2)
        #expect(try JobStore(path: path).job(id: next.id) == done)
    }

    @Test func aJobNeedsAnExistingUploadAndKeepsItAlive() throws {
        let fixture = try StoreFixture()
        #expect { try fixture.store.createJob(input: "nope", settings: TranscodeSettings()) } throws: {
            ($0 as? StoreError)?.code == "upload_not_found"
        }
        let upload = try fixture.upload(try Media.path(.audioOnly))
        _ = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        #expect { try fixture.store.deleteUpload(id: upload.id) } throws: { error in
            let storeError = error as? StoreError
            return storeError?.code == "constraint" && storeError?.message.contains("FOREIGN KEY") == true
        }
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
        _ = try store.claimNext(lease: "test")
        moved("a claim")
        try store.saveProgress(id: job.id, time: 1, duration: 2)
        moved("progress")
        _ = try store.markFailed(id: job.id, code: "test", message: "test")
        moved("a failure")
        #expect(throws: StoreError.self) { try store.move(job.id, to: .running) }
        unchanged("a refused move")
        try store.deleteJob(id: job.id)
        moved("a deletion")
    }

    /// A watermark image a job names is kept like its input: deleting it is refused, retention passes it by, and a job
    /// cannot name one that does not exist. A database from before the column gets it filled in from the settings.
    @Test func aWatermarkAJobUsesIsKeptLikeItsInput() throws {
        let fixture = try StoreFixture()
        let input = try fixture.upload(try Media.path(.audioOnly))
        let mark = try fixture.upload(try Media.path(.audioOnly))
        let settings = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "\#(mark.id)"}}}}"#.utf8))
        let job = try fixture.store.createJob(input: input.id, settings: settings)
        #expect { try fixture.store.deleteUpload(id: mark.id) } throws: { ($0 as? StoreError)?.code == "constraint" }
        #expect(try fixture.store.unusedUploads(before: Date().timeIntervalSince1970 + 1).isEmpty)
        let missing = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "gone"}}}}"#.utf8))
        #expect { try fixture.store.createJob(input: input.id, settings: missing) } throws: {
            ($0 as? StoreError)?.code == "watermark_not_found"
        }
        try fixture.store.deleteJob(id: job.id)
        try fixture.store.deleteUpload(id: mark.id)

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
        let migrated = try JobStore(path: path)
        #expect { try migrated.deleteUpload(id: "mark") } throws: { ($0 as? StoreError)?.code == "constraint" }
        #expect(try migrated.integrityCheck() == "ok")
    }
}
