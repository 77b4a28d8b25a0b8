import Foundation
import Glibc
import Locks
@testable import Pipeline
import Testing
import TestSupport

/// The audio pass of a checkpointed transcode, on its own thread.
@Suite struct AudioPassThreadTests {
    /// Told to stop (the video pass failed), the pass stops at once even while its reader is on its way through the
    /// video's bytes after the sound has ended: it looked at its stop only after each audio sample, so the failure
    /// waited for a whole read of the input (on slow storage long enough for the watchdog to call the job stalled).
    /// The input comes through a pipe a little at a time, as slow storage gives it; the session is not canceled.
    @Test func aStopEndsThePassAtOnceWhileItsReaderIsInTheVideo() throws {
        // A write to the pipe after its reader has gone fails (EPIPE) rather than end the test process.
        _ = signal(SIGPIPE, SIG_IGN)
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("short-sound.ts").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=30:d=30", "-f", "lavfi", "-i", "sine=d=1",
                          "-c:v", "libx264", "-preset", "ultrafast", "-b:v", "4M", "-c:a", "aac", "-f", "mpegts", source])
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let pipe = folder.appendingPathComponent("input").path
        try #require(mkfifo(pipe, 0o600) == 0)
        // About 1.3 MB a second: the file's 15 MB take more than ten seconds.
        let done = LockedValue(false), written = LockedValue(0), finished = DispatchSemaphore(value: 0)
        NamedThread.start("slow-writer") {
            defer { finished.signal() }
            let descriptor = open(pipe, O_WRONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return }
            defer { close(descriptor) }
            _ = fcntl(descriptor, F_SETFL, O_NONBLOCK)
            var offset = 0
            while offset < bytes.count && !done.withLock({ $0 }) {
                let count = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + offset, min(65536, bytes.count - offset)) }
                if count > 0 {
                    offset += count
                    written.withLock { $0 = offset }
                }
                usleep(50_000)
            }
        }
        defer {
            done.withLock { $0 = true }
            finished.wait() // before the reader's end of the pipe closes: no write meets a pipe without a reader
        }
        let session = CancellationToken()
        let token = AudioPassThread.token(following: session)
        let reader = try MediaReader(path: pipe, cancellation: token)
        let checkpoint = try Checkpoint(path: folder.appendingPathComponent("checkpoint").path, fingerprint: "test", segmentSeconds: 2)
        let output = CheckpointOutput(checkpoint: checkpoint, globalHeader: true)
        let plan = try TranscodePlan(reader: reader, output: output, settings: try TranscodeSettings.parse(Data("{}".utf8)),
                                     limits: MediaLimits(), directory: nil, pass: .audio)
        let pass = AudioPassThread(reader: reader, output: output, plan: plan, limits: MediaLimits(), pace: 1, cancellation: token)
        pass.start()
        // Two fifths of the file given: the reader (as quick as the pipe) is long past the sound's first second, in
        // the video's bytes, with seconds of them still to come.
        #expect(eventually(60) { written.withLock { $0 } >= bytes.count * 2 / 5 }, "the pipe was not read")
        let asked = Date()
        pass.stop()
        let took = Date().timeIntervalSince(asked)
        #expect(took < 2, "the pass stopped \(took) s after it was told")
        #expect(!session.isCanceled, "the session's own token is left alone")
        #expect(pass.failure?.code == "canceled")
        withExtendedLifetime(reader) {}
    }
}
