import Isolation
import Testing
@testable import transcoderd

/// What a job's child tells Landlock it may touch, from the request the server sends it: the server's stage for the
/// output (the folder holding the output's path), never `outputs/` itself, where every job's folder is.
@Suite struct RunJobConfinementTests {
    @Test func aJobsChildMayWriteOnlyInItsStageAndItsCheckpoint() {
        var request = JobRequest(kind: .transcode, input: "/d/uploads/u", output: "/d/outputs/j.1a2b.partial/out", settings: .init(),
                                 watermark: "/d/uploads/w")
        request.checkpoint = "/d/checkpoints/j.1"
        let files = RunJobCommand.confinement(of: request)
        #expect(files.write == ["/d/outputs/j.1a2b.partial", "/d/checkpoints/j.1"], "\(files.write)")
        #expect(files.read == ["/d/uploads/u", "/d/uploads/w"], "\(files.read)")
        let probe = RunJobCommand.confinement(of: JobRequest(kind: .probe, input: "/d/uploads/u"))
        #expect(probe.write.isEmpty && probe.read == ["/d/uploads/u"])
    }
}
