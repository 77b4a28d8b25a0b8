import Foundation
import Testing
import TestSupport

/// A job interrupted part-way (the server SIGKILLed, or shut down with SIGTERM) resumes from its last durable
/// checkpoint segment when the server starts again, and its output matches the same job run straight through:
/// same frames, same ends, no drop in quality at the seam, no click in the audio.
@Suite(.serialized) struct CheckpointResumeTests {
    static let settings = #"{"video": {"preset": "veryfast"}, "audio": {"bitRate": 128000}}"#

    /// Submits a job on `upload` with the test's settings (or `settings`); returns its id.
    private func submit(_ server: TestServer, upload: String, settings: String = settings) throws -> String {
        let job = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                               #"{"input": "\#(upload)", "settings": \#(settings)}"#])
        return try #require(job.object["id"] as? String, "\(job.object)")
    }

    /// Waits until the job's progress reaches `fraction` (it must still be running then).
    private func waitForProgress(_ server: TestServer, job: String, fraction: Double) throws -> Double {
        var reached = 0.0
        let ok = try eventually(120) {
            let object = try server.json("/v1/jobs/\(job)").object
            reached = (object["progress"] as? [String: Any])?["fraction"] as? Double ?? 0
            return reached >= fraction || object["state"] as? String != "queued" && object["state"] as? String != "running"
        }
        #expect(ok && reached >= fraction && reached < 1, "the job got to \(reached) while running")
        return reached
    }

    /// Watches a resumed job until it ends; returns the final job and the `resumedFrom` it showed while running.
    private func watchResumed(_ server: TestServer, job: String) throws -> (job: [String: Any], resumedFrom: Double?) {
        var resumedFrom: Double?
        var object: [String: Any] = [:]
        let ended = try eventually(180) {
            object = try server.json("/v1/jobs/\(job)").object
            if let seconds = (object["progress"] as? [String: Any])?["resumedFrom"] as? Double { resumedFrom = seconds }
            return ["succeeded", "failed", "canceled"].contains(object["state"] as? String ?? "")
        }
        #expect(ended && object["state"] as? String == "succeeded", "\(object)")
        return (object, resumedFrom)
    }

    /// Checkpoint segment files under the data directory's `checkpoints/`.
    private func segments(in data: URL) -> [String] {
        let root = data.appendingPathComponent("checkpoints")
        let walker = FileManager.default.enumerator(atPath: root.path)
        return (walker?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".pkt") && $0.contains("/video_") }
    }

    /// Where the finished checkpoint segments end, as the job's manifest says.
    private func checkpointEnd(in data: URL) throws -> Double {
        let root = data.appendingPathComponent("checkpoints")
        let folder = try #require(Media.files(in: root).first)
        let segments = try CheckpointRecords.videoSegments(root.appendingPathComponent(folder).path)
        return try #require(segments.last?["end"] as? Double, "a finished segment: \(segments)")
    }

    /// Video frames at 0, 1/30, 2/30 ... s: none lost, none twice.
    private func expectEveryFrameOnce(_ path: String, count: Int) throws {
        let times = try SeamCheck.videoPackets(path).map(\.time)
        #expect(times.count == count, "\(times.count) frames")
        let misplaced = times.enumerated().filter { abs($0.element - Double($0.offset) / 30) > 0.002 }
        #expect(misplaced.isEmpty, "frames off the 30 fps grid: \(misplaced.prefix(5))")
    }

    private func download(_ server: TestServer, job: String, name: String) throws -> String {
        let path = try Media.scratch().appendingPathComponent(name).path
        #expect(try server.curl("/v1/jobs/\(job)/output", ["-o", path]).status == 200)
        return path
    }

    /// Every check the issue asks of a resumed output against the straight-through one.
    private func compare(resumed: String, straight: String, source: String, seams: [Double]) throws {
        try Media.ffmpeg(["-xerror", "-i", resumed, "-f", "null", "-"])
        let resumedPackets = try SeamCheck.videoPackets(resumed), straightPackets = try SeamCheck.videoPackets(straight)
        #expect(resumedPackets.count == straightPackets.count, "same frame count: \(resumedPackets.count) and \(straightPackets.count)")
        try expectEveryFrameOnce(resumed, count: 360)
        let frame = 1.0 / 30
        let videoEnds = (try SeamCheck.end(resumed, "v"), try SeamCheck.end(straight, "v"))
        #expect(abs(videoEnds.0 - videoEnds.1) <= frame + 0.001, "video ends within a frame: \(videoEnds)")
        // Key frames no further apart than the setting (2 s, the default), across the seam too.
        let keys = resumedPackets.filter(\.key).map(\.time)
        let widest = zip(keys, keys.dropFirst()).map { $1 - $0 }.max() ?? 0
        #expect(keys.first == 0 && widest <= 2 + 0.001, "key frames at most 2 s apart: \(keys)")
        // Audio and video end as aligned as in the straight run, within one AAC frame.
        let audioEnds = (try SeamCheck.end(resumed, "a"), try SeamCheck.end(straight, "a"))
        let skew = ((audioEnds.0 - videoEnds.0) - (audioEnds.1 - videoEnds.1)).magnitude
        #expect(skew <= 1024.0 / 48000 + 0.0005, "audio/video alignment at the end differs by \(skew) s")
        // No seam in the picture: PSNR of the 10 frames on each side within 0.5 dB of the straight run's.
        let psnrResumed = try SeamCheck.psnr(resumed, source: source), psnrStraight = try SeamCheck.psnr(straight, source: source)
        #expect(psnrResumed.count == psnrStraight.count && !psnrResumed.isEmpty)
        for seam in seams {
            let index = Int((seam * 30).rounded())
            for frame in max(0, index - 10)..<min(psnrResumed.count, psnrStraight.count, index + 10) {
                let difference = abs(psnrResumed[frame] - psnrStraight[frame])
                #expect(difference <= 0.5, "frame \(frame) by the seam at \(seam) s: \(psnrResumed[frame]) dB against \(psnrStraight[frame]) dB")
            }
        }
        // The very same audio packets as the straight run.
        #expect(try SeamCheck.audioDigest(resumed) == SeamCheck.audioDigest(straight), "the audio packets are the same")
        // No click: the largest sample step by each seam is no larger than anywhere in the source's tone.
        let samples = try SeamCheck.samples(resumed, rate: 48000)
        let elsewhere = SeamCheck.largestStep(try SeamCheck.samples(source, rate: 48000), rate: 48000, in: 1.0...3.0)
        #expect(elsewhere > 0)
        for seam in seams {
            let near = SeamCheck.largestStep(samples, rate: 48000, in: (seam - 0.05)...(seam + 0.05))
            #expect(Double(near) <= Double(elsewhere) * 1.05, "audio step by the seam at \(seam) s: \(near), elsewhere \(elsewhere)")
        }
    }

    @Test func killedAtSeventyPercentResumesAndMatchesTheStraightRun() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let data = folder.appendingPathComponent("data")
        var server = try TestServer(["--workers", "1"], data: data)
        let upload = try #require(try server.json("/v1/uploads/", ["-T", source]).object["id"] as? String)
        let interrupted = try submit(server, upload: upload)
        _ = try waitForProgress(server, job: interrupted, fraction: 0.7)
        let checkpoints = data.appendingPathComponent("checkpoints")
        #expect(!segments(in: data).isEmpty, "checkpoint segments are on disk while the job runs")
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()
        usleep(300_000) // the job's child goes with its parent
        let saved = try checkpointEnd(in: data)

        server = try TestServer(["--workers", "1"], data: data)
        let (resumedJob, resumedFrom) = try watchResumed(server, job: interrupted)
        let seam = try #require(resumedFrom, "the running job showed resumedFrom")
        #expect(abs(seam - saved) < 0.001 && seam >= 8 - 0.001, "it resumed from the checkpoint's end, \(saved) s: \(seam) s")
        #expect(resumedJob["attempts"] as? Int == 2)
        #expect(server.log.contains("job resumed from its checkpoint"))
        // The worker removes it just after it records the end, so a poll can see the end first.
        #expect(eventually(10) { Media.files(in: checkpoints).isEmpty },
                "the checkpoint is removed once the job has ended: \(Media.files(in: checkpoints))")

        let straight = try submit(server, upload: upload)
        let (straightJob, straightResumed) = try watchResumed(server, job: straight)
        #expect(straightResumed == nil && straightJob["attempts"] as? Int == 1)
        try compare(resumed: try download(server, job: interrupted, name: "resumed.mp4"),
                    straight: try download(server, job: straight, name: "straight.mp4"), source: source, seams: [seam])
        _ = server.stop()
    }

    /// With thumbnails, a storyboard and a poster too: the job's child takes them into the checkpoint, and the
    /// resumed job's output lists every one.
    @Test func shutdownWithSIGTERMResumesAfterRestart() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let data = folder.appendingPathComponent("data")
        var server = try TestServer(["--workers", "1", "--shutdown-grace", "0"], data: data)
        let upload = try #require(try server.json("/v1/uploads/", ["-T", source]).object["id"] as? String)
        let settings = #"{"video": {"preset": "veryfast"}, "audio": {"bitRate": 128000}, "thumbnails": {"interval": 2, "storyboard": true, "poster": 0.5}}"#
        let job = try submit(server, upload: upload, settings: settings)
        _ = try waitForProgress(server, job: job, fraction: 0.6)
        #expect(server.stop() == 0, "a clean shutdown")
        #expect(segments(in: data).contains { $0.hasSuffix("video_00001.pkt") }, "the checkpoint outlives the shutdown")
        let checkpointFiles = (FileManager.default.enumerator(atPath: data.appendingPathComponent("checkpoints").path)?.allObjects as? [String]) ?? []
        #expect(checkpointFiles.contains { $0.hasSuffix("stills/thumbnails/00001.jpg") }, "the job's child took pictures into the checkpoint")
        let saved = try checkpointEnd(in: data)

        server = try TestServer(["--workers", "1"], data: data)
        let (finished, resumedFrom) = try watchResumed(server, job: job)
        let seam = try #require(resumedFrom, "the running job showed resumedFrom")
        #expect(abs(seam - saved) < 0.001, "it resumed from the checkpoint's end, \(saved) s: \(seam) s")
        let output = try download(server, job: job, name: "resumed.mp4")
        try Media.ffmpeg(["-xerror", "-i", output, "-f", "null", "-"])
        try expectEveryFrameOnce(output, count: 360)
        let files = ((finished["output"] as? [String: Any])?["files"] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String }
        let pictures = (1...6).map { String(format: "thumbnails/%05d.jpg", $0) } + ["poster.jpg", "storyboard.jpg", "storyboard.vtt"]
        #expect(Set(pictures).isSubset(of: Set(files)) && files.filter { $0.hasPrefix("thumbnails/") }.count == 6, "\(files)")
        let cues = try server.curl("/v1/jobs/\(job)/output/storyboard.vtt")
        // The last tile's cue ends with the output file (its sound, a few ms past the last picture, included).
        let length = try Probe.read(output).format.durationSeconds
        let end = cues.body.components(separatedBy: "\n").last { $0.contains(" --> ") }?.components(separatedBy: " --> ").last
            .map { $0.split(separator: ":").reduce(0.0) { $0 * 60 + (Double($1) ?? .nan) } }
        #expect(cues.status == 200 && cues.body.contains("00:00:10.000 --> ") && end.map { abs($0 - length) < 0.002 } == true,
                "the last tile's cue ends with the output (\(length) s): \(cues.body)")
        #expect(eventually(10) { segments(in: data).isEmpty }, "the checkpoint went with the job's end")
        _ = server.stop()
    }
}
