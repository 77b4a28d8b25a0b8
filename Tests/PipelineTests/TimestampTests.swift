import Foundation
@testable import Pipeline
import Testing
import TestSupport

/// What a file's clock says, read truthfully: a duration is where the media ends minus where it starts, a file that
/// starts late is complete, and a clock that goes back is named as such rather than taken for a cut-short file.
@Suite struct TimestampTests {
    private func transcode(_ input: String, limits: MediaLimits = MediaLimits()) throws -> (result: TranscodeResult, probe: Probe) {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        let result = try TranscodeSession(inputPath: input, outputPath: output, settings: TranscodeSettings(), limits: limits).run()
        return (result, try Probe.read(output))
    }

    @Test func aFileWhoseClockStartsAtNineBillionSecondsLastsEightSeconds() throws {
        let input = try Media.path(.farStart)
        let reader = try MediaReader(path: input)
        #expect(abs((reader.duration ?? 0) - 8) < 0.1, "declared \(reader.duration ?? -1) s")
        #expect(reader.tracks.count == 2)
        #expect(reader.tracks.allSatisfy { abs(($0.duration ?? 0) - 8) < 0.1 }, "\(reader.tracks.map(\.duration))")
        let (result, probe) = try transcode(input)
        #expect(abs(probe.format.durationSeconds - 8) < 0.1)
        #expect(result.framesEncoded == 200)
        // The limit still applies to the real length.
        #expect { try transcode(input, limits: MediaLimits(maxDuration: 5)) } throws: { error in
            guard let error = error as? MediaError else { return false }
            return error.code == "input_too_long" && error.message.contains("lasts 8 s")
        }
    }

    /// MPEG-TS joined from two recordings whose clock goes back five minutes between them: FFmpeg guesses its length
    /// from the first and last timestamps as a wrap of the clock, a day, and the job failed with `input_too_long`
    /// ("lasts 95147 s" for 4 s). The limit holds as the media is read.
    @Test func aTransportStreamJoinedAcrossAClockResetIsNotCalledTooLong() throws {
        let folder = try Media.scratch()
        let parts = ["300", "0"].map { folder.appendingPathComponent("part-\($0).ts").path }
        for (offset, part) in zip(["300", "0"], parts) {
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=2", "-f", "lavfi", "-i", "sine=f=440:d=2",
                              "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-output_ts_offset", offset, part])
        }
        let joined = folder.appendingPathComponent("joined.ts")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: parts[0]))
        bytes.append(try Data(contentsOf: URL(fileURLWithPath: parts[1])))
        try bytes.write(to: joined)
        #expect((try MediaReader(path: joined.path).duration ?? 0) > 3600, "FFmpeg's guess is the clock's wrap")
        let (_, probe) = try transcode(joined.path, limits: MediaLimits(maxDuration: 60))
        #expect((3.5...4.5).contains(probe.format.durationSeconds), "\(probe.format.durationSeconds) s")
        #expect { try transcode(joined.path, limits: MediaLimits(maxDuration: 2)) } throws: { ($0 as? MediaError)?.code == "input_too_long" }
        // A plain one longer than the limit is still refused by its declared length, before anything is decoded.
        #expect { try transcode(parts[1], limits: MediaLimits(maxDuration: 1)) } throws: {
            ($0 as? MediaError)?.code == "input_too_long" && ($0 as? MediaError)?.message.contains("lasts 2 s") == true
        }
    }

    /// Raw AAC (ADTS) has no length of its own: FFmpeg estimates one from the bit rate of its first seconds, which
    /// a quiet start makes far too long. The job failed with `input_too_long` (a 570 s file "lasted 26670 s"), and an
    /// AAC output's result gave the estimate of what it had just written. The limit holds as the media is read; the
    /// result says what was written.
    @Test func aLengthEstimatedFromTheBitRateIsNotJudgedNorReported() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("quiet-start.aac").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "anullsrc=r=48000:cl=stereo:d=8", "-f", "lavfi", "-i", "anoisesrc=c=white:a=0.5:r=48000:d=4",
                          "-filter_complex", "[1]aformat=channel_layouts=stereo[n];[0][n]concat=n=2:v=0:a=1", "-c:a", "aac", "-b:a", "320k", input])
        let declared = try MediaReader(path: input).duration ?? 0
        #expect(declared > 60, "FFmpeg's estimate from the silent start: \(declared) s")
        let (_, probe) = try transcode(input, limits: MediaLimits(maxDuration: 60))
        #expect(abs(probe.format.durationSeconds - 12) < 0.2, "\(probe.format.durationSeconds) s")
        #expect { try transcode(input, limits: MediaLimits(maxDuration: 5)) } throws: { ($0 as? MediaError)?.code == "input_too_long" }
        // The same sound written as raw AAC: its length is what was written, not an estimate of it.
        let output = folder.appendingPathComponent("out.aac").path
        let result = try TranscodeSession(inputPath: input, outputPath: output,
                                          settings: try TranscodeSettings.parse(Data(#"{"container": "aac"}"#.utf8))).run()
        #expect((try MediaReader(path: output).duration ?? 0) > 60, "FFmpeg's estimate of the output")
        #expect(abs(result.duration - 12) < 0.2 && result.tracks.allSatisfy { abs(($0.duration ?? 0) - 12) < 0.2 },
                "\(result.duration) s, tracks \(result.tracks.map(\.duration))")
    }

    @Test func aMatroskaFileThatStartsAtFiveSecondsIsComplete() throws {
        // Its header says 13 s: the end of a timeline from zero. Read as a length, the file was "cut short" at 8 s.
        let (result, probe) = try transcode(try Media.path(.offsetStart))
        #expect(result.framesEncoded == 200)
        #expect(abs((probe.video?.durationSeconds ?? 0) - 8) < 0.1)
    }

    @Test func aMatroskaClockThatGoesBackIsNamedNotCalledTruncated() throws {
        let input = try Media.scratch().appendingPathComponent("back.mkv").path
        try FileManager.default.copyItem(atPath: try Media.path(.offsetStart), toPath: input)
        // Clusters from 4 s of media (9 s on the file's clock) on are stamped 3 s earlier.
        #expect(try Matroska.shiftClusters(in: input, from: 9, by: 3) > 4)
        let error = try #require(throws: MediaError.self) { try transcode(input) }
        #expect(error.code == "timestamps_invalid")
        // It names the track and the times (from the file's start): 3 s back, from after 4 s of media.
        let times = try #require(error.message.firstMatch(of: /(audio|video) track \(stream \d\) goes back in time, from ([0-9.]+) s to ([0-9.]+) s/),
                                 "\(error.message)")
        let from = try #require(Double(times.output.2)), to = try #require(Double(times.output.3))
        #expect(from >= 3.9 && abs(from - to - 3) < 0.1, "\(error.message)")
    }

    /// Times near the end of what 64 bits hold (a crafted file) are refused as broken: sums and differences of them
    /// overflowed and crashed the job's process (every attempt, then `worker_crashed`) at the session's start, in
    /// the stitching of a clock, in a picture's time, and in the check of a declared duration.
    @Test func timesPastWhatMediaHoldsAreRefusedNotACrash() throws {
        let folder = try Media.scratch()
        let far = folder.appendingPathComponent("far.mkv").path, leap = folder.appendingPathComponent("leap.mkv").path
        try Matroska.writeTone(to: far, clusters: [10_000_000_000_000_000])
        try Matroska.writeTone(to: leap, clusters: [0, 10_000_000_000_000_000])
        // One picture's presentation time 9.3e15 ms, on a clock that starts at 10 s.
        let base = folder.appendingPathComponent("base.mp4").path, picture = folder.appendingPathComponent("picture.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-c:v", "libx264", "-pix_fmt", "yuv420p", base])
        try Media.ffmpeg(["-i", base, "-c:v", "copy", "-bsf:v", "setts=pts=if(eq(N\\,5)\\,9300000000000000\\,PTS)",
                          "-output_ts_offset", "10", picture])
        for input in [far, leap, picture] {
            // Through the command line: a crash is then an exit status, not this test process ending.
            let run = try Shell.run(Binary.path, ["transcode", input, folder.appendingPathComponent("out.mp4").path])
            #expect(run.status == 1 && run.stderr.contains("timestamps_invalid") && run.stderr.contains("past what any media holds"),
                    "\(input): \(run.status) \(run.stderr.suffix(400))")
        }
        #expect { try MediaLimits().checkDeclared(duration: 1e19) } throws: {
            ($0 as? MediaError)?.code == "input_too_long" && ($0 as? MediaError)?.message.contains("10000000000000000000 s") == true
        }
    }

    @Test func aClockThatLeapsFarPastTheDeclaredEndIsRefused() throws {
        let input = try Media.scratch().appendingPathComponent("leap.mkv").path
        try FileManager.default.copyItem(atPath: try Media.path(.farStart), toPath: input)
        // From 4 s of media on, everything is stamped an hour later than the 8 s the file declares.
        #expect(try Matroska.shiftClusters(in: input, from: 9_000_000_004, by: -3600) >= 1)
        let error = try #require(throws: MediaError.self) { try transcode(input) }
        #expect(error.code == "timestamps_invalid" && error.message.contains("far past the end the file declares (8."),
                "\(error.message)")
    }
}
