import Foundation
import Pipeline
import Testing
import TestSupport

/// The `filters` section, checked by measuring its effect on the output.
@Suite(.serialized) struct FilterTests {
    private func transcode(_ input: String, _ json: String) throws -> String {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: try TranscodeSettings.parse(Data(json.utf8))).run()
        return output
    }

    /// One decoded frame at `time` as 8-bit 4:2:0 planes.
    private func planes(_ path: String, time: Double = 1) throws -> (y: [UInt8], u: [UInt8], v: [UInt8]) {
        let probe = try Probe.read(path)
        let width = probe.video?.width ?? 0, height = probe.video?.height ?? 0
        let raw = try Media.scratch().appendingPathComponent("frame.yuv").path
        try Media.ffmpeg(["-ss", String(time), "-i", path, "-frames:v", "1", "-pix_fmt", "yuv420p", "-f", "rawvideo", raw])
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: raw)))
        let luma = width * height, chroma = luma / 4
        return (Array(bytes[0..<luma]), Array(bytes[luma..<luma + chroma]), Array(bytes[luma + chroma..<luma + 2 * chroma]))
    }

    /// The output's audio as mono 32-bit float samples at 44.1 kHz.
    private func samples(_ path: String) throws -> [Float] {
        let raw = try Media.scratch().appendingPathComponent("audio.f32").path
        try Media.ffmpeg(["-i", path, "-vn", "-ac", "1", "-ar", "44100", "-f", "f32le", raw])
        let data = try Data(contentsOf: URL(fileURLWithPath: raw))
        return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    private func mean(_ values: [UInt8]) -> Double { Double(values.reduce(0) { $0 + Int($1) }) / Double(max(1, values.count)) }

    private func rms(_ values: [Float]) -> Double {
        let middle = values.dropFirst(values.count / 10).dropLast(values.count / 10)
        return sqrt(middle.reduce(0) { $0 + Double($1) * Double($1) } / Double(max(1, middle.count)))
    }

    /// Dominant frequency of a tone from its rising zero crossings, in Hz.
    private func frequency(_ values: [Float]) -> Double {
        let middle = Array(values.dropFirst(values.count / 10).dropLast(values.count / 10))
        let crossings = zip(middle, middle.dropFirst()).filter { $0 < 0 && $1 >= 0 }.count
        return Double(crossings) / (Double(middle.count) / 44_100)
    }

    @Test func grayscaleFlattensChromaAndBrightnessRaisesLuma() throws {
        let input = try Media.path(.standard)
        let plain = try planes(try transcode(input, "{}"))
        #expect(plain.u.contains { abs(Int($0) - 128) > 20 }, "the test picture has colour")
        let gray = try planes(try transcode(input, #"{"filters": {"video": {"grayscale": true}}}"#))
        #expect(gray.u.allSatisfy { abs(Int($0) - 128) <= 2 } && gray.v.allSatisfy { abs(Int($0) - 128) <= 2 })
        let bright = try planes(try transcode(input, #"{"filters": {"video": {"brightness": 0.2}}}"#))
        #expect(mean(bright.y) > mean(plain.y) + 20, "luma \(mean(plain.y)) → \(mean(bright.y))")
    }

    /// Picture adjustments on an RGB source (PNG in QuickTime, as screen recorders and exports write) keep its
    /// colours: `hue` and `eq` take Y'CbCr, and FFmpeg's own conversion (BT.601, limited range) was read as the
    /// full range the source says, so black came out grey (16) and white light grey (235), and red went orange.
    @Test func adjustmentsOfAnRGBSourceKeepItsColours() throws {
        let input = try Media.scratch().appendingPathComponent("rgb.mov").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=black:s=320x720:d=1", "-f", "lavfi", "-i", "color=white:s=320x720:d=1",
                          "-f", "lavfi", "-i", "color=red:s=320x720:d=1", "-f", "lavfi", "-i", "color=blue:s=320x720:d=1",
                          "-filter_complex", "[0][1][2][3]hstack=4,format=rgb24", "-c:v", "png", "-r", "5", input])
        let gray = try transcode(input, #"{"filters": {"video": {"grayscale": true}}}"#)
        let black = try Probe.meanColor(gray, x: 60, y: 300, width: 200, height: 200)
        let white = try Probe.meanColor(gray, x: 380, y: 300, width: 200, height: 200)
        #expect(black.allSatisfy { $0 < 5 } && white.allSatisfy { $0 > 250 }, "black \(black), white \(white)")
        let adjusted = try transcode(input, #"{"filters": {"video": {"brightness": 0.001}}}"#)
        let red = try Probe.meanColor(adjusted, x: 700, y: 300, width: 200, height: 200)
        let blue = try Probe.meanColor(adjusted, x: 1020, y: 300, width: 200, height: 200)
        #expect(red[0] > 240 && red[1] < 15 && red[2] < 15, "red \(red)")
        #expect(blue[0] < 15 && blue[1] < 15 && blue[2] > 240, "blue \(blue)")
    }

    @Test func cropComesBeforeTheGeometry() throws {
        let input = try Media.path(.standard)
        // A square out of the 16:9 picture: its shape and its pixels come out right only if the crop comes first.
        let output = try transcode(input, #"{"filters": {"video": {"crop": {"x": 100, "y": 50, "width": 200, "height": 200}}}, "video": {"width": 160}}"#)
        let video = try #require(try Probe.read(output).video)
        #expect(video.width == 160 && video.height == 160)
        let reference = try Media.scratch().appendingPathComponent("reference.mp4").path
        try Media.ffmpeg(["-i", input, "-vf", "crop=200:200:100:50,scale=160:160", "-c:v", "libx264", "-crf", "12", "-pix_fmt", "yuv420p", reference])
        let ours = try planes(output).y, theirs = try planes(reference).y
        #expect(ours.count == theirs.count)
        let difference = Double(zip(ours, theirs).reduce(0) { $0 + abs(Int($1.0) - Int($1.1)) }) / Double(max(1, ours.count))
        #expect(difference < 6, "mean luma difference from ffmpeg's crop,scale: \(difference)")
        #expect { try transcode(input, #"{"filters": {"video": {"crop": {"x": 600, "y": 0, "width": 320, "height": 180}}}}"#) }
            throws: { ($0 as? MediaError)?.message.hasPrefix("filters.video.crop:") == true }
    }

    @Test func pitchDoublesTheFrequencyAtTheSameDuration() throws {
        let input = try Media.path(.audioOnly)
        let plain = try samples(try transcode(input, "{}"))
        let shifted = try samples(try transcode(input, #"{"filters": {"audio": {"pitch": 2.0}}}"#))
        #expect(abs(frequency(plain) - 440) < 10, "source tone \(frequency(plain)) Hz")
        #expect(abs(frequency(shifted) - 880) < 25, "shifted tone \(frequency(shifted)) Hz")
        #expect(abs(Double(shifted.count) - Double(plain.count)) / Double(plain.count) < 0.03, "same duration")
    }

    /// Loud 5.1 sound mixed down to stereo stays within full scale: the default mix adds the centre and surround
    /// channels to each side, which took a source peaking at -1.2 dBFS to +6.4 dBFS (clipping in every player).
    @Test func aLoudSurroundMixDownDoesNotClip() throws {
        let input = try Media.scratch().appendingPathComponent("loud51.wav").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "sine=f=440:r=48000:d=3", "-af", "volume=7,pan=5.1|c0=c0|c1=c0|c2=c0|c3=c0|c4=c0|c5=c0",
                          "-c:a", "pcm_f32le", input])
        #expect(try Self.peak(input) > -2, "the source is loud")
        let output = try transcode(input, "{}")
        #expect(try Probe.read(output).audio?.channels == 2)
        let peak = try Self.peak(output)
        #expect(peak <= 0.5, "the stereo mix peaks at \(peak) dBFS") // AAC's own ripple may add a few tenths
        // A mix into as many channels adds some together too: quad into four channels (4.0) puts both back channels
        // into its one back centre, which peaked at +2.3 dBFS (loud tones on each, -0.9 dBFS).
        let quad = try Media.scratch().appendingPathComponent("quad.wav").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "aevalsrc=0.9*sin(2*PI*250*t)|0.9*sin(2*PI*350*t)|0.9*sin(2*PI*450*t)|0.9*sin(2*PI*550*t):c=quad:s=48000:d=3",
                          "-c:a", "pcm_f32le", quad])
        let mixed = try transcode(quad, #"{"audio": {"channels": 4, "bitRate": 384000}}"#)
        #expect(try Probe.read(mixed).audio?.channels == 4)
        let quadPeak = try Self.peak(mixed)
        #expect(quadPeak <= 0.5, "the four-channel mix peaks at \(quadPeak) dBFS")
    }

    /// The highest sample of a file's first audio track, dBFS, as decoded to floats (ffmpeg's astats: volumedetect
    /// works on 16-bit samples, which stop at full scale and would hide the clipping).
    private static func peak(_ path: String) throws -> Double {
        let run = try Shell.run("ffmpeg", ["-nostdin", "-i", path, "-map", "0:a:0", "-af", "astats=measure_perchannel=none",
                                           "-f", "null", "-"])
        let line = try #require(run.stderr.split(separator: "\n").last { $0.contains("Peak level dB:") })
        return try #require(Double(line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? ""))
    }

    @Test func tempoHalvesTheDurationAndVolumeLowersTheLevel() throws {
        let input = try Media.path(.standard)
        let fast = try Probe.read(try transcode(input, #"{"filters": {"audio": {"tempo": 2.0}}}"#))
        #expect(abs(fast.format.durationSeconds - 2) < 0.1, "duration \(fast.format.durationSeconds)")
        #expect(abs((fast.video?.durationSeconds ?? 0) - 2) < 0.1 && abs((fast.audio?.durationSeconds ?? 0) - 2) < 0.1)
        let plain = rms(try samples(try transcode(input, "{}")))
        let quiet = rms(try samples(try transcode(input, #"{"filters": {"audio": {"volume": 0.5}}}"#)))
        let decibels = 20 * log10(quiet / plain)
        #expect(abs(decibels + 6.02) < 0.5, "volume 0.5 changed the level by \(decibels) dB")
    }

    /// A tempo plays the pictures faster: twice as many a second at 2. The encoder was told the source's rate, so
    /// key frames came every second instead of every 2 s and x264's level was chosen for half the real rate; and a
    /// coarse time base (an AVI's 1/25) put two sped-up pictures on one tick, one of them dropped.
    @Test func aTempoKeepsEveryPictureAtItsNewRate() throws {
        let fast = try transcode(try Media.path(.tenSeconds), #"{"filters": {"audio": {"tempo": 2}}}"#)
        let probe = try Probe.read(fast)
        #expect(abs((probe.video?.frameRate ?? 0) - 60) < 0.5, "\(probe.video?.avg_frame_rate ?? "")")
        let keys = try Probe.keyFrames(fast)
        // At most 2 s of the output (120 pictures) apart, x264 free to cut earlier; the source's count (60) was the
        // most before.
        let gaps = zip(keys.keyFrames, keys.keyFrames.dropFirst() + [keys.frameCount]).map { $1 - $0 }
        #expect(abs(keys.frameCount - 300) <= 1 && gaps.allSatisfy { $0 <= 120 } && gaps.contains { $0 > 60 },
                "key frames \(keys.keyFrames) of \(keys.frameCount)")
        let level = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=level", "-of", "csv=p=0", fast])
        #expect(Int(level.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 31, "640×360 at 60 fps needs level 3.1: \(level)")
        // 2 s at 25 fps in an AVI (time base 1/25): 50 pictures in 1 s.
        let avi = try Probe.keyFrames(try transcode(try Media.path(.anamorphic), #"{"filters": {"audio": {"tempo": 2}}}"#))
        #expect(abs(avi.frameCount - 50) <= 1, "\(avi.frameCount) pictures")
    }

    /// The integrated loudness (EBU R128) of a file's sound, LUFS.
    private func loudness(_ path: String) throws -> Double? {
        let report = try Shell.run("ffmpeg", ["-nostdin", "-i", path, "-af", "ebur128", "-f", "null", "-"]).stderr
        return report.split(separator: "\n").last { $0.contains("I:") && $0.contains("LUFS") }
            .flatMap { line in line.split(separator: " ").compactMap { Double($0) }.first }
    }

    @Test func normalizeReachesTheLoudnessTarget() throws {
        let output = try transcode(try Media.path(.audioOnly), #"{"filters": {"audio": {"volume": 0.1, "normalize": true}}}"#)
        let integrated = try loudness(output)
        #expect(integrated.map { abs($0 + 16) < 2 } == true, "integrated loudness \(String(describing: integrated)) LUFS")
    }

    /// The loudness is that of the sound the output holds: measured on the six channels of 5.1 before their mix down
    /// to stereo (which scales them so that none can clip), six speakers of unrelated noise came out at -30.7 LUFS
    /// for -16 asked.
    @Test func normalizeMeasuresTheMixTheOutputHolds() throws {
        let source = try Media.scratch().appendingPathComponent("surround.mkv").path
        let noise = (1...6).flatMap { ["-f", "lavfi", "-i", "anoisesrc=c=pink:r=48000:d=8:a=0.3:seed=\($0)"] }
        try Media.ffmpeg(noise + ["-filter_complex", "[0][1][2][3][4][5]join=inputs=6:channel_layout=5.1", "-c:a", "flac", source])
        let stereo = try loudness(try transcode(source, #"{"filters": {"audio": {"normalize": true}}}"#))
        #expect(stereo.map { abs($0 + 16) < 1 } == true, "integrated loudness \(String(describing: stereo)) LUFS")
        let mono = try loudness(try transcode(source, #"{"audio": {"channels": 1}, "filters": {"audio": {"normalize": true}}}"#))
        #expect(mono.map { abs($0 + 16) < 1 } == true, "integrated loudness \(String(describing: mono)) LUFS")
    }

    @Test func filterSettingsAreValidated() {
        for (json, key) in [(#"{"filters": {"video": {"blur": 3}}}"#, "filters.video.blur"),
                            (#"{"filters": {"audio": {"pitch": 4}}}"#, "filters.audio.pitch"),
                            (#"{"filters": {"video": {"brightness": "x"}}}"#, "filters.video.brightness"),
                            (#"{"filters": {"graph": "movie=/etc/passwd"}}"#, "filters.graph")] {
            #expect { try TranscodeSettings.parse(Data(json.utf8)) } throws: { ($0 as? SettingsError)?.key == key }
        }
    }

    /// A copied track's packets pass as they are: its filters were silently ignored, and a tempo sped up the
    /// encoded track only, so picture and sound drifted apart from the first second.
    @Test func filtersOfACopiedTrackAreRefused() throws {
        for (json, key) in [(#"{"video": "copy", "filters": {"video": {"grayscale": true}}}"#, "filters.video"),
                            (#"{"audio": "copy", "filters": {"audio": {"volume": 2}}}"#, "filters.audio"),
                            (#"{"audio": "copy", "filters": {"audio": {"tempo": 2}}}"#, "filters.audio.tempo"),
                            (#"{"video": "copy", "filters": {"audio": {"tempo": 1.5}}}"#, "filters.audio.tempo")] {
            // Read as stored settings are (a job stored before the rule still reads), refused where settings come in
            // and when the job runs.
            let settings = try TranscodeSettings.parse(Data(json.utf8))
            #expect { try settings.checkCopiedTrackFilters() } throws: { ($0 as? SettingsError)?.key == key }
            let output = try Media.scratch().appendingPathComponent("out.mp4").path
            #expect { try TranscodeSession(inputPath: try Media.path(.standard), outputPath: output, settings: settings).run() } throws: {
                ($0 as? MediaError)?.code == "invalid_settings" && ($0 as? MediaError)?.message.hasPrefix(key + ":") == true
            }
        }
        // The encoded track's filters beside a copied one, neutral values, and a tempo with the other track left out.
        for json in [#"{"video": "copy", "filters": {"audio": {"volume": 2}}}"#, #"{"audio": "copy", "filters": {"video": {"grayscale": true}}}"#,
                     #"{"audio": "copy", "filters": {"audio": {"volume": 1, "tempo": 1}}}"#,
                     #"{"video": null, "filters": {"audio": {"tempo": 2}}}"#] {
            try TranscodeSettings.parse(Data(json.utf8)).checkCopiedTrackFilters()
        }
    }
}
