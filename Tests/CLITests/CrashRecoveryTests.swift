import Foundation
import Jobs
import Pipeline
import Testing
import TestSupport

/// A worker process killed with SIGKILL in the middle of a transcode loses nothing.
@Suite struct CrashRecoveryTests {
    @Test func aKilledWorkerProcessLeavesAJobThatRunsAgainAndSucceeds() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.long))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings(video: .encode(VideoSettings(preset: "medium"))))

        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: Binary.path)
        worker.arguments = ["work", "--data", fixture.directory.root.path]
        worker.standardOutput = FileHandle.nullDevice
        worker.standardError = FileHandle.nullDevice
        try Shell.launch(worker)
        // Mid-transcode: running, with progress saved and a partial file being written.
        let midway = try eventually(60) {
            let current = try fixture.store.job(id: job.id)
            return current?.state == .running && (current?.progressTime ?? 0) > 0.5
        }
        #expect(midway)
        kill(worker.processIdentifier, SIGKILL)
        worker.waitUntilExit()
        #expect(worker.terminationReason == .uncaughtSignal)
        #expect(fixture.outputFiles.contains { $0.hasSuffix(".partial") }, "the killed process left a partial file")

        let reopened = try SQLiteJobStore(path: fixture.directory.databasePath)
        #expect(try reopened.integrityCheck() == "ok")
        let rerun = try Shell.run(Binary.path, ["work", "--data", fixture.directory.root.path, "--exit-when-idle"])
        #expect(rerun.status == 0, "\(rerun.stderr)")
        let done = try #require(try reopened.job(id: job.id))
        #expect(done.state == .succeeded, "\(done.errorCode ?? "") \(done.errorMessage ?? "")")
        #expect(done.attempts == 2)
        #expect(fixture.outputFiles == ["\(job.id).2"], "the second claim's folder, no partial or duplicate output: \(fixture.outputFiles)")
        #expect(done.outputPath == fixture.directory.outputs.path + "/\(job.id).2/output.mp4")
        let probe = try Probe.read(try #require(done.outputPath))
        #expect(abs(probe.format.durationSeconds - 8) < 0.1)
        #expect(try reopened.integrityCheck() == "ok")
    }
}
