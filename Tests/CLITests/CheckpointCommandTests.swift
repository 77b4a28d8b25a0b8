import Foundation
import Testing
import TestSupport

/// `transcode --checkpoint DIR`: an interrupted transcode continues from its checkpoint, and a checkpoint that is
/// damaged, cut short or made with other settings is never used as it is: the damaged part is made again.
@Suite struct CheckpointCommandTests {
    static let settings = #"{"video": {"preset": "veryfast"}}"#

    /// Runs a checkpointed transcode and SIGKILLs it once its progress passes `fraction`.
    private func interrupted(_ source: String, checkpoint: String, fraction: Double, settings: String = settings) throws {
        let folder = try Media.scratch()
        let progress = folder.appendingPathComponent("progress.jsonl")
        _ = FileManager.default.createFile(atPath: progress.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binary.path)
        process.arguments = ["transcode", source, folder.appendingPathComponent("killed.mp4").path, "--settings", settings,
                             "--checkpoint", checkpoint, "--progress", "json"]
        process.standardOutput = try FileHandle(forWritingTo: progress)
        process.standardError = FileHandle.nullDevice
        try Shell.launch(process)
        var reached = 0.0
        let got = eventually(120) {
            let lines = ((try? String(contentsOf: progress, encoding: .utf8)) ?? "").split(separator: "\n")
            for line in lines.suffix(3) {
                if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                   let value = object["fraction"] as? Double { reached = max(reached, value) }
            }
            return reached >= fraction || !process.isRunning
        }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(got && reached >= fraction && process.terminationReason == .uncaughtSignal, "killed while running, at \(reached)")
    }

    /// Runs a checkpointed transcode to the end; returns its result JSON.
    private func complete(_ source: String, output: String, checkpoint: String, settings: String = settings) throws -> [String: Any] {
        let run = try Shell.run(Binary.path, ["transcode", source, output, "--settings", settings, "--checkpoint", checkpoint,
                                              "--progress", "none"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: checkpoint), "the checkpoint is removed on success")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    private func segmentEnds(_ checkpoint: String) throws -> [Double] {
        try CheckpointRecords.videoSegments(checkpoint).compactMap { $0["end"] as? Double }
    }

    @Test func aDamagedSegmentIsMadeAgainNeverAssembled() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let straight = folder.appendingPathComponent("straight.mp4").path
        #expect(try complete(source, output: straight, checkpoint: folder.appendingPathComponent("straight-checkpoint").path)["resumedFrom"] == nil)
        // Checkpointed or not, the same frames at the same times and the very same audio packets: the audio pass
        // places and encodes the sound as the single pass does.
        let plain = folder.appendingPathComponent("plain.mp4").path
        let run = try Shell.run(Binary.path, ["transcode", source, plain, "--settings", Self.settings, "--progress", "none"])
        #expect(run.status == 0, "\(run.stderr)")
        let straightTimes = try SeamCheck.videoPackets(straight).map(\.time)
        let plainTimes = try SeamCheck.videoPackets(plain).map(\.time)
        #expect(straightTimes.count == 360 && plainTimes == straightTimes)
        #expect(try SeamCheck.audioDigest(plain) == SeamCheck.audioDigest(straight), "the audio packets are the same")

        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.75)
        let ends = try segmentEnds(checkpoint)
        #expect(ends.count >= 2, "two segments were finished: \(ends)")
        // One byte of the second segment's data changes; its size does not.
        let damaged = checkpoint + "/video_00002.pkt"
        let handle = try #require(FileHandle(forUpdatingAtPath: damaged))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size / 2)
        let byte = try handle.read(upToCount: 1) ?? Data([0])
        try handle.seek(toOffset: size / 2)
        handle.write(Data([byte[0] ^ 0x55]))
        try handle.close()

        let output = folder.appendingPathComponent("resumed.mp4").path
        let result = try complete(source, output: output, checkpoint: checkpoint)
        let resumedFrom = try #require(result["resumedFrom"] as? Double, "\(result)")
        #expect(abs(resumedFrom - ends[0]) < 0.001, "the damaged segment and those after it are made again: resumed from \(resumedFrom), first segment ends at \(ends[0])")
        try Media.ffmpeg(["-xerror", "-i", output, "-f", "null", "-"])
        #expect(try SeamCheck.videoPackets(output).map(\.time) == straightTimes)
        // The damaged bytes are not in the output: every frame is as good as the straight run's.
        let psnr = try SeamCheck.psnr(output, source: source), reference = try SeamCheck.psnr(straight, source: source)
        #expect(psnr.count == 360 && reference.count == 360)
        let worst = try #require(zip(psnr, reference).map { $1 - $0 }.max())
        #expect(worst <= 0.5, "no frame is worse than the straight run's by more than 0.5 dB (worst \(worst))")
    }

    @Test func aCutShortFirstSegmentStartsOver() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.5)
        #expect(try segmentEnds(checkpoint).count >= 1)
        let first = checkpoint + "/video_00001.pkt"
        let size = try #require(try FileManager.default.attributesOfItem(atPath: first)[.size] as? Int)
        #expect(truncate(first, off_t(size / 2)) == 0)

        let output = folder.appendingPathComponent("resumed.mp4").path
        let result = try complete(source, output: output, checkpoint: checkpoint)
        #expect(result["resumedFrom"] == nil, "nothing usable was left: \(result)")
        try Media.ffmpeg(["-xerror", "-i", output, "-f", "null", "-"])
        #expect(try SeamCheck.videoPackets(output).count == 360)
    }

    @Test func aCheckpointMadeWithOtherSettingsIsNotUsed() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.5)
        #expect(try segmentEnds(checkpoint).count >= 1)

        // Only the audio differs: a fingerprint that missed it would reuse the video and the old audio.
        let output = folder.appendingPathComponent("other.mp4").path
        let other = #"{"video": {"preset": "veryfast"}, "audio": {"bitRate": 64000}}"#
        let result = try complete(source, output: output, checkpoint: checkpoint, settings: other)
        #expect(result["resumedFrom"] == nil, "\(result)")
        let fresh = folder.appendingPathComponent("fresh.mp4").path
        let run = try Shell.run(Binary.path, ["transcode", source, fresh, "--settings", other, "--progress", "none"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try SeamCheck.audioDigest(output) == SeamCheck.audioDigest(fresh), "the audio is the new settings'")
        #expect(try SeamCheck.videoPackets(output).count == 360)
    }

    /// The same input reached by another path (a link to its folder, as another node mounts shared storage, or
    /// `./in.mp4` for `in.mp4`) resumes: the path as typed was in the fingerprint, and it started over.
    @Test func theSameInputByAnotherPathResumes() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 640, height: 360, seconds: 8, into: folder)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.5)
        #expect(try segmentEnds(checkpoint).count >= 1)
        let mount = folder.appendingPathComponent("mounted-elsewhere").path
        try FileManager.default.createSymbolicLink(atPath: mount, withDestinationPath: folder.path)
        let name = URL(fileURLWithPath: source).lastPathComponent
        let result = try complete(mount + "/./" + name, output: folder.appendingPathComponent("out.mp4").path, checkpoint: checkpoint)
        #expect(result["resumedFrom"] is Double, "\(result)")
    }

    /// Run again after a crash, a run from a checkpoint removes what the runs killed on the way left beside its
    /// output (`<output>.<hex>.partial`, a file or a folder): each crash left one more, a film's nearly its whole
    /// size. Names of another shape stay.
    @Test func aResumedRunRemovesWhatKilledRunsLeftBesideTheOutput() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 640, height: 360, seconds: 8, into: folder)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.5)
        let output = folder.appendingPathComponent("out.mp4").path
        try Data(repeating: 1, count: 1000).write(to: URL(fileURLWithPath: output + ".9f3a01c2.partial"))
        try FileManager.default.createDirectory(atPath: output + ".7b.partial/sub", withIntermediateDirectories: true)
        for kept in [output + ".notes.partial", folder.appendingPathComponent("other.mp4.9f3a01c2.partial").path] {
            try Data("keep".utf8).write(to: URL(fileURLWithPath: kept))
        }
        let result = try complete(source, output: output, checkpoint: checkpoint)
        #expect(result["resumedFrom"] is Double, "\(result)")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".partial") }.sorted()
        #expect(left == ["other.mp4.9f3a01c2.partial", "out.mp4.notes.partial"], "\(left)")
    }

    /// A second run on a checkpoint folder another run is using stops at once: both wrote the same segment files,
    /// journal lines and manifest into each other's.
    @Test func aCheckpointInUseIsRefused() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 640, height: 360, seconds: 8, into: folder)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        let progress = folder.appendingPathComponent("progress.jsonl")
        _ = FileManager.default.createFile(atPath: progress.path, contents: nil)
        let first = Process()
        first.executableURL = URL(fileURLWithPath: Binary.path)
        first.arguments = ["transcode", source, folder.appendingPathComponent("first.mp4").path, "--settings", Self.settings,
                           "--checkpoint", checkpoint, "--progress", "json"]
        first.standardOutput = try FileHandle(forWritingTo: progress)
        first.standardError = FileHandle.nullDevice
        try Shell.launch(first)
        defer {
            if first.isRunning {
                kill(first.processIdentifier, SIGKILL)
                kill(first.processIdentifier, SIGCONT)
                first.waitUntilExit()
            }
        }
        let started = eventually(60) { ((try? String(contentsOf: progress, encoding: .utf8)) ?? "").contains("fraction") || !first.isRunning }
        // Held still while the second one tries, however fast this machine is.
        kill(first.processIdentifier, SIGSTOP)
        try #require(started && first.isRunning,
                     "the first run ended before the second could try: \(first.isRunning ? "running" : "status \(first.terminationStatus)")")
        let second = try Shell.run(Binary.path, ["transcode", source, folder.appendingPathComponent("second.mp4").path,
                                                 "--settings", Self.settings, "--checkpoint", checkpoint, "--progress", "none"])
        #expect(second.status == 1 && second.stderr.contains("in use by another transcode"), "\(second.status): \(second.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("second.mp4").path))
        // The refused run touched nothing of the first one's: it finishes from its checkpoint as it was.
        kill(first.processIdentifier, SIGCONT)
        first.waitUntilExit()
        #expect(first.terminationReason == .exit && first.terminationStatus == 0, "the first run: \(first.terminationStatus)")
        #expect(try Probe.read(folder.appendingPathComponent("first.mp4").path).video?.width == 640)
    }

    /// An input given by a symbolic link is the file the link points at: replaced behind the link (a take rendered
    /// again), it is another input and starts over, where the link's own unchanged attributes made it resume and
    /// splice the old file's first part onto the new one.
    @Test func aFileReplacedBehindALinkStartsOver() throws {
        let folder = try Media.scratch()
        let take = try SeamCheck.clip(width: 640, height: 360, seconds: 8, into: folder, name: "take.mp4")
        let link = folder.appendingPathComponent("input.mp4").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: take)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(link, checkpoint: checkpoint, fraction: 0.5)
        #expect(try segmentEnds(checkpoint).count >= 1)
        // Rendered again: other pictures, the same size, rate and codec (the encoder's settings alone do not tell).
        let rendered = try Media.scratch().appendingPathComponent("take.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "smptebars=size=640x360:rate=30:duration=8",
                          "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=8",
                          "-ac", "2", "-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-c:a", "aac", "-b:a", "192k",
                          "-shortest", rendered])
        #expect(rename(rendered, take) == 0)
        let output = folder.appendingPathComponent("out.mp4").path
        let result = try complete(link, output: output, checkpoint: checkpoint)
        #expect(result["resumedFrom"] == nil, "\(result)")
        // SMPTE bars from the start: the first picture's left column is the grey bar, not testsrc2's.
        let first = try Probe.meanColor(output, at: nil, x: 10, y: 20, width: 60, height: 100)
        let bars = try Probe.meanColor(take, at: nil, x: 10, y: 20, width: 60, height: 100)
        #expect(zip(first, bars).allSatisfy { abs($0 - $1) < 12 }, "the output starts with the new take: \(first) against \(bars)")
    }

    /// Another file alike in name, size and modification time (a copy in another folder) is another input: its
    /// inode tells it apart, and its transcode starts over instead of splicing the first file's pieces.
    @Test func aLookAlikeFileElsewhereStartsOver() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 640, height: 360, seconds: 8, into: folder)
        // One whole second for both (a time set with sub-second digits does not come back exactly).
        let modified = Date(timeIntervalSince1970: 1_700_000_000)
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: source)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.5)
        #expect(try segmentEnds(checkpoint).count >= 1)
        let elsewhere = folder.appendingPathComponent("elsewhere")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: false)
        let copy = elsewhere.appendingPathComponent(URL(fileURLWithPath: source).lastPathComponent).path
        try FileManager.default.copyItem(atPath: source, toPath: copy)
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: copy)
        let times = try [source, copy].map { try FileManager.default.attributesOfItem(atPath: $0)[.modificationDate] as? Date }
        #expect(times[0] == times[1] && times[0] == modified, "alike but for the inode: \(times)")
        let result = try complete(copy, output: folder.appendingPathComponent("out.mp4").path, checkpoint: checkpoint)
        #expect(result["resumedFrom"] == nil, "\(result)")
    }

    /// Thumbnails every second, a storyboard and a poster late in the clip, killed at 70 % and resumed twice from
    /// copies of one checkpoint: as it was left, the pictures the first attempt took are kept (the very files, linked
    /// into the output) and the rest are taken; with one picture cut short and every later one removed, the pass
    /// goes back far enough to take them again. Both times the pictures are the straight run's, byte for byte, and
    /// the storyboard shows the same tiles.
    @Test func thumbnailsResumeWithTheVideo() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let settings = #"{"video": {"preset": "veryfast"}, "thumbnails": {"interval": 1, "storyboard": true, "poster": 0.9}}"#
        let straight = folder.appendingPathComponent("straight").path
        _ = try complete(source, output: straight + "/", checkpoint: folder.appendingPathComponent("straight-checkpoint").path,
                         settings: settings)
        let thumbnails = try FileManager.default.contentsOfDirectory(atPath: straight + "/thumbnails").sorted()
        #expect(thumbnails.count == 12, "\(thumbnails)")

        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.7, settings: settings)
        let stills = checkpoint + "/stills/thumbnails/"
        let left = try FileManager.default.contentsOfDirectory(atPath: stills).filter { $0.hasSuffix(".jpg") }.sorted()
        #expect(left.count >= 4 && left.count < thumbnails.count, "the first attempt took some of the pictures: \(left)")
        #expect(!FileManager.default.fileExists(atPath: checkpoint + "/stills/poster.jpg"), "the poster comes after the kill")
        let damagedCheckpoint = folder.appendingPathComponent("damaged-checkpoint").path
        #expect(try Shell.run("/bin/cp", ["-a", checkpoint, damagedCheckpoint]).status == 0)
        func inode(_ path: String) -> Int? { (try? FileManager.default.attributesOfItem(atPath: path))?[.systemFileNumber] as? Int }
        let leftInodes = left.map { inode(stills + $0) }

        let resumed = folder.appendingPathComponent("resumed").path
        let result = try complete(source, output: resumed + "/", checkpoint: checkpoint, settings: settings)
        #expect(result["resumedFrom"] is Double, "\(result)")
        #expect(!leftInodes.contains(nil) && left.map { inode(resumed + "/thumbnails/" + $0) } == leftInodes,
                "every picture the first attempt took is the output's, not taken again")

        // Cut short, the second picture is taken again, and every one after it too.
        let damagedStills = damagedCheckpoint + "/stills/thumbnails/"
        let keptInode = inode(damagedStills + "00001.jpg")
        #expect(truncate(damagedStills + "00002.jpg", 100) == 0)
        for name in left where name > "00002.jpg" { try FileManager.default.removeItem(atPath: damagedStills + name) }
        let redone = folder.appendingPathComponent("redone").path
        let redoneResult = try complete(source, output: redone + "/", checkpoint: damagedCheckpoint, settings: settings)
        #expect(redoneResult["resumedFrom"] is Double, "the video still resumes: \(redoneResult)")
        #expect(keptInode != nil && inode(redone + "/thumbnails/00001.jpg") == keptInode, "the whole picture before it is kept")

        for output in [resumed, redone] {
            #expect(try FileManager.default.contentsOfDirectory(atPath: output + "/thumbnails").sorted() == thumbnails)
            for name in thumbnails {
                #expect(FileManager.default.contentsEqual(atPath: straight + "/thumbnails/" + name, andPath: output + "/thumbnails/" + name),
                        "\(output): thumbnails/\(name) is the straight run's")
            }
            #expect(FileManager.default.contentsEqual(atPath: straight + "/poster.jpg", andPath: output + "/poster.jpg"))
            let cues = try String(contentsOfFile: output + "/storyboard.vtt", encoding: .utf8)
            #expect(cues == (try String(contentsOfFile: straight + "/storyboard.vtt", encoding: .utf8)), "\(cues)")
            // Tiles the resumed pass rebuilt from the kept pictures went through JPEG once more: alike, not the same bytes.
            let compare = try Shell.run("ffmpeg", ["-hide_banner", "-i", output + "/storyboard.jpg", "-i", straight + "/storyboard.jpg",
                                                   "-lavfi", "psnr", "-f", "null", "-"])
            let average = compare.stderr.components(separatedBy: "average:").last.flatMap { Double($0.prefix { $0 != " " }) }
            #expect((average ?? 0) >= 35, "the storyboard shows the straight run's tiles: \(average ?? 0) dB")
            try Media.ffmpeg(["-xerror", "-i", output + "/output.mp4", "-f", "null", "-"])
        }
    }

    /// Sources that are harder to resume: B-frames in an MPEG-TS with key frames 8 s apart (its clock may jump:
    /// read from the start, not seeked), a Matroska file at 25 fps made 15 fps by the settings, interlaced MPEG-2
    /// (deinterlaced on the way), and a tempo change (source time is not output time). Killed
    /// part-way and resumed, each comes out with the frames of the same job run straight through, and no frame
    /// differs from the straight run's by more than coding noise.
    @Test(arguments: ["b-frames.ts", "rate-change.mkv", "interlaced.ts", "tempo.mp4"])
    func harderSourcesResumeCleanly(name: String) throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent(name).path
        var settings = #"{"video": {"preset": "veryfast"}}"#
        switch name {
        case "b-frames.ts":
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=12", "-f", "lavfi", "-i", "sine=frequency=440:duration=12",
                              "-c:v", "libx264", "-preset", "superfast", "-bf", "3", "-g", "250", "-c:a", "aac", "-shortest", source])
        case "rate-change.mkv":
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25:duration=12", "-f", "lavfi", "-i", "sine=frequency=440:duration=12",
                              "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", source])
            settings = #"{"video": {"preset": "veryfast", "frameRate": 15}}"#
        case "tempo.mp4":
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=18", "-f", "lavfi", "-i", "sine=frequency=440:duration=18",
                              "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", source])
            settings = #"{"video": {"preset": "veryfast"}, "filters": {"audio": {"tempo": 1.5}}}"#
        default:
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=1280x720:r=50:d=24", "-vf", "tinterlace=interleave_top,setfield=tff",
                              "-c:v", "mpeg2video", "-b:v", "8M", "-flags", "+ilme+ildct", "-top", "1", "-f", "mpegts", source])
            // Interlaced pictures are deinterlaced (bwdif, which looks at the frames on each side) without asking.
        }
        let straight = folder.appendingPathComponent("straight.mp4").path
        _ = try complete(source, output: straight, checkpoint: folder.appendingPathComponent("straight-checkpoint").path, settings: settings)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.6, settings: settings)
        let output = folder.appendingPathComponent("resumed.mp4").path
        let result = try complete(source, output: output, checkpoint: checkpoint, settings: settings)
        let resumedFrom = try #require(result["resumedFrom"] as? Double, "\(result)")
        #expect(resumedFrom >= 4 - 0.1)
        try Media.ffmpeg(["-xerror", "-i", output, "-f", "null", "-"])
        let frames = (try SeamCheck.videoPackets(output), try SeamCheck.videoPackets(straight))
        #expect(frames.0.count == frames.1.count && frames.0.map(\.time) == frames.1.map(\.time),
                "the same frames at the same times: \(frames.0.count) and \(frames.1.count)")
        let against = try SeamCheck.psnr(output, source: straight)
        #expect(against.count == frames.1.count && !against.isEmpty)
        let worst = try #require(against.min())
        #expect(worst >= 35, "every frame is the straight run's up to coding noise (worst PSNR between them \(worst) dB)")
        if name == "b-frames.ts" || name == "interlaced.ts" {
            // One output frame per source frame: no drop in quality by the seam (read from the start, then warmed up).
            let psnr = try SeamCheck.psnr(output, source: source), reference = try SeamCheck.psnr(straight, source: source)
            let rate = name == "interlaced.ts" ? 25.0 : 30.0
            let index = Int((resumedFrom * rate).rounded())
            for frame in max(0, index - 10)..<min(psnr.count, reference.count, index + 10) {
                #expect(abs(psnr[frame] - reference[frame]) <= 0.5, "frame \(frame) by the seam: \(psnr[frame]) against \(reference[frame]) dB")
            }
        }
    }

    /// A recorded segment the checkpoint lost (a power cut may lose a new name whose folder was not synced) is made
    /// again: the resume starts before it. It was passed over when the ladder was put together, and the playlists
    /// named a file the output did not have. So is one damaged in place (its size the same): checked by size
    /// alone, it was published as it was.
    @Test(arguments: [false, true]) func aLadderSegmentTheCheckpointLostIsMadeAgain(damagedInPlace: Bool) throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 640, height: 360, seconds: 10, into: folder)
        let settings = #"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 360, "preset": "veryfast"}}]}"#
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.7, settings: settings)
        let recorded = try #require(try CheckpointRecords.ladderSegments(checkpoint)["360p"])
        try #require(recorded.count >= 3, "\(recorded.count) segments recorded")
        let lost = try #require(recorded[1]["path"] as? String)
        if damagedInPlace {
            let file = try FileHandle(forUpdating: URL(fileURLWithPath: checkpoint + "/ladder/" + lost))
            let size = try file.seekToEnd()
            try file.seek(toOffset: size / 2)
            try file.write(contentsOf: Data(repeating: 0xA5, count: 8))
            try file.close()
        } else {
            try FileManager.default.removeItem(atPath: checkpoint + "/ladder/" + lost)
        }
        let resumed = folder.appendingPathComponent("resumed").path
        let result = try complete(source, output: resumed + "/", checkpoint: checkpoint, settings: settings)
        let resumedFrom = try #require(result["resumedFrom"] as? Double, "\(result)")
        #expect(abs(resumedFrom - 2) < 0.05, "resumed after the one segment before the lost one: \(resumedFrom)")
        #expect(FileManager.default.fileExists(atPath: resumed + "/" + lost))
        _ = try Ladder.check(resumed)
        #expect(try Ladder.decodesCleanly(resumed + "/master.m3u8").status == 0)
    }

    /// A ladder (two renditions and the audio, 4 s segments, thumbnails) killed at 70 % and resumed: the renditions
    /// continue after the segments every one of them finished, and the ladder follows the HLS rules, has the key
    /// frames and frames of the same ladder made straight through, the very same audio segments and pictures, and no
    /// seam in quality.
    @Test func aLadderResumesFromItsSegments() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 1280, height: 720, seconds: 12, into: folder)
        let settings = #"{"container": "hls", "segmentDuration": 4, "renditions": [{"video": {"height": 720, "preset": "veryfast"}}, {"video": {"height": 360, "preset": "veryfast"}}], "thumbnails": {"interval": 2, "storyboard": true, "poster": 0.9}}"#
        let straight = folder.appendingPathComponent("straight").path
        #expect(try complete(source, output: straight + "/", checkpoint: folder.appendingPathComponent("straight-checkpoint").path,
                             settings: settings)["resumedFrom"] == nil)
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.7, settings: settings)
        let stills = checkpoint + "/stills/thumbnails/"
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: stills)) ?? []).filter { $0.hasSuffix(".jpg") }.sorted()
        func inode(_ path: String) -> Int? { (try? FileManager.default.attributesOfItem(atPath: path))?[.systemFileNumber] as? Int }
        let leftInodes = left.map { inode(stills + $0) }
        #expect(!left.isEmpty, "the first attempt took pictures into the checkpoint")
        let records = try CheckpointRecords.ladderSegments(checkpoint)
        let finished = ["720p", "360p"].map { records[$0]?.count ?? 0 }
        #expect(finished.min() ?? 0 >= 1, "each rendition finished a segment: \(finished)")
        // The sound's pass (much the quicker) had ended: it is recorded whole, and the resume keeps its files. It
        // was recorded only after the video's, and encoded all over again.
        let audio = ((try CheckpointRecords.manifest(checkpoint)["ladder"] as? [String: Any])?["audio"] as? [String: Any]) ?? [:]
        #expect(audio["complete"] as? Bool == true, "the sound is recorded whole: \(audio["complete"] ?? "nil")")
        let audioPaths = (records["audio"] ?? []).compactMap { $0["path"] as? String }
        let audioInodes = audioPaths.map { inode(checkpoint + "/ladder/" + $0) }
        #expect(audioPaths.count >= 3 && !audioInodes.contains(nil), "\(audioPaths)")

        let resumed = folder.appendingPathComponent("resumed").path
        let result = try complete(source, output: resumed + "/", checkpoint: checkpoint, settings: settings)
        let resumedFrom = try #require(result["resumedFrom"] as? Double, "\(result)")
        #expect(abs(resumedFrom - Double(finished.min() ?? 0) * 4) < 0.05, "resumed after the segments both renditions finished: \(resumedFrom)")
        let summary = try Ladder.check(resumed)
        #expect(summary.variants.count == 2 && summary.audio != nil)
        #expect(try Ladder.decodesCleanly(resumed + "/master.m3u8").status == 0)
        for track in ["720p", "360p"] {
            let (times, frames) = try Ladder.keyFrameTimes(resumed, track: track)
            let reference = try Ladder.keyFrameTimes(straight, track: track)
            #expect(frames == 360 && frames == reference.frames, "\(track): \(frames) frames")
            #expect(times == reference.times, "\(track): key frames \(times) against \(reference.times)")
            #expect(try Ladder.segmentsStartWithKeyFrames(resumed, track: track).allSatisfy { $0 })
        }
        let audioNames = try FileManager.default.contentsOfDirectory(atPath: straight + "/audio").filter { $0.hasPrefix("segment_") }.sorted()
        #expect(!audioNames.isEmpty)
        for name in audioNames {
            let same = FileManager.default.contentsEqual(atPath: straight + "/audio/" + name, andPath: resumed + "/audio/" + name)
            #expect(same, "audio/\(name) is the straight run's")
        }
        // The pictures come out as the straight run's: the same thumbnails, poster and cues.
        let thumbnails = try FileManager.default.contentsOfDirectory(atPath: straight + "/thumbnails").sorted()
        let resumedThumbnails = try FileManager.default.contentsOfDirectory(atPath: resumed + "/thumbnails").sorted()
        #expect(thumbnails.count == 6 && resumedThumbnails == thumbnails, "\(resumedThumbnails)")
        for name in thumbnails.map({ "thumbnails/" + $0 }) + ["poster.jpg", "storyboard.vtt"] {
            #expect(FileManager.default.contentsEqual(atPath: straight + "/" + name, andPath: resumed + "/" + name), "\(name) is the straight run's")
        }
        #expect(left.map { inode(resumed + "/thumbnails/" + $0) } == leftInodes, "the pictures the first attempt took are kept")
        #expect(audioPaths.map { inode(resumed + "/" + $0) } == audioInodes, "the sound the first attempt made is kept")
        let compare = try Shell.run("ffmpeg", ["-hide_banner", "-i", resumed + "/storyboard.jpg", "-i", straight + "/storyboard.jpg",
                                               "-lavfi", "psnr", "-f", "null", "-"])
        let average = compare.stderr.components(separatedBy: "average:").last.flatMap { Double($0.prefix { $0 != " " }) }
        #expect((average ?? 0) >= 35, "the storyboard shows the straight run's tiles: \(average ?? 0) dB")
        // No seam: the 720p frames by the resume point are as good as the straight run's.
        let psnr = try SeamCheck.psnr(try Ladder.joined(resumed, track: "720p"), source: source)
        let reference = try SeamCheck.psnr(try Ladder.joined(straight, track: "720p"), source: source)
        #expect(psnr.count == 360 && reference.count == 360)
        let index = Int((resumedFrom * 30).rounded())
        for frame in max(0, index - 10)..<min(psnr.count, reference.count, index + 10) {
            #expect(abs(psnr[frame] - reference[frame]) <= 0.5, "frame \(frame) by the seam: \(psnr[frame]) against \(reference[frame]) dB")
        }
    }

    /// A ladder resumed while a writer of the earlier attempt still holds its files open (paused when its lease ran
    /// out, it wakes and writes once more before it finds its folder gone) writes files of its own: what the old
    /// writer writes lands nowhere in the output. Before, the resumed attempt truncated and rewrote the same files.
    @Test func aResumedLadderWritesFilesOfItsOwnNotTheOnesAnEarlierWriterHolds() throws {
        let folder = try Media.scratch()
        let source = try SeamCheck.clip(width: 640, height: 360, seconds: 12, into: folder)
        let settings = #"{"container": "hls", "segmentDuration": 4, "renditions": [{"video": {"height": 360, "preset": "veryfast"}}, {"video": {"height": 180, "preset": "veryfast"}}]}"#
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        try interrupted(source, checkpoint: checkpoint, fraction: 0.6, settings: settings)
        // The earlier writer's hold on the files it left and had not finished (recorded segments it had closed; the
        // sound's files all, once its pass ended and it was recorded whole).
        let recorded = Set(try CheckpointRecords.ladderSegments(checkpoint).values.joined().compactMap { $0["path"] as? String })
        let audio = ((try CheckpointRecords.manifest(checkpoint)["ladder"] as? [String: Any])?["audio"] as? [String: Any]) ?? [:]
        var held: [Int32] = []
        var segmentsHeld: [String: Int] = [:]
        for track in ["360p", "180p"] + (audio["complete"] as? Bool == true ? [] : ["audio"]) {
            for name in try FileManager.default.contentsOfDirectory(atPath: checkpoint + "/ladder/" + track)
            where !recorded.contains(track + "/" + name) {
                let descriptor = open(checkpoint + "/ladder/" + track + "/" + name, O_WRONLY)
                if descriptor >= 0 { held.append(descriptor) }
                if descriptor >= 0 && name.hasPrefix("segment_") { segmentsHeld[track, default: 0] += 1 }
            }
        }
        defer { held.forEach { close($0) } }
        #expect(segmentsHeld["360p", default: 0] >= 1 && segmentsHeld["180p", default: 0] >= 1,
                "each rendition left a segment under way: \(segmentsHeld), \(recorded.count) recorded")
        let resumed = folder.appendingPathComponent("resumed").path
        let result = try complete(source, output: resumed + "/", checkpoint: checkpoint, settings: settings)
        #expect(result["resumedFrom"] as? Double != nil, "\(result)")
        let files = try FileManager.default.subpathsOfDirectory(atPath: resumed).filter { !$0.hasSuffix("/") }.sorted()
        let before = files.map { FileManager.default.contents(atPath: resumed + "/" + $0) }
        let garbage = [UInt8](repeating: 0xEE, count: 4096)
        for descriptor in held { _ = pwrite(descriptor, garbage, garbage.count, 0) }
        let after = files.map { FileManager.default.contents(atPath: resumed + "/" + $0) }
        let changed = zip(files, zip(before, after)).filter { $1.0 != $1.1 }.map(\.0)
        #expect(changed.isEmpty, "the old writer's bytes reached \(changed)")
        #expect(try Ladder.check(resumed).audio != nil)
        #expect(try Ladder.decodesCleanly(resumed + "/master.m3u8").status == 0)
    }
}
