import Foundation
import Pipeline
import Testing
import TestSupport

/// Audio follows its own timestamps, so it stays in sync with the video when the source's audio has a hole, an
/// overlap, a late start or a clock that drifts. A tone marks a place in each source: where it starts in the output
/// (ffmpeg's silencedetect) must be where it was in the source, within one AAC frame (1024 samples at 44.1 kHz).
@Suite struct AudioSyncTests {
    /// One AAC frame at 44.1 kHz, seconds.
    private static let frame = 1024.0 / 44_100

    private func transcode(_ clip: Media.Clip, _ json: String = "{}") throws -> (path: String, probe: Probe) {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: try Media.path(clip), outputPath: output,
                                 settings: try TranscodeSettings.parse(Data(json.utf8))).run()
        return (output, try Probe.read(output))
    }

    /// The audio and video of `probe` end within 0.1 s of each other and of `duration`.
    private func expectEnds(_ probe: Probe, at duration: Double, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let video = try #require(probe.video, sourceLocation: sourceLocation)
        let audio = try #require(probe.audio, sourceLocation: sourceLocation)
        let videoEnd = video.startTime + video.durationSeconds, audioEnd = audio.startTime + audio.durationSeconds
        #expect(abs(audioEnd - videoEnd) < 0.1, "audio ends at \(audioEnd) s, video at \(videoEnd) s", sourceLocation: sourceLocation)
        #expect(abs(videoEnd - duration) < 0.1, "video ends at \(videoEnd) s", sourceLocation: sourceLocation)
    }

    @Test func aHoleInTheAudioIsFilledWithSilence() throws {
        let (output, probe) = try transcode(.audioHole)
        let silences = try Probe.silences(output)
        // The tone stops at 3 s and comes back at 5 s, as in the source; before the fix it came back at 3 s.
        let hole = try #require(silences.first { $0.start > 2 && $0.start < 4 }, "silences: \(silences)")
        #expect(abs(hole.start - 3) < Self.frame + 0.05, "the tone stops at \(hole.start) s")
        #expect(abs(hole.end - 5) < Self.frame, "the tone comes back at \(hole.end) s")
        try expectEnds(probe, at: 8)
    }

    /// Audio whose timestamps jitter by up to ±15 ms (stamped by a wall clock, as captures and screen recorders
    /// do) plays as a steady tone: each difference over one AAC frame was taken for a hole or an overlap, filled
    /// with silence or dropped, a click each (ten in ten seconds; ffmpeg's CLI makes none).
    @Test func audioWhoseTimestampsJitterIsNotCutUp() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("jitter.mkv").path, output = folder.appendingPathComponent("out.m4a").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "sine=f=440:d=10:sample_rate=48000", "-af", "asetpts='N/SR/TB+(random(0)-0.5)*0.03/TB'",
                          "-c:a", "pcm_s16le", input])
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: TranscodeSettings()).run()
        let raw = folder.appendingPathComponent("out.raw").path
        try Media.ffmpeg(["-i", output, "-f", "s16le", "-ac", "1", "-ar", "48000", raw])
        let samples = try Data(contentsOf: URL(fileURLWithPath: raw)).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        #expect(samples.count > 9 * 48_000)
        // A 440 Hz sine follows x[n] = 2 cos(w) x[n-1] - x[n-2]; a sample far from that is a cut.
        let factor = 2 * cos(2 * Double.pi * 440 / 48_000)
        let cuts = (2..<samples.count).filter { abs(factor * Double(samples[$0 - 1]) - Double(samples[$0 - 2]) - Double(samples[$0])) > 800 }
        #expect(cuts.isEmpty, "cut at \(cuts.prefix(10).map { String(format: "%.3f s", Double($0) / 48_000) })")
    }

    /// Audio one frame of which is stamped late and the next on time again (Vorbis stamps a frame 10 ms late at
    /// each switch between its long and short blocks) keeps its pitch: each such frame set a second's stretch going,
    /// which ran on after the next frame was back in place, overshot, and was turned round again; a tone came out
    /// between 991 and 1001 Hz, changing every few hundred milliseconds (ffmpeg's CLI keeps it at 1000).
    @Test func audioWithAFrameStampedLateNowAndThenKeepsItsPitch() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("tone.ogg").path, output = folder.appendingPathComponent("out.m4a").path
        // A 1 kHz tone with a short burst every quarter second: Vorbis switches to short blocks at each.
        try Media.ffmpeg(["-f", "lavfi", "-i", "aevalsrc='0.5*sin(2*PI*1000*t)+if(lt(mod(t,0.25),0.003),0.9*sin(2*PI*5000*t),0)':s=48000:d=6",
                          "-c:a", "libvorbis", input])
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: TranscodeSettings()).run()
        let raw = folder.appendingPathComponent("out.raw").path
        try Media.ffmpeg(["-i", output, "-f", "s16le", "-ac", "1", "-ar", "48000", raw])
        let samples = try Data(contentsOf: URL(fileURLWithPath: raw)).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        // The tone's phase against 1 kHz every 20 ms (over 10 ms, ten whole periods): the step between two is its
        // frequency's distance from 1 kHz; averaged over 200 ms, it must stay within 2 Hz (a stretch of 1 % is 10).
        let window = 480, step = 960
        let phases = stride(from: 0, to: samples.count - window, by: step).map { start -> Double in
            var real = 0.0, imaginary = 0.0
            for index in start..<start + window {
                let angle = 2 * Double.pi * 1000 * Double(index) / 48_000
                real += Double(samples[index]) * cos(angle)
                imaginary += Double(samples[index]) * sin(angle)
            }
            return atan2(imaginary, real)
        }
        let offsets = zip(phases, phases.dropFirst()).map { earlier, later -> Double in
            var turn = later - earlier
            while turn > Double.pi { turn -= 2 * Double.pi }
            while turn < -Double.pi { turn += 2 * Double.pi }
            return turn / (2 * Double.pi * Double(step) / 48_000)
        }
        #expect(offsets.count > 250)
        let averages = stride(from: 0, to: offsets.count - 10, by: 10).map { offsets[$0..<$0 + 10].reduce(0, +) / 10 }
        let off = averages.enumerated().filter { abs($0.element) > 2 }
        #expect(off.isEmpty, "\(off.prefix(8).map { String(format: "%.1f s: %+.1f Hz", Double($0.offset) * 0.2, $0.element) })")
    }

    /// Audio whose rate changes part-way (recordings joined, a stream's audio switching from 48 kHz to 22.05 kHz
    /// and back) plays whole and without cuts: the demuxer stamps the frames it gets no time for (all of raw AAC's,
    /// all but a transport stream packet's first) by the rate it opened with, and those stamps, 21 ms apart for
    /// frames of 46, were taken for overlaps: the audio was cut every few frames, silence filled in behind, and raw
    /// AAC lost half its second part.
    @Test(arguments: ["mpegts", "adts"]) func audioThatChangesRatePartWayIsWholeAndUncut(format: String) throws {
        let folder = try Media.scratch()
        var joined = Data()
        for (part, rate) in [48_000, 22_050, 48_000].enumerated() {
            let path = folder.appendingPathComponent("part\(part).\(format)").path
            try Media.ffmpeg(["-f", "lavfi", "-i", "sine=f=440:d=3:sample_rate=\(rate)", "-c:a", "aac", "-b:a", "128k"]
                             + (format == "mpegts" ? ["-output_ts_offset", String(3 * part)] : []) + ["-f", format, path])
            joined += try Data(contentsOf: URL(fileURLWithPath: path))
        }
        let input = folder.appendingPathComponent("joined.\(format == "adts" ? "aac" : "ts")").path
        try joined.write(to: URL(fileURLWithPath: input))
        let output = folder.appendingPathComponent("out.m4a").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: TranscodeSettings()).run()
        let raw = folder.appendingPathComponent("out.raw").path
        try Media.ffmpeg(["-i", output, "-f", "s16le", "-ac", "1", "-ar", "48000", raw])
        let samples = try Data(contentsOf: URL(fileURLWithPath: raw)).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        // 9 s on the stream's clock; raw AAC, which has none, as long as ffmpeg decodes it (each part's encoder
        // priming kept: 9.1 s).
        var whole = 9.0
        if format == "adts" {
            let decoded = folder.appendingPathComponent("in.raw").path
            try Media.ffmpeg(["-i", input, "-f", "s16le", "-ac", "1", "-ar", "48000", decoded])
            whole = Double(try FileManager.default.attributesOfItem(atPath: decoded)[.size] as? Int ?? 0) / 2 / 48_000
        }
        #expect(whole > 8.9 && abs(Double(samples.count) / 48_000 - whole) < 0.05,
                "\(format): \(Double(samples.count) / 48_000) s of audio, \(whole) s in the input")
        // Between the joins (where the tone's phase starts again), a 440 Hz sine follows x[n] = 2 cos(w) x[n-1] - x[n-2].
        let factor = 2 * cos(2 * Double.pi * 440 / 48_000)
        let cuts = (Array(Int(3.2 * 48_000)..<Int(5.9 * 48_000)) + Array(Int(6.2 * 48_000)..<Int(8.9 * 48_000))).filter {
            $0 < samples.count && abs(factor * Double(samples[$0 - 1]) - Double(samples[$0 - 2]) - Double(samples[$0])) > 800
        }
        #expect(cuts.isEmpty, "\(format): \(cuts.count) cut at \(cuts.prefix(10).map { String(format: "%.3f s", Double($0) / 48_000) })")
    }

    @Test func anOverlapInTheAudioIsDropped() throws {
        let (output, probe) = try transcode(.audioOverlap)
        let silences = try Probe.silences(output)
        // The silent half second belongs at 3.7 to 4.2 s of the source's timeline; laid end to end it came at 4.0.
        let gap = try #require(silences.first { $0.start > 3 && $0.start < 5 }, "silences: \(silences)")
        #expect(abs(gap.end - 4.2) < Self.frame, "the tone comes back at \(gap.end) s")
        try expectEnds(probe, at: 5.7)
    }

    @Test func audioWhoseClockRunsFastIsKeptOnTheVideosTimeline() throws {
        let (output, probe) = try transcode(.audioDrift)
        let silences = try Probe.silences(output)
        // Stamped at 7 s; its samples at the stream's rate put it 35 ms later, more than an AAC frame.
        let lead = try #require(silences.first, "silences: \(silences)")
        #expect(lead.start < 0.1)
        #expect(abs(lead.end - 7) < Self.frame, "the tone starts at \(lead.end) s")
        try expectEnds(probe, at: 8)
    }

    @Test func aHoleIsKeptThroughAudioFilters() throws {
        // The filters run on audio that already follows its timestamps: at tempo 2 the hole is 1.5 to 2.5 s.
        let (output, probe) = try transcode(.audioHole, #"{"filters": {"audio": {"tempo": 2}}}"#)
        let silences = try Probe.silences(output)
        let hole = try #require(silences.first { $0.start > 1 && $0.start < 2 }, "silences: \(silences)")
        #expect(abs(hole.end - 2.5) < Self.frame, "the tone comes back at \(hole.end) s")
        try expectEnds(probe, at: 4)
    }

    /// A tempo scales time from the output's zero for pictures as for sound: on a source whose clock starts at 5 s,
    /// the pictures were put at (t / 2) - 5 and the sound at (t - 5) / 2, so the video began 2.5 s before zero.
    @Test func aTempoKeepsPicturesWithSoundOnASourceThatStartsLate() throws {
        let (_, probe) = try transcode(.offsetStart, #"{"filters": {"audio": {"tempo": 2}}}"#)
        let video = try #require(probe.video), audio = try #require(probe.audio)
        #expect(abs(video.startTime) < 0.05 && abs(audio.startTime) < 0.05, "video starts at \(video.startTime) s, audio at \(audio.startTime) s")
        try expectEnds(probe, at: 4)
    }

    @Test func videoThatStartsLaterKeepsItsOffset() throws {
        let (_, probe) = try transcode(.lateVideo)
        let video = try #require(probe.video)
        let audio = try #require(probe.audio)
        #expect(abs(audio.startTime) < 0.05, "audio starts at \(audio.startTime)")
        #expect(abs(video.startTime - 1) < 0.05, "video starts at \(video.startTime)")
    }

    /// Audio that starts after FFmpeg's probe looked (at 8 s of 12) in Matroska and MPEG-TS, whose tracks then get
    /// the file's start and duration, comes out whole and in place: the job failed as cut short ("the data ends at
    /// 10.99 s"), the audio's borrowed duration taken for its own.
    @Test(arguments: ["mkv", "ts"]) func audioThatStartsPastTheProbeIsNoCut(container: String) throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("late.\(container)").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=12", "-f", "lavfi", "-i", "sine=f=440:d=3",
                          "-filter_complex", "[1:a]asetpts=PTS+8/TB[a]", "-map", "0:v", "-map", "[a]",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        // The case at hand: FFmpeg gives the late audio the file's start and length, not its own.
        let source = try Probe.read(input)
        let sourceAudio = try #require(source.audio)
        #expect(abs(sourceAudio.durationSeconds - source.format.durationSeconds) < 0.01 && sourceAudio.startTime < 2,
                "the audio's declared timing is the file's: from \(sourceAudio.startTime) s for \(sourceAudio.durationSeconds) s")
        let output = folder.appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: TranscodeSettings()).run()
        let probe = try Probe.read(output)
        let video = try #require(probe.video), audio = try #require(probe.audio)
        #expect(abs(video.durationSeconds - 12) < 0.1, "video: \(video.durationSeconds) s")
        #expect(abs(audio.startTime - 8) < 0.1 && abs(audio.durationSeconds - 3) < 0.1, "audio from \(audio.startTime) s for \(audio.durationSeconds) s")
    }

    /// A transport stream whose audio has a hole longer than the 10 s a clock may leap (a broadcast's audio that
    /// dropped out) keeps the hole as silence, alone (a lone transcode) and read by the two readers of a
    /// checkpointed one, as every job is. The audio's own reader followed only the audio and took the leap for a
    /// restarted clock: it closed the hole up, and the tone ran 11 s early from there on (the audio was 3 s long).
    @Test(arguments: [false, true]) func aLongAudioHoleInATransportStreamStaysInPlace(checkpointed: Bool) throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("hole.ts").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=14",
                          "-f", "lavfi", "-i", "sine=f=440:d=14:samples_per_frame=1024,aselect='lt(t\\,2)+gte(t\\,13)'",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-f", "mpegts", input])
        let output = folder.appendingPathComponent("out.mp4").path
        let session = TranscodeSession(inputPath: input, outputPath: output, settings: TranscodeSettings())
        if checkpointed { session.checkpointDirectory = folder.appendingPathComponent("checkpoint").path }
        _ = try session.run()
        let silences = try Probe.silences(output)
        let hole = try #require(silences.first { $0.end - $0.start > 5 }, "\(silences)")
        #expect(abs(hole.start - 2) < 0.1 && abs(hole.end - 13) < 0.1, "silent from \(hole.start) to \(hole.end) s")
        try expectEnds(try Probe.read(output), at: 14)
    }

    /// The duration limit is on the input read: slowed to half its pace, an 8 s clip makes 16 s of output and
    /// stays within a 10 s limit, alone and checkpointed. The checkpointed audio pass measured its output instead,
    /// and refused the job as too long once the video was done.
    @Test(arguments: [false, true]) func aSlowerTempoIsHeldToTheLimitOnWhatItReads(checkpointed: Bool) throws {
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent("slow.mp4").path
        let session = TranscodeSession(inputPath: try Media.path(.audioHole), outputPath: output,
                                       settings: try TranscodeSettings.parse(Data(#"{"filters": {"audio": {"tempo": 0.5}}}"#.utf8)),
                                       limits: MediaLimits(maxDuration: 10))
        if checkpointed { session.checkpointDirectory = folder.appendingPathComponent("checkpoint").path }
        _ = try session.run()
        try expectEnds(try Probe.read(output), at: 16)
    }
}
