import Foundation
@testable import Jobs
import Isolation
@testable import Pipeline
import Locks
import Logging
import Testing
import TestSupport

/// A runner that never advances: stands in for a transcode stuck in a decoder, for the watchdog.
struct StuckRunner: JobRunner {
    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        while !cancellation.isCanceled { usleep(10_000) }
        throw MediaError.canceled
    }
}

/// A runner that fails at once: for timing the queue itself.
struct FailingRunner: JobRunner {
    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        throw MediaError(code: "test_failure", message: "Fails on purpose.")
    }
}

/// Wraps a runner and notes when it was last called and when it last returned.
final class TimedRunner: JobRunner {
    let started = LockedValue<Date?>(nil)
    let ended = LockedValue<Date?>(nil)
    private let runner: any JobRunner

    init(_ runner: any JobRunner) { self.runner = runner }

    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        started.withLock { $0 = Date() }
        defer { ended.withLock { $0 = Date() } }
        return try runner.run(job, input: input, outputDirectory: outputDirectory, cancellation: cancellation, progress: progress)
    }
}

/// A real transcode with a long step before or after it, reporting steps meanwhile: counting up, or (`advancing`
/// false) the same step over and over. Before: an earlier attempt's checkpoint checked (`verifying`, the time at 0);
/// after: the output completed, as a long film's is (`finishing`, the time at the end).
struct SlowStepsRunner: JobRunner {
    enum Phase { case verifying, finishing }
    let phase: Phase
    let seconds: Double
    let advancing: Bool

    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        if phase == .verifying {
            try steps(from: 1, cancellation: cancellation) { step in
                progress(TranscodeProgress(presentationTime: 0, duration: 0, framesEncoded: 0, elapsed: 0, verifying: step))
            }
        }
        var last: TranscodeProgress?
        let result = try TranscodeRunner().run(job, input: input, outputDirectory: outputDirectory, cancellation: cancellation) {
            last = $0
            progress($0)
        }
        if phase == .finishing {
            guard var report = last else { throw MediaError(code: "test_failure", message: "The transcode reported no progress.") }
            // On from the count the real finish reached: the watchdog counts a step above the last it saw.
            try steps(from: (report.finishing ?? 0) + 1, cancellation: cancellation) { step in
                report.finishing = step
                progress(report)
            }
        }
        return result
    }

    private func steps(from first: Int, cancellation: CancellationToken, report: (Int) -> Void) throws(MediaError) {
        let start = Date()
        var step = first
        while Date().timeIntervalSince(start) < seconds {
            if cancellation.isCanceled { throw MediaError.canceled }
            report(step)
            if advancing { step += 1 }
            usleep(100_000)
        }
    }
}

/// A runner whose attempt "crashes" (`worker_crashed`, retried by the queue) after filling its output folder with
/// many files: removing them before the end is recorded takes a moment, in which a cancel comes too late for the
/// attempt but not for the job. Says when it is about to fail, and counts its calls.
final class CrashingWithFilesRunner: JobRunner, @unchecked Sendable {
    let calls = LockedValue(0)
    let failing = DispatchSemaphore(value: 0)
    /// The folder the attempt filled, whose removal the test watches.
    let folder = LockedValue<String?>(nil)

    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        calls.withLock { $0 += 1 }
        folder.withLock { $0 = outputDirectory }
        try? FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        for index in 0..<6000 { _ = FileManager.default.createFile(atPath: outputDirectory + "/piece-\(index)", contents: Data("x".utf8)) }
        failing.signal()
        throw MediaError(code: "worker_crashed", message: "The job's process stopped (test).")
    }

    /// Waits (10 s at most) until the attempt's folder is being removed, which comes after its end began (the
    /// attempt's own cancel is too late by then); whether that was caught.
    func removalUnderWay() -> Bool {
        guard let folder = folder.withLock({ $0 }) else { return false }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline && FileManager.default.fileExists(atPath: folder) {
            let count = (try? FileManager.default.contentsOfDirectory(atPath: folder).count) ?? 0
            if count > 0 && count < 6000 { return true }
            usleep(500)
        }
        return false
    }
}

@Suite(.serialized) struct JobQueueTests {
    private func queue(_ fixture: StoreFixture, runner: any JobRunner = TranscodeRunner(),
                       configure: (inout JobQueue.Configuration) -> Void = { _ in }) -> JobQueue {
        var configuration = JobQueue.Configuration()
        configuration.pollInterval = 0.1
        configure(&configuration)
        return JobQueue(store: fixture.store, directory: fixture.directory, runner: runner, configuration: configuration)
    }

    /// A child that leaves a link where its main file goes (one taken over by a hostile file, where Landlock does not
    /// run) does not get it served: the server, unconfined, followed it to what it named. A stub child stands in.
    @Test func aLinkLeftAsTheMainFileFailsTheJob() throws {
        let fixture = try StoreFixture()
        let secret = fixture.directory.root.appendingPathComponent("not-for-clients").path
        try Data("secret".utf8).write(to: URL(fileURLWithPath: secret))
        let result = TranscodeResult(path: "x", size: 6, container: .mp4, tracks: [], duration: 1, framesEncoded: 1, elapsed: 1,
                                     mimeType: "video/mp4")
        let answer = String(decoding: try JSONEncoder().encode(JobMessage(result: result)), as: UTF8.self)
        let stub = fixture.directory.root.deletingLastPathComponent().appendingPathComponent("links.sh").path
        let script = """
            #!/bin/sh
            read request
            out=$(printf '%s' "$request" | sed 's/.*"output":"\\([^"]*\\)".*/\\1/' | sed 's#\\\\/#/#g')
            mkdir -p "$out" && ln -s '\(secret)' "$out/output.mp4" && echo '\(answer)'

            """
        try Shell.writeScript(script, to: stub)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, runner: ChildProcessRunner(executable: stub)) { $0.maxAttempts = 1 }
        try queue.start()
        queue.jobQueued()
        #expect(try eventually(20) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 5)
        let ended = try #require(try fixture.store.job(id: job.id))
        #expect(ended.state == .failed && ended.errorCode == "output_failed" && ended.outputPath == nil,
                "\(ended.state) \(ended.errorCode ?? "") \(ended.errorMessage ?? "")")
    }

    /// A child's numbers are bounded as they arrive (a stub child stands in for one taken over by a hostile file):
    /// two answers of `framesEncoded` 2^63 − 1 trapped the server's sum of frames encoded, ending the whole server,
    /// and a probe's track lasting 1e300 s would have trapped the API's count of thumbnails. Its names and tracks
    /// too: a codec name of 12 MiB was stored with the upload and repeated in every job listing.
    @Test func aChildsNumbersAreBoundedAsTheyArrive() throws {
        let fixture = try StoreFixture()
        let huge = Track(index: 0, mediaType: .video, codec: "h264", width: Int.max, height: 1080, sampleAspectRatio: "inf:1", rotation: -90,
                         frameRate: 1e300, duration: 1e300)
        let result = TranscodeResult(path: "x", size: Int.max, container: .mp4, tracks: [huge], duration: 1e300, framesEncoded: Int.max,
                                     elapsed: -1e300, mimeType: "video/mp4")
        let progress = TranscodeProgress(presentationTime: -1e300, duration: 1e300, framesEncoded: Int.min, elapsed: 1)
        let lines = [JobMessage(progress: progress, dataBytes: Int.max), JobMessage(result: result)]
            .map { String(decoding: try! JSONEncoder().encode($0), as: UTF8.self) }
        var named = huge
        named.codec = String(repeating: "c", count: 100_000)
        named.channelLayout = String(repeating: "l", count: 100_000)
        named.profile = "p" + String(repeating: "\u{301}", count: 100_000) // one character of 100,001 scalars
        let many = (1...2000).map { Track(index: $0, mediaType: .subtitle, codec: "subrip") }
        let probeAnswer = String(decoding: try JSONEncoder().encode(JobMessage(tracks: [named] + many)), as: UTF8.self)
        let stub = fixture.directory.root.deletingLastPathComponent().appendingPathComponent("huge.sh").path
        let script = """
            #!/bin/sh
            read request
            case "$request" in *'"kind":"probe"'*) echo '\(probeAnswer)'; exit 0;; esac
            out=$(printf '%s' "$request" | sed 's/.*"output":"\\([^"]*\\)".*/\\1/' | sed 's#\\\\/#/#g')
            mkdir -p "$out" && printf 'x' > "$out/output.mp4" && echo '\(lines[0])' && echo '\(lines[1])'

            """
        try Shell.writeScript(script, to: stub)
        let runner = ChildProcessRunner(executable: stub)
        let tracks = try runner.probe(path: "/dev/null")
        #expect(tracks.count == 1024, "\(tracks.count) tracks")
        let probed = try #require(tracks.first)
        #expect(probed.codec.count == 256 && probed.channelLayout?.count == 256 && probed.profile?.unicodeScalars.count == 256,
                "\(probed.codec.count) \(probed.channelLayout?.count ?? 0) \(probed.profile?.unicodeScalars.count ?? 0)")
        #expect(probed.width == 1 << 20 && probed.rotation == 270 && probed.frameRate == 1e6 && (probed.duration ?? .infinity) < 1e12
                && probed.sampleAspectRatio == nil, "\(probed)")
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let jobs = [try fixture.store.createJob(input: upload.id, settings: TranscodeSettings()),
                    try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())]
        let queue = queue(fixture, runner: runner) { $0.maxAttempts = 1 }
        try queue.start()
        queue.jobQueued()
        #expect(try eventually(20) { try jobs.allSatisfy { try fixture.store.job(id: $0.id)?.state.isTerminal == true } })
        queue.stop(grace: 5)
        for job in jobs {
            let ended = try #require(try fixture.store.job(id: job.id))
            #expect(ended.state == .succeeded && ended.framesEncoded == 1 << 48 && (ended.transcodeSeconds ?? -1) >= 0, "\(ended)")
            let track = try #require(ended.outputTracks?.first)
            #expect(track.width == 1 << 20 && track.rotation == 270 && track.sampleAspectRatio == nil && (track.duration ?? .infinity) < 1e12, "\(track)")
        }
        #expect(queue.statistics.framesEncoded == 2 << 48)
    }

    /// A job process that cannot be started (here: its binary is missing, as with no processes or memory left) is
    /// not the file's fault: the probe says `worker_unavailable` (the API answers 503 and a tus upload keeps its
    /// bytes), and a job runs again, as after a crash, before it fails.
    @Test func aJobProcessThatCannotStartIsRetriedNotBlamedOnTheFile() throws {
        let fixture = try StoreFixture()
        let runner = ChildProcessRunner(executable: "/nonexistent/transcoderd")
        let source = try Media.path(.audioOnly)
        #expect(throws: MediaError.self) { try runner.probe(path: source) }
        do {
            _ = try runner.probe(path: source)
        } catch {
            #expect(error.code == "worker_unavailable" && error.message.contains("Starting the job process failed"), "\(error)")
        }
        let upload = try fixture.upload(source)
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, runner: runner)
        try queue.start()
        queue.jobQueued()
        #expect(try eventually(20) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 5)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "worker_unavailable" && failed.attempts == 3,
                "\(failed.state) \(failed.errorCode ?? "") after \(failed.attempts)")
    }

    /// A job process that cannot be started for a moment (here: for 0.8 s) costs attempts, not the job: the job
    /// waits before it goes back to the queue (all three attempts were spent in milliseconds), and the wait is not a
    /// stall (a 1.5 s wait against a 1 s stall timeout).
    @Test func aJobWhoseProcessCannotStartForAMomentRunsOnceItCan() throws {
        let fixture = try StoreFixture()
        /// `worker_unavailable` for 0.8 s from its first call, then a success as `PacedRunner` makes it.
        struct Unavailable: JobRunner {
            let first = LockedValue<Date?>(nil)
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                let start = first.withLock { first in first ?? { first = Date(); return first! }() }
                guard Date().timeIntervalSince(start) >= 0.8 else {
                    throw MediaError(code: "worker_unavailable", message: "Starting the job process failed.")
                }
                return try PacedRunner(seconds: 0.05).run(job, input: input, outputDirectory: outputDirectory,
                                                          cancellation: cancellation, progress: progress)
            }
        }
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, runner: Unavailable()) {
            $0.unavailableBackoff = 1.5
            $0.stallTimeout = 1
        }
        try queue.start()
        defer { queue.stop(grace: 5) }
        queue.jobQueued()
        #expect(try eventually(20) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        let ended = try #require(try fixture.store.job(id: job.id))
        #expect(ended.state == .succeeded && ended.attempts == 2, "\(ended.state) \(ended.errorCode ?? "") after \(ended.attempts)")
    }

    /// A node started on a folder whose files another job store lists (a cluster node without the cluster's
    /// `--store`, making a SQLite file in the shared folder; a lost or replaced database) refuses to start: its
    /// stray sweep removed every output the real store lists. The folder's own store starts, again and again; a
    /// folder without a mark is adopted by a store with jobs, not by one without while outputs are there.
    @Test(arguments: StoreBackend.allCases)
    func aStoreRefusesAFolderAnotherStoresFilesAreIn(backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let configuration: (inout JobQueue.Configuration) -> Void = { $0.workers = 0 }
        for _ in 0..<2 {
            let own = queue(fixture, configure: configuration)
            try own.start()
            own.stop(grace: 0)
        }
        let identity = try fixture.store.identity()
        #expect(try String(contentsOfFile: fixture.directory.storeIdentityPath, encoding: .utf8) == identity + "\n")
        let output = fixture.directory.outputs.appendingPathComponent(UUID().uuidString.lowercased())
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: output.appendingPathComponent("output.mp4"))
        let other = try StoreFixture(backend)
        #expect(try other.store.identity() != identity)
        let foreign = JobQueue(store: other.store, directory: fixture.directory, runner: TranscodeRunner(), configuration: {
            var value = JobQueue.Configuration()
            value.workers = 0
            return value
        }())
        let refused = #expect(throws: StoreError.self) { try foreign.start() }
        let otherIdentity = try other.store.identity()
        #expect(refused?.code == "data_directory_foreign" && refused?.message.contains(identity) == true
                && refused?.message.contains("write \(otherIdentity) into \(fixture.directory.storeIdentityPath)") == true,
                "\(String(describing: refused))")
        #expect(FileManager.default.fileExists(atPath: output.appendingPathComponent("output.mp4").path), "nothing removed")
        // Unmarked (as from an older version): a store without a job does not take a folder with outputs; one with jobs does.
        try FileManager.default.removeItem(atPath: fixture.directory.storeIdentityPath)
        #expect { try foreign.start() } throws: { ($0 as? StoreError)?.code == "data_directory_foreign" }
        #expect(FileManager.default.fileExists(atPath: output.appendingPathComponent("output.mp4").path))
        _ = try fixture.store.createJob(input: try fixture.upload(try Media.path(.standard)).id, settings: TranscodeSettings())
        let adopting = queue(fixture, configure: configuration)
        try adopting.start()
        adopting.stop(grace: 0)
        #expect(try String(contentsOfFile: fixture.directory.storeIdentityPath, encoding: .utf8) == identity + "\n")
        // Handed over as the message says: the other store's id written into the mark; what it does not list goes
        // (at its start with a store of its own; a shared store's nodes sweep a moment later, on the sweeper's
        // first round, which a stop may come before). The output again first: the adopting store's sweep took it.
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: output.appendingPathComponent("output.mp4"))
        try Data((otherIdentity + "\n").utf8).write(to: URL(fileURLWithPath: fixture.directory.storeIdentityPath))
        try foreign.start()
        foreign.stop(grace: 0)
        if !fixture.store.isShared {
            #expect(!FileManager.default.fileExists(atPath: output.appendingPathComponent("output.mp4").path),
                    "the output the new store does not list is removed")
        }
    }

    /// A node of a cluster started on an empty folder of its own (a volume not shared, a mount that failed) while the
    /// shared store lists jobs refuses to start: it adopted the folder, claimed every queued job and failed each
    /// for good, its input missing. A store of its own (SQLite) adopts such a folder as before.
    @Test(arguments: StoreBackend.allCases)
    func aClusterNodeOnAnEmptyFolderOfItsOwnDoesNotStart(backend: StoreBackend) throws {
        let fixture = try StoreFixture(backend)
        let job = try fixture.store.createJob(input: try fixture.upload(try Media.path(.standard)).id, settings: TranscodeSettings())
        let first = queue(fixture) { $0.workers = 0 }
        try first.start()
        first.stop(grace: 0)
        let empty = DataDirectory(path: try Media.scratch().appendingPathComponent("data").path)
        try empty.prepare()
        let store = try fixture.uri.map { try PostgresJobStore(uri: $0, root: empty.root.path) } ?? fixture.reopen()
        var configuration = JobQueue.Configuration()
        configuration.workers = store.isShared ? 1 : 0 // a worker would claim the job if the node started
        configuration.pollInterval = 0.1
        let node = JobQueue(store: store, directory: empty, runner: TranscodeRunner(), configuration: configuration)
        defer { node.stop(grace: 0) } // a start that should have been refused leaves no worker running
        if store.isShared {
            let refused = #expect(throws: StoreError.self) { try node.start() }
            #expect(refused?.code == "data_directory_not_shared" && refused?.message.contains("lists 1 job:") == true, "\(String(describing: refused))")
            #expect(try store.job(id: job.id)?.state == .queued, "the job is left for the nodes that share the folder")
            #expect(!FileManager.default.fileExists(atPath: empty.storeIdentityPath))
        } else {
            try node.start()
            #expect(FileManager.default.fileExists(atPath: empty.storeIdentityPath))
        }
    }

    /// With a store of its own, the partial uploads and fetches a process that died left go as the queue starts,
    /// before any worker can start a fetch of its own (named alike). The server swept them after the workers had
    /// started: a restart deleted the download of a requeued URL input under way, and its job failed.
    @Test func partialUploadsAndFetchesOfADeadProcessGoBeforeTheWorkersStart() throws {
        let fixture = try StoreFixture()
        try FileManager.default.createDirectory(at: fixture.directory.uploads, withIntermediateDirectories: true)
        let left = [DataDirectory.partialUploadName("0123abcd-4567"), DataDirectory.partialUploadName("fetch-\(UUID().uuidString.lowercased())")]
        for name in left { try Data("partial".utf8).write(to: fixture.directory.uploads.appendingPathComponent(name)) }
        let kept = try fixture.upload(try Media.path(.standard))
        let started = queue(fixture) { $0.workers = 0 }
        try started.start()
        started.stop(grace: 0)
        let names = Media.files(in: fixture.directory.uploads)
        #expect(names.allSatisfy { !left.contains($0) } && names.contains(URL(fileURLWithPath: kept.path).lastPathComponent), "\(names)")
    }

    /// With a store of its own, upload files no row points at go at start: a process that died between moving an
    /// upload's file into place and writing its row (or between deleting its row and its file) left it for good.
    /// Files a row points at, a resumable upload's bytes its completion moved there, and other names, stay.
    @Test func uploadFilesWithoutARowGoAtStart() throws {
        let fixture = try StoreFixture()
        let kept = try fixture.upload(try Media.path(.standard))
        let orphan = UUID().uuidString.lowercased()
        let left = [orphan, "\(orphan).3", "\(kept.id).2"]
        // A resumable upload whose completion died after moving its bytes into place: they are finished from there.
        let completing = UUID().uuidString.lowercased()
        try FileManager.default.createDirectory(at: fixture.directory.tus, withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: fixture.directory.tus.appendingPathComponent(completing + ".json"))
        for name in left + ["notes.txt", completing] { try Data("x".utf8).write(to: fixture.directory.uploads.appendingPathComponent(name)) }
        let started = queue(fixture) { $0.workers = 0 }
        try started.start()
        started.stop(grace: 0)
        let names = Media.files(in: fixture.directory.uploads)
        #expect(names == [kept.id, "notes.txt", completing].sorted(), "\(names)")
        #expect(FileManager.default.fileExists(atPath: kept.path))
    }

    @Test func aQueuedJobRunsToSuccessWithEventsInOrder() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.standard))
        let job = try fixture.store.createJob(input: upload.id, settings: try TranscodeSettings(json: .string("480p")))
        let queue = queue(fixture)
        let events = LockedValue<[String]>([])
        _ = queue.events.subscribe(job.id) { event in
            switch event {
            case .progress: events.withLock { if $0.last != "progress" { $0.append("progress") } }
            case .state(let job): events.withLock { $0.append(job.state.rawValue) }
            case .fetching: events.withLock { $0.append("fetching") }
            case .gone: events.withLock { $0.append("gone") }
            }
        }
        try queue.start()
        queue.jobQueued()
        #expect(try eventually { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 5)
        let done = try #require(try fixture.store.job(id: job.id))
        #expect(done.state == .succeeded, "\(done.errorCode ?? "") \(done.errorMessage ?? "")")
        #expect(done.progressTime == done.progressDuration && done.progressDuration > 3.9)
        let output = try #require(done.outputPath)
        #expect(output == fixture.directory.outputs.path + "/\(job.id)/output.mp4")
        #expect(fixture.outputFiles == [job.id], "the job's folder and nothing else")
        #expect(done.outputFiles == [OutputFile(path: "output.mp4", size: done.outputSize ?? -1, mimeType: "video/mp4")])
        let probe = try Probe.read(output)
        #expect(probe.video?.height == 360 && probe.audio?.codec_name == "aac")
        #expect(done.outputSize == (try FileManager.default.attributesOfItem(atPath: output)[.size] as? Int))
        #expect(done.outputTracks?.count == 2)
        #expect(done.framesEncoded == 120 && (done.transcodeSeconds ?? 0) > 0, "\(done.framesEncoded ?? -1) frames")
        #expect(events.withLock { $0 } == ["running", "progress", "succeeded"])
    }

    @Test func aBrokenInputFailsItsJobAndTheNextJobStillRuns() throws {
        let fixture = try StoreFixture()
        let broken = try fixture.upload(try Media.truncated(try Media.path(.tenSeconds), fraction: 0.5, into: try Media.scratch()))
        let good = try fixture.upload(try Media.path(.audioOnly))
        let bad = try fixture.store.createJob(input: broken.id, settings: TranscodeSettings(), priority: 1)
        let fine = try fixture.store.createJob(input: good.id, settings: TranscodeSettings())
        let queue = queue(fixture)
        try queue.start()
        #expect(try eventually { try fixture.store.job(id: fine.id)?.state.isTerminal == true })
        queue.stop(grace: 5)
        let failed = try #require(try fixture.store.job(id: bad.id))
        #expect(failed.state == .failed && failed.errorCode == "input_truncated")
        #expect(failed.errorMessage?.contains("cut short") == true)
        #expect(try fixture.store.job(id: fine.id)?.state == .succeeded)
        #expect(fixture.outputFiles == [fine.id])
    }

    /// A failure whose message holds a NUL (a child taken over by a hostile file can write one) is recorded, the NUL
    /// shown as U+FFFD: the stores refuse such text, and the worker tried the refused write until the server stopped,
    /// its job running all along. Both stores.
    @Test(arguments: [StoreBackend.sqlite, .postgres]) func aFailureWhoseMessageHoldsANulIsRecorded(_ backend: StoreBackend) throws {
        struct Failing: JobRunner {
            func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                     progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
                throw MediaError(code: "unsupported_codec", message: "before\u{0}after")
            }
        }
        let fixture = try StoreFixture(backend)
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, runner: Failing())
        try queue.start()
        defer { queue.stop(grace: 1) }
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .failed })
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.errorCode == "unsupported_codec" && failed.errorMessage == "before\u{FFFD}after", "\(failed.errorMessage ?? "")")
    }

    @Test func aVanishedInputFailsClearly() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        try FileManager.default.removeItem(atPath: upload.path)
        let queue = queue(fixture)
        try queue.start()
        #expect(try eventually { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 1)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "input_missing")
    }

    @Test func cancelingAQueuedJobIsImmediate() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture)
        let canceled = try queue.cancel(id: job.id)
        #expect(canceled.state == .canceled && canceled.finishedAt != nil)
        // Counted where the metrics read it (transcoderd_jobs_finished_total{result="canceled"}), as a running one is.
        #expect(queue.statistics.finished["canceled"] == 1, "\(queue.statistics.finished)")
        #expect { try queue.cancel(id: job.id) } throws: { ($0 as? StoreError)?.code == "invalid_transition" }
        #expect { try queue.cancel(id: "missing") } throws: { ($0 as? StoreError)?.code == "not_found" }
    }

    @Test func cancelingARunningJobStopsItWithinASecondAndRemovesItsOutput() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.long))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(video: .encode(VideoSettings(preset: "veryslow"))))
        let runner = TimedRunner(TranscodeRunner())
        let queue = queue(fixture, runner: runner)
        try queue.start()
        #expect(eventually { (queue.liveProgress(of: job.id)?.presentationTime ?? 0) > 0 })
        let asked = Date()
        let running = try queue.cancel(id: job.id)
        #expect(running.state == .running)
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state == .canceled })
        // From the cancellation to the transcode's stop: recording the end (an fsynced commit) is not part of it.
        let stopped = try #require(runner.ended.withLock { $0 })
        #expect(stopped >= asked, "the transcode was still running when the cancel was asked")
        // Within a second here; three for a busy machine, where x264 finishes its frames in flight as it is freed (at
        // veryslow a transcode that missed the cancel has about ten seconds of work left).
        #expect(stopped.timeIntervalSince(asked) < 3.0, "the transcode stopped \(stopped.timeIntervalSince(asked)) s after the cancel")
        queue.stop(grace: 1)
        #expect(fixture.outputFiles.isEmpty)
    }

    /// A cancel that comes while a crashed attempt's end is being recorded (its files removed first) is not lost:
    /// the job that end would send back to the queue is canceled, and the cancel answers with it canceled. Before,
    /// the cancel went to the attempt that had already ended, answered "running", and the job ran again.
    @Test func aCancelWhileACrashedAttemptEndsCancelsTheJobInsteadOfItsRetry() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let runner = CrashingWithFilesRunner()
        let queue = queue(fixture, runner: runner)
        try queue.start()
        try #require(runner.failing.wait(timeout: .now() + 30) == .success)
        try #require(runner.removalUnderWay(), "the removal was not caught under way")
        let answered = try queue.cancel(id: job.id)
        #expect(answered.state == .canceled, "the cancel answered \(answered.state)")
        usleep(500_000) // a retry would have started by now
        queue.stop(grace: 5)
        let final = try #require(try fixture.store.job(id: job.id))
        #expect(final.state == .canceled && runner.calls.withLock { $0 } == 1, "\(final.state), \(runner.calls.withLock { $0 }) attempts")
        #expect(fixture.outputFiles.isEmpty)
    }

    /// `jobQueued()` wakes a worker, not the watchdog: each job starts at once even though an idle worker would
    /// otherwise look at the store only every 30 seconds.
    @Test func aQueuedJobStartsAtOnceWhateverThePollInterval() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let runner = TimedRunner(FailingRunner())
        let queue = queue(fixture, runner: runner) { $0.pollInterval = 30 }
        try queue.start()
        usleep(100_000) // the worker and the watchdog are both waiting
        for round in 0..<8 {
            runner.started.withLock { $0 = nil }
            let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
            let queued = Date()
            queue.jobQueued()
            #expect(try eventually(5) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
            // From the signal to the job's start (its runner called); an idle worker would have waited up to 30 s.
            let started = try #require(runner.started.withLock { $0 })
            let waited = started.timeIntervalSince(queued)
            // Well under a second here: 3 s leaves a busy machine's fsynced claim its time, far from the 30 s poll.
            #expect(waited >= 0 && waited < 3, "job \(round) started \(waited) s after it was queued")
            #expect(try fixture.store.job(id: job.id)?.errorCode == "test_failure")
            usleep(UInt32(50_000 + round * 40_000)) // let the watchdog's one-second waits fall anywhere
        }
        queue.stop(grace: 1)
    }

    @Test func theWatchdogFailsAStalledJob() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, runner: StuckRunner()) { $0.stallTimeout = 1 }
        try queue.start()
        #expect(try eventually(10) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        queue.stop(grace: 1)
        let failed = try #require(try fixture.store.job(id: job.id))
        #expect(failed.state == .failed && failed.errorCode == "stalled")
    }

    /// A long check of a checkpoint before the transcode, or a long finish after it (the time does not move), is
    /// not a stall while its steps count up; the same step repeated is.
    @Test(arguments: [SlowStepsRunner.Phase.verifying, .finishing])
    func theWatchdogLetsStepsThatAdvanceRunPastTheStallTimeout(_ phase: SlowStepsRunner.Phase) throws {
        for advancing in [true, false] {
            let fixture = try StoreFixture()
            let upload = try fixture.upload(try Media.path(.audioOnly))
            let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
            let queue = queue(fixture, runner: SlowStepsRunner(phase: phase, seconds: 4.5, advancing: advancing)) { $0.stallTimeout = 2 }
            try queue.start()
            #expect(try eventually(20) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
            queue.stop(grace: 1)
            let ended = try #require(try fixture.store.job(id: job.id))
            if advancing {
                #expect(ended.state == .succeeded, "\(ended.errorCode ?? "")")
            } else {
                #expect(ended.state == .failed && ended.errorCode == "stalled")
            }
        }
    }

    /// A job whose sound takes far longer than its video (a still picture's seconds of video, three minutes of
    /// normalized sound: several seconds of work after the video's end, against a 3 s stall timeout) is not a stall
    /// while the sound advances: the video's time stood at its end while the sound's own pass caught up, nothing the
    /// watchdog counts moved, and the job failed as stalled.
    @Test func aJobWhoseSoundOutlastsItsVideoIsNotAStall() throws {
        let fixture = try StoreFixture()
        let input = try Media.scratch().appendingPathComponent("still.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=s=320x240:r=1:d=180", "-f", "lavfi", "-i", "sine=d=180",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let job = try fixture.store.createJob(input: try fixture.upload(input).id,
                                              settings: try TranscodeSettings.parse(Data(#"{"filters": {"audio": {"normalize": true}}}"#.utf8)))
        let queue = queue(fixture) { $0.stallTimeout = 3 }
        try queue.start()
        defer { queue.stop(grace: 1) }
        #expect(try eventually(180) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        let ended = try #require(try fixture.store.job(id: job.id))
        #expect(ended.state == .succeeded, "\(ended.state) \(ended.errorCode ?? "") \(ended.errorMessage ?? "")")
    }

    /// Recordings joined with `cat` declare the last part's length (here 2 s of 26): past it the time went on
    /// being reported as 2 s, and the watchdog failed the job as stalled, every time it was tried (a DVR's two
    /// halves failed a couple of minutes into the second). The job's own progress is what is checked: its time
    /// reaches the real end, its duration with it.
    @Test func anInputLongerThanItDeclaresIsNotAStall() throws {
        let fixture = try StoreFixture()
        let folder = try Media.scratch()
        var joined = Data()
        for (index, seconds) in [24, 2].enumerated() {
            let part = folder.appendingPathComponent("part\(index).ts").path
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=25:d=\(seconds)", "-c:v", "libx264", "-preset", "ultrafast",
                              "-pix_fmt", "yuv420p", "-f", "mpegts", part])
            joined.append(try Data(contentsOf: URL(fileURLWithPath: part)))
        }
        let input = folder.appendingPathComponent("joined.ts")
        try joined.write(to: input)
        let upload = try fixture.upload(input.path)
        #expect(upload.tracks.first { $0.mediaType == .video }.map { ($0.duration ?? 0) < 3 } == true, "it declares the last part's length: \(upload.tracks)")
        let job = try fixture.store.createJob(input: upload.id, settings: try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8)))
        let queue = queue(fixture)
        let seen = LockedValue<[TranscodeProgress]>([])
        let key = queue.events.subscribe(job.id) { event in
            if case .progress(let progress) = event { seen.withLock { $0.append(progress) } }
        }
        defer { queue.events.unsubscribe(job.id, key) }
        try queue.start()
        defer { queue.stop(grace: 1) }
        #expect(try eventually(180) { try fixture.store.job(id: job.id)?.state.isTerminal == true })
        let ended = try #require(try fixture.store.job(id: job.id))
        #expect(ended.state == .succeeded, "\(ended.state) \(ended.errorCode ?? "") \(ended.errorMessage ?? "")")
        let progress = seen.withLock { $0 }.filter { $0.finishing == nil }
        let latest = progress.map(\.presentationTime).max() ?? 0
        #expect(latest > 20, "the time went past the declared 2 s to \(latest) s")
        #expect(progress.allSatisfy { $0.presentationTime <= $0.duration + 0.001 }, "within its duration")
    }

    @Test func stoppingSendsRunningJobsBackToTheQueue() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture, runner: StuckRunner())
        try queue.start()
        #expect(try eventually { try fixture.store.job(id: job.id)?.state == .running })
        queue.stop(grace: 0.2)
        let requeued = try #require(try fixture.store.job(id: job.id))
        #expect(requeued.state == .queued && requeued.attempts == 1, "a clean stop is not a crash")
    }

    /// A stop that lands while a worker is between claiming a job and registering it still sends the job back:
    /// before, the job then ran unseen (never cancelled) and `stop` waited for its thread forever.
    @Test func stoppingRightAfterStartNeverHangs() throws {
        for round in 0..<20 {
            let fixture = try StoreFixture()
            let upload = try fixture.upload(try Media.path(.audioOnly))
            let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
            let queue = queue(fixture, runner: StuckRunner())
            try queue.start()
            usleep(UInt32(round * 50)) // land anywhere in the worker's first claim
            let stopped = DispatchSemaphore(value: 0)
            Thread { queue.stop(grace: 0); stopped.signal() }.start()
            let timedOut = stopped.wait(timeout: .now() + 10) == .timedOut
            #expect(!timedOut, "round \(round): stop did not return")
            if timedOut { return }
            let after = try #require(try fixture.store.job(id: job.id))
            #expect(after.state == .queued, "round \(round): \(after.state)")
        }
    }

    @Test func outputFoldersAreRemovedWholeAndStrayOnesAtStart() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        // A succeeded ladder job: its folder with files in sub-folders.
        let done = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(container: .hls))
        let folder = fixture.directory.outputDirectory(for: done)
        try FileManager.default.createDirectory(atPath: folder + "/audio", withIntermediateDirectories: true)
        try Data("#EXTM3U\n".utf8).write(to: URL(fileURLWithPath: folder + "/master.m3u8"))
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/audio/segment_00001.m4s"))
        let lease = try #require(try fixture.store.claimNext(worker: "test", leaseSeconds: 20)?.currentLease)
        try #require(lease.jobID == done.id)
        _ = try fixture.store.markSucceeded(lease, outputPath: folder + "/master.m3u8", size: 9, tracks: [],
                                       files: [OutputFile(path: "master.m3u8", size: 8, mimeType: "application/vnd.apple.mpegurl"),
                                               OutputFile(path: "audio/segment_00001.m4s", size: 1, mimeType: "audio/mp4")],
                                       duration: 1, framesEncoded: 0, seconds: 0.1)
        #expect(try fixture.store.job(id: done.id)?.outputRoot == folder)
        // What a killed process leaves: a partial folder of a job that will run again, and a folder of a job that
        // is queued (its output from an attempt that did not finish).
        let waiting = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let partial = fixture.directory.outputs.path + "/\(waiting.id).1a2b3c4d.partial"
        try FileManager.default.createDirectory(atPath: partial + "/360p", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: partial + "/360p/segment_00001.m4s"))
        try FileManager.default.createDirectory(atPath: fixture.directory.outputDirectory(for: waiting), withIntermediateDirectories: true)
        let queue = queue(fixture) { $0.workers = 0 }
        _ = try queue.start()
        #expect(fixture.outputFiles == [done.id], "only the succeeded job's folder stays: \(fixture.outputFiles)")
        #expect(FileManager.default.fileExists(atPath: folder + "/audio/segment_00001.m4s"))
        try queue.sweep(olderThan: Date().timeIntervalSince1970 + 1)
        #expect(try fixture.store.job(id: done.id) == nil)
        #expect(fixture.outputFiles.isEmpty, "the whole folder went with the job: \(fixture.outputFiles)")
        queue.stop(grace: 1)
    }

    /// More jobs ended since the last sweep than a batch holds: the sweep goes on batch after batch (it used to
    /// delete one batch a minute, which a busy server outpaces for good).
    @Test func retentionDeletesPastOneBatch() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        var ended: [String] = []
        for _ in 0..<5 {
            let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
            let lease = try #require(try fixture.store.claimNext(worker: "test", leaseSeconds: 20)?.currentLease)
            _ = try fixture.store.markFailed(lease, code: "test_failure", message: "Fails on purpose.")
            ended.append(job.id)
        }
        let waiting = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        // Unused uploads too, batch after batch: all at once, 200,000 held the store for seconds.
        var unused: [Upload] = []
        for _ in 0..<5 { unused.append(try fixture.upload(try Media.path(.audioOnly))) }
        let queue = queue(fixture) { $0.workers = 0 }
        try queue.sweep(olderThan: Date().timeIntervalSince1970 + 1, batch: 2)
        for id in ended { #expect(try fixture.store.job(id: id) == nil, "job \(id) is still there") }
        #expect(try fixture.store.job(id: waiting.id) != nil, "a queued job is not retention's")
        for upload in unused {
            #expect(try fixture.store.upload(id: upload.id) == nil && !FileManager.default.fileExists(atPath: upload.path), "upload \(upload.id) is still there")
        }
        #expect(try fixture.store.upload(id: upload.id) != nil, "still used by the queued job")
    }

    @Test func retentionDeletesFinishedJobsOnly() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.audioOnly))
        let spare = try fixture.upload(try Media.path(.audioOnly))
        let done = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let output = fixture.directory.outputs.appendingPathComponent("\(done.id).mp4").path
        try Data("x".utf8).write(to: URL(fileURLWithPath: output))
        let lease = try #require(try fixture.store.claimNext(worker: "test", leaseSeconds: 20)?.currentLease)
        try #require(lease.jobID == done.id)
        _ = try fixture.store.markSucceeded(lease, outputPath: output, size: 1, tracks: [], files: nil, duration: 1,
                                       framesEncoded: 30, seconds: 0.5)
        let waiting = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let queue = queue(fixture)
        try queue.sweep(olderThan: Date().timeIntervalSince1970 + 1)
        #expect(try fixture.store.job(id: done.id) == nil)
        #expect(!FileManager.default.fileExists(atPath: output))
        #expect(try fixture.store.job(id: waiting.id)?.state == .queued)
        #expect(try fixture.store.upload(id: upload.id) != nil, "still used by the queued job")
        #expect(try fixture.store.upload(id: spare.id) == nil)
        #expect(!FileManager.default.fileExists(atPath: spare.path))
    }

    /// Retention deletes a row before its file, and one item it cannot delete is logged and passed over.
    @Test func retentionPassesOverWhatItCannotDelete() throws {
        let fixture = try StoreFixture()
        let stuck = try fixture.upload(try Media.path(.audioOnly))
        let spare = try fixture.upload(try Media.path(.audioOnly))
        try Database(path: fixture.directory.databasePath).execute("""
            CREATE TRIGGER keep_one BEFORE DELETE ON uploads WHEN OLD.id = '\(stuck.id)'
            BEGIN SELECT RAISE(ABORT, 'the row is locked (test)'); END;
            """)
        let lines = LockedValue<[String]>([])
        let queue = JobQueue(store: fixture.store, directory: fixture.directory, runner: TranscodeRunner(),
                             logger: Logger(format: .json, minimumLevel: .debug) { line in lines.withLock { $0.append(line) } })
        try queue.sweep(olderThan: Date().timeIntervalSince1970 + 1)
        #expect(lines.withLock { $0 }.contains { $0.contains("could not delete an upload") && $0.contains(stuck.id) },
                "a refusal that is not a job using the upload is logged with its id")
        #expect(try fixture.store.upload(id: stuck.id) != nil)
        #expect(FileManager.default.fileExists(atPath: stuck.path), "its row stayed, so its file stays")
        #expect(try fixture.store.upload(id: spare.id) == nil && !FileManager.default.fileExists(atPath: spare.path),
                "the sweep went on past it")
    }

    @Test func aDirectoryServesOneProcessAtATime() throws {
        let fixture = try StoreFixture()
        let lock = try fixture.directory.lock()
        #expect { try fixture.directory.lock() } throws: { ($0 as? StoreError)?.code == "data_directory_locked" }
        withExtendedLifetime(lock) {}
    }
}
