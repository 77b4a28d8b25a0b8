import Foundation
@testable import Pipeline
import Locks
import Testing
import TestSupport

/// End-to-end transcodes of generated clips, each output checked with ffprobe.
@Suite(.serialized) struct TranscodeSessionTests {
    struct Run {
        let result: TranscodeResult
        let output: String
        let folder: URL
        let probe: Probe
    }

    private func transcode(_ input: String, _ json: String = "{}", name: String = "out.mp4",
                           progress: (TranscodeProgress) -> Void = { _ in }) throws -> Run {
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent(name).path
        let settings = try TranscodeSettings.parse(Data(json.utf8))
        let session = TranscodeSession(inputPath: input, outputPath: output, settings: settings)
        let result = try session.run(progress: progress)
        #expect(Media.files(in: folder) == [name], "only the finished output is left")
        try? FileManager.default.removeItem(atPath: folder.appendingPathComponent("reference.mp4").path)
        return Run(result: result, output: output, folder: folder, probe: try Probe.read(output))
    }

    @Test func defaultSettingsGiveH264HighAndAACStereo() throws {
        let run = try transcode(try Media.path(.standard))
        let video = try #require(run.probe.video)
        let audio = try #require(run.probe.audio)
        #expect(video.codec_name == "h264" && video.profile == "High" && video.pix_fmt == "yuv420p")
        #expect(video.width == 640 && video.height == 360)
        #expect(audio.codec_name == "aac" && audio.profile == "LC" && audio.sampleRate == 44_100 && audio.channels == 2)
        #expect(abs(run.probe.format.durationSeconds - 4) < 0.1)
        #expect(abs(video.startTime - audio.startTime) <= 1.0 / 30, "audio and video start within a frame")
        #expect(run.result.tracks.map(\.mediaType) == [.video, .audio])
        #expect(run.result.mimeType == "video/mp4")
        #expect(run.result.size == (try FileManager.default.attributesOfItem(atPath: run.output)[.size] as? Int))
    }

    /// Three channels with no layout said (PCM in Matroska) are left, right and centre, not FFmpeg's guess of 2.1,
    /// whose third channel is low-frequency effects that a stereo downmix leaves out: sound only there came out
    /// silent. Asked for three, the output is 3.0 (AAC's own configuration), not 2.1 with an empty LFE.
    @Test func threeChannelsAreLeftRightAndCentre() throws {
        let source = try Media.scratch().appendingPathComponent("centre.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "aevalsrc=0|0|0.5*sin(2*PI*500*t):s=48000:d=2", "-c:a", "pcm_s16le", source])
        let stereo = try transcode(source, name: "out.m4a")
        let mean = try Media.meanVolume(of: stereo.output)
        #expect((mean ?? -200) > -20, "the centre is heard in stereo: \(mean.map { String($0) } ?? "no level") dB")
        let three = try transcode(source, #"{"audio": {"channels": 3}}"#, name: "three.m4a")
        let layout = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "a:0", "-show_entries", "stream=channel_layout",
                                                 "-of", "csv=p=0", three.output])
        #expect(layout.trimmingCharacters(in: .whitespacesAndNewlines) == "3.0", "\(layout)")
    }

    /// A 360° video's first-order ambisonic sound field (Opus family 2, as YouTube's spatial audio) is decoded to
    /// stereo: a source on the left (W 1, Y 0.5) is louder on the left, by 20·log10(0.75 / 0.25) ≈ 9.5 dB. The job
    /// failed: swresample refuses the layout ("Starting the audio resampler failed: Invalid argument").
    @Test func anAmbisonicSoundFieldIsDecodedToStereo() throws {
        let source = try Media.scratch().appendingPathComponent("ambisonic.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:d=2", "-f", "lavfi", "-i", "sine=f=440:d=2",
                          "-filter_complex", "[1]pan=4c|c0=c0|c1=0.5*c0|c2=0*c0|c3=0*c0[a]", "-map", "0", "-map", "[a]",
                          "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "libopus", "-mapping_family", "2", source])
        let run = try transcode(source)
        #expect(run.probe.audio?.channels == 2 && abs((run.probe.audio?.durationSeconds ?? 0) - 2) < 0.1)
        func level(_ channel: String) throws -> Double { try Media.meanVolume(of: run.output, after: "pan=mono|c0=\(channel)") ?? -200 }
        let left = try level("c0"), right = try level("c1")
        #expect(left > -30 && abs(left - right - 9.5) < 1.5, "left \(left) dB, right \(right) dB")
    }

    /// Layouts swresample will not mix are mixed by side: ten unlabelled channels (a field recorder's tracks, PCM in
    /// Matroska), channel 3 (odd: right) carrying the sound, and a WAV whose mask names the back pair only. The job
    /// failed ("Starting the audio resampler failed: Invalid argument"), its video with it.
    @Test func layoutsTheResamplerWillNotMixAreMixedBySide() throws {
        let folder = try Media.scratch()
        func level(_ file: String, _ channel: String) throws -> Double { try Media.meanVolume(of: file, after: "pan=mono|c0=\(channel)") ?? -200 }
        let ten = folder.appendingPathComponent("ten.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:d=2", "-f", "lavfi",
                          "-i", "aevalsrc=0|0|0|0.5*sin(2*PI*500*t)|0|0|0|0|0|0:s=48000:d=2",
                          "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "pcm_s16le", ten])
        let run = try transcode(ten)
        #expect(run.probe.video != nil && run.probe.audio?.channels == 2)
        let left = try level(run.output, "c0"), right = try level(run.output, "c1")
        #expect(right > -40 && right - left > 20, "channel 3 on the right: left \(left) dB, right \(right) dB")
        // Sixteen and twenty-four, the sound on channel 13 or 21: swresample takes them for its own layouts
        // (hexadecagonal, 22.2) and mixes without their top and wide channels, so channels 8 and up were silent;
        // mixed by side, the odd channel is on the right.
        for (count, loud) in [(16, 13), (24, 21)] {
            let many = folder.appendingPathComponent("many-\(count).mkv").path
            let channels = (0..<count).map { $0 == loud ? "0.5*sin(2*PI*500*t)" : "0" }.joined(separator: "|")
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:d=2", "-f", "lavfi", "-i", "aevalsrc=\(channels):s=48000:d=2",
                              "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "pcm_s16le", many])
            // And through audio filters: labelled with FFmpeg's default layout in the graph, 16 came out as speakers
            // whose top and wide channels the mix left silent (and 10 failed the job).
            for filters in ["{}", #"{"filters": {"audio": {"volume": 0.9}}}"#] {
                let run = try transcode(many, filters, name: "many-\(count).mp4")
                let manyLeft = try level(run.output, "c0"), manyRight = try level(run.output, "c1")
                #expect(manyRight > -40 && manyRight - manyLeft > 20,
                        "\(count) channels, \(loud) on the right, \(filters): left \(manyLeft) dB, right \(manyRight) dB")
            }
        }
        let filtered = try transcode(ten, #"{"filters": {"audio": {"normalize": true}}}"#, name: "ten-filtered.mp4")
        #expect(try level(filtered.output, "c1") - (try level(filtered.output, "c0")) > 20, "channel 3 on the right through the filters")
        // The pitch filter (FFmpeg's rate change) takes speakers only: refused in words, not "Invalid argument".
        let pitched = TranscodeSession(inputPath: ten, outputPath: folder.appendingPathComponent("pitched.mp4").path,
                                       settings: try TranscodeSettings.parse(Data(#"{"filters": {"audio": {"pitch": 1.1}}}"#.utf8)))
        let refused = #expect(throws: MediaError.self) { try pitched.run() }
        #expect(refused?.message.hasPrefix("filters.audio.pitch: FFmpeg cannot change the pitch of more than 8 unlabelled channels") == true,
                "\(String(describing: refused))")
        // A WAV whose channel mask is the back pair alone (0x30), written here: FFmpeg's own tools refuse to make one.
        /// A two-channel WAV with channel `mask`, a tone on the channels `loud` says.
        func twoChannelWAV(_ name: String, mask: UInt32, loud: (Bool, Bool)) throws -> String {
            var wav = Data()
            func put<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { wav.append(contentsOf: $0) } }
            let frames = 96_000
            wav.append(contentsOf: Array("RIFF".utf8)); put(UInt32(4 + 48 + 8 + frames * 4)); wav.append(contentsOf: Array("WAVE".utf8))
            wav.append(contentsOf: Array("fmt ".utf8)); put(UInt32(40)); put(UInt16(0xFFFE)); put(UInt16(2)); put(UInt32(48_000))
            put(UInt32(192_000)); put(UInt16(4)); put(UInt16(16)); put(UInt16(22)); put(UInt16(16)); put(mask)
            wav.append(contentsOf: [0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71])
            wav.append(contentsOf: Array("data".utf8)); put(UInt32(frames * 4))
            for index in 0..<frames {
                let sample = Int16(8000 * sin(2 * Double.pi * 500 * Double(index) / 48_000))
                put(loud.0 ? sample : 0); put(loud.1 ? sample : 0)
            }
            let path = folder.appendingPathComponent(name).path
            try wav.write(to: URL(fileURLWithPath: path))
            return path
        }
        let back = try twoChannelWAV("back.wav", mask: 0x30, loud: (true, true))
        let layout = try Shell.check("ffprobe", ["-v", "error", "-show_entries", "stream=channel_layout", "-of", "csv=p=0", back])
        #expect(layout.contains("BL+BR"), "\(layout)")
        let pair = try transcode(back, name: "back.m4a")
        #expect(try level(pair.output, "c0") > -40 && (try level(pair.output, "c1")) > -40)
        // A front left and a centre (0x5), the sound on the centre: in the middle, both sides alike. Each side's mix
        // scaled on its own put it 5 dB louder on the right (the left's weights, with the front left's, were cut
        // more).
        let centre = try transcode(try twoChannelWAV("centre.wav", mask: 0x5, loud: (false, true)), name: "centre.m4a")
        let centreLeft = try level(centre.output, "c0"), centreRight = try level(centre.output, "c1")
        #expect(centreLeft > -40 && abs(centreLeft - centreRight) < 1, "the centre at left \(centreLeft) dB, right \(centreRight) dB")
    }

    /// A broadcast whose sound changes layout with the same number of channels (quad, then 4.0: the side pair becomes
    /// a front and a back centre) is mixed by each part's own layout: the second part was mixed with the first's
    /// matrix (its front centre on the left alone, its back centre on the right alone), and through a filter the job
    /// failed ("Filtering failed: Invalid argument").
    @Test func aChangeOfChannelLayoutWithTheSameCountIsMixedByTheNewLayout() throws {
        let folder = try Media.scratch()
        var joined = Data()
        for (index, layout) in ["quad(side)", "4.0"].enumerated() {
            let part = folder.appendingPathComponent("part\(index).ts").path
            // Left 500 Hz, right 1 kHz; the third channel (side left, or front centre) 2 kHz, the fourth 3 kHz.
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=2", "-f", "lavfi",
                              "-i", "aevalsrc=0.3*sin(2*PI*500*t)|0.3*sin(2*PI*1000*t)|0.3*sin(2*PI*2000*t)|0.3*sin(2*PI*3000*t):s=48000:d=2:c=\(layout)",
                              "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "ac3", "-f", "mpegts", part])
            joined.append(try Data(contentsOf: URL(fileURLWithPath: part)))
        }
        let input = folder.appendingPathComponent("joined.ts").path
        try joined.write(to: URL(fileURLWithPath: input))
        for filters in ["{}", #"{"filters": {"audio": {"volume": 0.9}}}"#] {
            let run = try transcode(input, filters)
            // In the second part, both centres are in both channels.
            let second = folder.appendingPathComponent("second.wav").path
            try Media.ffmpeg(["-ss", "2.5", "-t", "1", "-i", run.output, "-vn", second])
            for (tone, channel) in [(2000, "c0"), (2000, "c1"), (3000, "c0"), (3000, "c1")] {
                // Three narrow band-passes in a row: the other tones are left 60 dB or more below.
                let band = Array(repeating: "bandpass=f=\(tone):width_type=q:w=10", count: 3).joined(separator: ",")
                let level = try Media.meanVolume(of: second, after: "pan=mono|c0=\(channel),\(band)") ?? -200
                #expect(level > -40, "\(filters): \(tone) Hz in \(channel) at \(level) dB")
            }
        }
    }

    /// A default audio track in a codec FFmpeg does not know (AC-4, MPEG-H; here Opus renamed) is passed over for
    /// the next one it can decode: the job failed with `unsupported_codec` for "the input's none track".
    @Test func anUndecodableDefaultTrackGivesWayToADecodableOne() throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("two.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:d=2", "-f", "lavfi", "-i", "sine=f=200:d=2",
                          "-f", "lavfi", "-i", "sine=f=3000:d=2", "-map", "0", "-map", "1", "-map", "2", "-c:v", "libx264",
                          "-preset", "ultrafast", "-c:a:0", "libopus", "-c:a:1", "aac", "-disposition:a:0", "default",
                          "-disposition:a:1", "0", source])
        var bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let codecID = try #require(bytes.range(of: Data("A_OPUS".utf8)))
        bytes.replaceSubrange(codecID, with: Data("A_XYZW".utf8))
        try bytes.write(to: URL(fileURLWithPath: source))
        let tracks = try MediaReader(path: source).tracks.filter { $0.mediaType == .audio }
        #expect(tracks.count == 2)
        let run = try transcode(source)
        let audio = try #require(run.probe.audio)
        #expect(abs(audio.durationSeconds - 2) < 0.1)
        // The second track's 3000 Hz tone, not the first's 200 Hz one (which the high-pass filter takes away).
        let level = try Media.meanVolume(of: run.output, after: "highpass=f=1500,highpass=f=1500") ?? -200
        #expect(level > -28, "the 3000 Hz tone is there: \(level) dB")
        // With no other, the refusal says what the track is: it spoke of "the input's none track".
        let alone = folder.appendingPathComponent("alone.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:d=1", "-f", "lavfi", "-i", "sine=d=1", "-c:v", "libx264",
                          "-preset", "ultrafast", "-c:a", "libopus", alone])
        var single = try Data(contentsOf: URL(fileURLWithPath: alone))
        single.replaceSubrange(try #require(single.range(of: Data("A_OPUS".utf8))), with: Data("A_XYZW".utf8))
        try single.write(to: URL(fileURLWithPath: alone))
        #expect { try transcode(alone) } throws: { error in
            guard let error = error as? MediaError else { return false }
            return error.code == "unsupported_codec" && error.message.contains("audio track in a codec FFmpeg does not know")
        }
    }

    @Test func mp4IsWrittenWithTheIndexFirst() throws {
        let run = try transcode(try Media.path(.standard))
        let data = try Data(contentsOf: URL(fileURLWithPath: run.output))
        var offset = 0
        var atoms: [String] = []
        while offset + 8 <= data.count {
            let size = data[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            atoms.append(String(decoding: data[offset + 4..<offset + 8], as: UTF8.self))
            guard size >= 8 else { break }
            offset += size
        }
        let moov = try #require(atoms.firstIndex(of: "moov"))
        let mdat = try #require(atoms.firstIndex(of: "mdat"))
        #expect(moov < mdat, "atoms: \(atoms)")
    }

    @Test func bitRateAndKeyFrameIntervalAreHonoured() throws {
        let run = try transcode(try Media.path(.tenSeconds), """
            {"video": {"averageBitRate": 800000, "maxKeyFrameInterval": 25, "profile": "main", "level": "3.1"},
             "audio": {"bitRate": 96000}}
            """)
        let video = try #require(run.probe.video)
        #expect(video.profile == "Main")
        #expect(abs(video.bitRate - 800_000) / 800_000 <= 0.15, "video bit rate \(video.bitRate)")
        let audio = try #require(run.probe.audio)
        #expect(abs(audio.bitRate - 96_000) / 96_000 <= 0.15, "audio bit rate \(audio.bitRate)")
        let (keys, count) = try Probe.keyFrames(run.output)
        #expect(count == 300)
        let gaps = zip(keys.dropFirst(), keys).map { $0 - $1 } + [count - (keys.last ?? 0)]
        #expect(keys.first == 0 && gaps.allSatisfy { $0 <= 25 }, "key frames at \(keys)")
        #expect(abs(run.probe.format.durationSeconds - 10) < 0.1)
    }

    /// A level the picture cannot be: x264 only warned and labelled the stream with it (a 640×360 stream "level
    /// 1.0", which decoders holding to the level refuse). The job fails naming the key; a level that fits is kept.
    @Test func aLevelThePictureCannotBeIsRefused() throws {
        let folder = try Media.scratch()
        for (json, problem) in [(#"{"video": {"level": "1"}}"#, "macroblocks (28 a side); 640×360 has 920"),
                                (#"{"video": {"level": "3", "width": 720, "height": 576, "scalingMode": "fill", "allowUpscaling": true}}"#,
                                 "macroblocks a second; 720×576 at 30.000 fps")] {
            let session = TranscodeSession(inputPath: try Media.path(.standard), outputPath: folder.appendingPathComponent("out.mp4").path,
                                           settings: try TranscodeSettings.parse(Data(json.utf8)))
            let error = #expect(throws: MediaError.self) { try session.run() }
            #expect(error?.code == "invalid_settings" && error?.message.hasPrefix("video.level: ") == true
                    && error?.message.contains(problem) == true, "\(json): \(String(describing: error))")
            #expect(Media.files(in: folder).isEmpty)
        }
        let fits = try transcode(try Media.path(.standard), #"{"video": {"level": "3"}}"#)
        #expect(fits.probe.video?.level == 30, "\(String(describing: fits.probe.video?.level))")
    }

    /// The job itself names `thumbnails.width` too when the thumbnails of a tall, narrow picture would be larger
    /// than any output may be (it told to set the video's size, which was not at fault).
    @Test func thumbnailsLargerThanAnyOutputFailNamingTheirKey() throws {
        let folder = try Media.scratch()
        let tall = folder.appendingPathComponent("tall.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=64x2048:r=10:d=1", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", tall])
        let session = TranscodeSession(inputPath: tall, outputDirectory: folder.appendingPathComponent("out").path,
                                       settings: try TranscodeSettings.parse(Data(#"{"container": "hls", "thumbnails": {"interval": 1, "width": 1920}}"#.utf8)))
        let error = #expect(throws: MediaError.self) { try session.run() }
        #expect(error?.code == "output_too_large" && error?.message.hasPrefix("thumbnails.width: at 1920 px wide") == true, "\(String(describing: error))")
    }

    @Test func defaultKeyFrameIntervalIsTwoSeconds() throws {
        let run = try transcode(try Media.path(.tenSeconds))
        let (keys, count) = try Probe.keyFrames(run.output)
        #expect(count == 300)
        // At most 2 s (60 frames) apart, and not many more than that needs: an all-key-frame output fails here.
        let gaps = zip(keys.dropFirst(), keys).map { $0 - $1 } + [count - (keys.last ?? 0)]
        #expect(gaps.allSatisfy { $0 <= 60 }, "key frames at \(keys)")
        #expect(keys.count <= 8, "\(keys.count) key frames in 10 s: \(keys)")
    }

    /// A rate above the source's keeps the source's: pictures are never repeated, so the stream was told 60 while
    /// holding 30 a second, and its key frames, counted in pictures for 60, came 4 s apart.
    @Test func aFrameRateAboveTheSourcesKeepsTheSourcesRate() throws {
        let run = try transcode(try Media.path(.tenSeconds), #"{"video": {"frameRate": 60, "preset": "ultrafast"}}"#)
        let video = try #require(run.probe.video)
        #expect(abs(video.frameRate - 30) < 0.01, "frame rate \(video.frameRate)")
        let (keys, count) = try Probe.keyFrames(run.output)
        #expect(count == 300)
        let gaps = zip(keys.dropFirst(), keys).map { $0 - $1 } + [count - (keys.last ?? 0)]
        #expect(gaps.allSatisfy { $0 <= 60 }, "key frames at \(keys)")
    }

    /// A variable source's average is not a ceiling: asked 15 of one averaging 12 with bursts at 30, the output's
    /// pictures still come at most 15 a second.
    @Test func aFrameRateAboveAVariableSourcesAverageStillCapsIt() throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("bursts.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", #"testsrc2=s=320x180:r=30:d=4,select=lt(mod(n\,30)\,10)"#, "-vsync", "vfr",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", source])
        let sourceVideo = try #require(try Probe.read(source).video)
        #expect(sourceVideo.nb_frames == "40" && abs(sourceVideo.frameRate - 12) < 0.5, "the source is variable: \(sourceVideo)")
        let run = try transcode(source, #"{"video": {"frameRate": 15, "preset": "ultrafast"}}"#)
        let times = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time",
                                                "-of", "csv=p=0", run.output])
            .split(separator: "\n").compactMap { Double($0) }.sorted()
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
        #expect(times.count >= 10 && gaps.allSatisfy { $0 > 1.0 / 15 - 0.002 }, "pictures at \(times)")
    }

    @Test func scalingModesShapeTheOutput() throws {
        let input = try Media.path(.standard)
        let width = try transcode(input, #"{"video": {"width": 320}}"#).probe.video
        #expect(width?.width == 320 && width?.height == 180)
        let fit = try transcode(input, #"{"video": {"width": 400, "height": 400, "scalingMode": "fit"}}"#).probe.video
        #expect(fit?.width == 400 && fit?.height == 226)
        let fill = try transcode(input, #"{"video": {"width": 400, "height": 400, "scalingMode": "fill"}}"#).probe.video
        #expect(fill?.width == 400 && fill?.height == 400 && fill?.sample_aspect_ratio == "1:1")
        let stretch = try transcode(input, #"{"video": {"width": 200, "height": 400, "scalingMode": "stretch"}}"#).probe.video
        #expect(stretch?.width == 200 && stretch?.height == 400)
    }

    /// A 1-bit picture (a black-and-white PNG) filled into a square loses its left and right bands, as any other
    /// does: FFmpeg crops such pictures on the right only, and the left band was squeezed into the output.
    @Test func aOneBitPictureIsCroppedOnBothSides() throws {
        let input = try Media.scratch().appendingPathComponent("mono.mov").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=white:s=40x240:d=1", "-f", "lavfi", "-i", "color=black:s=240x240:d=1",
                          "-f", "lavfi", "-i", "color=white:s=40x240:d=1", "-filter_complex", "[0][1][2]hstack=3,format=monob",
                          "-c:v", "png", input])
        let run = try transcode(input, #"{"video": {"width": 240, "height": 240, "scalingMode": "fill"}}"#)
        #expect(run.probe.video?.width == 240 && run.probe.video?.height == 240)
        for x in [0, 220] {
            let edge = try Probe.meanColor(run.output, x: x, y: 20, width: 20, height: 200)
            #expect(edge.allSatisfy { $0 < 20 }, "black at \(x), the white bands cut off: \(edge)")
        }
    }

    @Test(arguments: [Media.Clip.rotated90, .rotated270])
    func rotatedSourcesComeOutUprightAsFFmpegShowsThem(clip: Media.Clip) throws {
        let input = try Media.path(clip)
        #expect(try Probe.read(input).video?.rotation != 0, "the fixture carries a quarter-turn display matrix")
        let run = try transcode(input)
        let video = try #require(run.probe.video)
        #expect(video.width == 240 && video.height == 320)
        #expect(video.rotation == 0)
        // The source is red over blue. ffmpeg's own autorotate shows how players turn it; ours must match.
        let reference = run.folder.appendingPathComponent("reference.mp4").path
        try Media.ffmpeg(["-i", input, "-c:v", "libx264", "-preset", "ultrafast", reference])
        for x in [10, 150] {
            let ours = try Probe.meanColor(run.output, x: x, y: 100, width: 80, height: 120)
            let theirs = try Probe.meanColor(reference, x: x, y: 100, width: 80, height: 120)
            #expect(zip(ours, theirs).allSatisfy { abs($0 - $1) < 20 }, "x=\(x): ours \(ours), ffmpeg \(theirs)")
            #expect(ours.max()! > 180, "a saturated colour, not a blend: \(ours)")
        }
        let left = try Probe.meanColor(run.output, x: 10, y: 100, width: 80, height: 120)
        let right = try Probe.meanColor(run.output, x: 150, y: 100, width: 80, height: 120)
        #expect((left[0] > 180) != (right[0] > 180), "red on one side only")
    }

    /// A display matrix that mirrors the picture (a front camera's recording, a flipped one): `matrix` is its
    /// a, b, c, d (row vectors: x' = a·x + c·y), written into the MP4's `tkhd`. The source is 320×240, blue with a
    /// red top-left quarter; `red` is where that quarter must show. Read as a rotation alone, a mirror came out
    /// upside down (a half turn) and a vertical flip not flipped at all.
    @Test(arguments: [
        ([-1, 0, 0, 1], 0, "top-right"),     // left-right mirror
        ([1, 0, 0, -1], 180, "bottom-left"), // upside-down mirror: the left-right one, then a half turn
        ([0, -1, -1, 0], 90, "bottom-right"), // mirrored, then a clockwise quarter turn
        ([0, 1, 1, 0], 270, "top-left"),      // mirrored, then a counter-clockwise quarter turn: a transpose
    ])
    func mirroringDisplayMatricesAreApplied(matrix: [Int32], rotation: Int, red: String) throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("mirrored.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=blue:s=320x240:r=30:d=1,drawbox=x=0:y=0:w=160:h=120:color=red:t=fill",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        try Self.setDisplayMatrix(matrix, of: input)
        let track = try #require(try TranscodeSession.probe(path: input).first)
        #expect(track.mirrored == true && track.rotation == rotation, "\(String(describing: track.mirrored)), \(String(describing: track.rotation))")

        let run = try transcode(input)
        let video = try #require(run.probe.video)
        let (width, height) = rotation % 180 == 0 ? (320, 240) : (240, 320)
        #expect(video.width == width && video.height == height && video.rotation == 0)
        let quarters = [("top-left", 0, 0), ("top-right", width / 2, 0), ("bottom-left", 0, height / 2),
                        ("bottom-right", width / 2, height / 2)]
        for (name, x, y) in quarters {
            let color = try Probe.meanColor(run.output, x: x + 20, y: y + 20, width: width / 2 - 40, height: height / 2 - 40)
            if name == red {
                #expect(color[0] > 180 && color[2] < 80, "\(name) is red: \(color)")
            } else {
                #expect(color[2] > 180 && color[0] < 80, "\(name) is blue: \(color)")
            }
        }
    }

    /// Writes the display matrix a, b, c, d (row vectors: x' = a·x + c·y) into the MP4's `tkhd`.
    private static func setDisplayMatrix(_ matrix: [Int32], of path: String) throws {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        let box = try #require(bytes.indices.dropLast(4).first { bytes[$0..<$0 + 4] == [0x74, 0x6B, 0x68, 0x64] }, "a tkhd box")
        // After the type: version and flags, then times of 4 bytes (version 0) or 8 (version 1), then 16 bytes.
        let start = box + 4 + (bytes[box + 4] == 1 ? 36 : 24) + 16
        for (offset, value) in [(0, matrix[0]), (4, matrix[1]), (12, matrix[2]), (16, matrix[3])] {
            let fixed = UInt32(bitPattern: value << 16)
            for byte in 0..<4 { bytes[start + offset + byte] = UInt8(truncatingIfNeeded: fixed >> (24 - 8 * byte)) }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// A watermark shows upright, unmirrored, unstretched and in the corner asked, whatever the display matrix and
    /// the sample aspect: it was laid on the stored picture as given, so a phone's portrait video showed it sideways
    /// in another corner, a front camera's mirrored (text backwards), an anamorphic one's stretched. An 80×40 image
    /// of four colours (red, green over blue, yellow), 8 pixels from the top right and from the bottom right, over
    /// grey.
    @Test(arguments: [
        ([1, 0, 0, 1], 0, false, "1"), ([0, 1, -1, 0], 90, false, "1"), ([-1, 0, 0, -1], 180, false, "1"),
        ([0, -1, 1, 0], 270, false, "1"), ([-1, 0, 0, 1], 0, true, "1"), ([1, 0, 0, -1], 180, true, "1"),
        ([0, -1, -1, 0], 90, true, "1"), ([0, 1, 1, 0], 270, true, "1"), ([1, 0, 0, 1], 0, false, "64/45"),
        ([0, 1, -1, 0], 90, false, "3/4"),
    ])
    func aWatermarkShowsAsAskedWhateverThePicturesOrientation(matrix: [Int32], rotation: Int, mirrored: Bool, sampleAspect: String) throws {
        let folder = try Media.scratch()
        let mark = folder.appendingPathComponent("mark.png").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=40x20", "-f", "lavfi", "-i", "color=lime:s=40x20",
                          "-f", "lavfi", "-i", "color=blue:s=40x20", "-f", "lavfi", "-i", "color=yellow:s=40x20",
                          "-filter_complex", "[0][1]hstack[top];[2][3]hstack[bottom];[top][bottom]vstack", "-frames:v", "1", mark])
        let input = folder.appendingPathComponent("grey.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=gray:s=320x240:r=30:d=1,setsar=\(sampleAspect)",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        try Self.setDisplayMatrix(matrix, of: input)
        let track = try #require(try TranscodeSession.probe(path: input).first)
        #expect((track.rotation ?? 0) == rotation && (track.mirrored == true) == mirrored, "\(track)")
        for position in ["topRight", "bottomRight"] {
            var settings = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "mark", "position": "\#(position)", "margin": 8}}}}"#.utf8))
            settings.filters?.video?.watermark?.imagePath = mark
            let output = folder.appendingPathComponent("\(position).mp4").path
            _ = try TranscodeSession(inputPath: input, outputPath: output, settings: settings).run()
            let video = try #require(try Probe.read(output).video)
            // The image's box as shown: 80×40 (give or take the scaling of an anamorphic source), 8 pixels in.
            let (width, height) = (video.width ?? 0, video.height ?? 0)
            let (x, y) = (width - 8 - 80, position == "topRight" ? 8 : height - 8 - 40)
            func color(_ dx: Int, _ dy: Int, _ w: Int, _ h: Int) throws -> [Double] {
                try Probe.meanColor(output, x: x + dx, y: y + dy, width: w, height: h)
            }
            let quarters = [try color(6, 4, 28, 12), try color(46, 4, 28, 12), try color(6, 24, 28, 12), try color(46, 24, 28, 12)]
            let expected: [[Bool]] = [[true, false, false], [false, true, false], [false, false, true], [true, true, false]]
            for (quarter, bright) in zip(quarters, expected) {
                #expect(zip(quarter, bright).allSatisfy { $1 ? $0 > 180 : $0 < 80 },
                        "\(position) of \(width)×\(height): red, green over blue, yellow, got \(quarters)")
            }
            let strips = [try Probe.meanColor(output, x: width - 6, y: y + 4, width: 4, height: 32),
                          try Probe.meanColor(output, x: x + 4, y: position == "topRight" ? 2 : height - 6, width: 72, height: 4),
                          try Probe.meanColor(output, x: x - 30, y: y + 4, width: 22, height: 32)]
            for strip in strips { #expect(strip.allSatisfy { abs($0 - 128) < 25 }, "\(position): grey in the margins and beside: \(strips)") }
        }
    }

    /// A watermark goes in the corner of the part a fill crop keeps: it was put in the whole picture's corner, and
    /// a wide video made square or portrait (a logo on a vertical cut of a 16:9 clip) lost it with the part cut away.
    /// A red 80×40 image, 8 pixels in, over grey 320×180 filled into 180×180, as stored and shown a quarter turned.
    @Test(arguments: [([1, 0, 0, 1] as [Int32], "bottomRight"), ([1, 0, 0, 1], "topLeft"), ([0, 1, -1, 0], "bottomRight")])
    func aWatermarkStaysInTheCornerOfWhatAFillKeeps(matrix: [Int32], position: String) throws {
        let folder = try Media.scratch()
        let mark = folder.appendingPathComponent("mark.png").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=80x40", "-frames:v", "1", mark])
        let input = folder.appendingPathComponent("wide.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=gray:s=320x180:r=30:d=1", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        try Self.setDisplayMatrix(matrix, of: input)
        var settings = try TranscodeSettings.parse(Data(#"""
            {"video": {"width": 180, "height": 180, "scalingMode": "fill"},
             "filters": {"video": {"watermark": {"upload": "mark", "position": "\#(position)", "margin": 8}}}}
            """#.utf8))
        settings.filters?.video?.watermark?.imagePath = mark
        let output = folder.appendingPathComponent("square.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: settings).run()
        let video = try #require(try Probe.read(output).video)
        try #require(video.width == 180 && video.height == 180)
        let (x, y) = position == "topLeft" ? (8, 8) : (180 - 8 - 80, 180 - 8 - 40)
        let inside = try Probe.meanColor(output, x: x + 6, y: y + 4, width: 68, height: 32)
        #expect(inside[0] > 180 && inside[1] < 80 && inside[2] < 80, "red at \(x),\(y): got \(inside)")
        let beside = try Probe.meanColor(output, x: position == "topLeft" ? 100 : 20, y: y + 4, width: 60, height: 32)
        #expect(beside.allSatisfy { abs($0 - 128) < 25 }, "grey beside the mark: \(beside)")
    }

    @Test func anamorphicSourcesComeOutWithSquarePixels() throws {
        let run = try transcode(try Media.path(.anamorphic))
        let video = try #require(run.probe.video)
        #expect(video.width == 768 && video.height == 576)
        #expect(video.sample_aspect_ratio == "1:1" && video.display_aspect_ratio == "4:3")
        #expect(run.probe.audio == nil)
    }

    /// An interlaced source comes out deinterlaced at its frame rate: FFmpeg's field detector (`idet`), which sees
    /// woven fields in every frame of the source, sees progressive pictures in the output.
    @Test func interlacedSourcesAreDeinterlaced() throws {
        let source = try Media.path(.interlaced)
        let before = try Self.fieldDetection(source)
        #expect(before.interlaced >= 45 && before.progressive <= 2, "the source really is interlaced: \(before)")
        let run = try transcode(source)
        let video = try #require(run.probe.video)
        #expect(video.width == 720 && video.height == 576 && run.result.framesEncoded == 50)
        let after = try Self.fieldDetection(run.output)
        #expect(after.progressive >= 45 && after.interlaced <= 5, "\(after)")
        #expect(abs(run.probe.format.durationSeconds - 2) < 0.1, "one frame out per frame in")
    }

    /// A broadcast-like stream whose interlaced picture changes size midway (576i, then 720i, timestamps running on)
    /// goes through the deinterlacer whole: the filter graph is rebuilt for the new size instead of failing.
    @Test func anInterlacedStreamThatChangesSizeMidwayIsDeinterlacedWhole() throws {
        let folder = try Media.scratch()
        let first = try Media.path(.interlaced), second = folder.appendingPathComponent("hd.ts").path
        try Media.ffmpeg(Media.interlacedArguments(size: "1280x720") + ["-output_ts_offset", "2", second])
        let mixed = folder.appendingPathComponent("mixed.ts").path
        var bytes = try Data(contentsOf: URL(fileURLWithPath: first))
        bytes.append(try Data(contentsOf: URL(fileURLWithPath: second)))
        try bytes.write(to: URL(fileURLWithPath: mixed))
        let counted = try Shell.check("ffprobe", ["-v", "error", "-count_frames", "-select_streams", "v",
                                                  "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", mixed])
        let sourceFrames = try #require(Int(counted.drop { !$0.isNumber }.prefix { $0.isNumber })) // program, then stream
        #expect(sourceFrames >= 95)

        let run = try transcode(mixed)
        #expect(run.result.framesEncoded == sourceFrames)
        #expect(abs(run.probe.format.durationSeconds - 4) < 0.1)
        let after = try Self.fieldDetection(run.output)
        #expect(after.progressive >= sourceFrames - 8, "\(after)")
    }

    /// A broadcast that starts progressive (an advert) and turns interlaced is deinterlaced from its first interlaced
    /// picture on: before, the choice was made once, at the first picture, and the woven fields went on to the scaler.
    @Test func aStreamThatTurnsInterlacedMidwayIsDeinterlacedFromThere() throws {
        let folder = try Media.scratch()
        let progressive = folder.appendingPathComponent("advert.ts").path, interlaced = folder.appendingPathComponent("programme.ts").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=720x576:r=25:d=2", "-c:v", "mpeg2video", "-b:v", "8M", "-f", "mpegts", progressive])
        try Media.ffmpeg(Media.interlacedArguments(size: "720x576") + ["-output_ts_offset", "2", interlaced])
        let mixed = folder.appendingPathComponent("mixed.ts").path
        var bytes = try Data(contentsOf: URL(fileURLWithPath: progressive))
        bytes.append(try Data(contentsOf: URL(fileURLWithPath: interlaced)))
        try bytes.write(to: URL(fileURLWithPath: mixed))
        let second = try Self.fieldDetection(interlaced)
        #expect(second.interlaced >= 45, "the second part really is interlaced: \(second)")

        let run = try transcode(mixed)
        #expect(run.result.framesEncoded >= 99)
        #expect(abs(run.probe.format.durationSeconds - 4) < 0.1)
        // The second half only: the field detector takes testsrc2's fast motion at 25p for fields in the first.
        let after = try Self.fieldDetection(run.output, from: 2.1)
        #expect(after.progressive >= 40 && after.interlaced <= 6, "\(after)")
    }

    /// MPEG-TS files of 2 s each (320×240 at 25 fps, a tone of `tone` Hz, the clock starting `clock` s later than
    /// FFmpeg's default) joined with `cat`, as a capture spliced at an ad break is.
    private func joinedTransportStream(in folder: URL, parts: [(tone: Int, clock: Int)]) throws -> String {
        var joined = Data()
        for (index, part) in parts.enumerated() {
            let path = folder.appendingPathComponent("part\(index).ts").path
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=2", "-f", "lavfi", "-i", "sine=f=\(part.tone):d=2",
                              "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac",
                              "-output_ts_offset", String(part.clock), "-f", "mpegts", path])
            joined.append(try Data(contentsOf: URL(fileURLWithPath: path)))
        }
        let input = folder.appendingPathComponent("joined.ts").path
        try joined.write(to: URL(fileURLWithPath: input))
        return input
    }

    /// Two MPEG-TS files joined with `cat` (the clock starts again halfway, as at a broadcast splice) come out
    /// whole: 4 s of video and audio. Before, the second half's pictures landed on the first's timestamps and were
    /// dropped, so the job succeeded with 2 s of video under 4 s of audio.
    @Test func aTransportStreamWhoseClockRestartsComesOutWhole() throws {
        let folder = try Media.scratch()
        let input = try joinedTransportStream(in: folder, parts: [(tone: 300, clock: 0), (tone: 600, clock: 0)])

        let run = try transcode(input)
        #expect(run.result.framesEncoded == 100)
        let video = try #require(run.probe.video), audio = try #require(run.probe.audio)
        #expect(abs(video.durationSeconds - 4) < 0.1, "video \(video.durationSeconds) s")
        #expect(abs(audio.durationSeconds - 4) < 0.15, "audio \(audio.durationSeconds) s")

        // A stream copy gets the same stitched timeline (the MP4 muxer refuses decoding times that go back).
        let copied = try transcode(input, #"{"video": "copy", "audio": "copy"}"#)
        let copiedVideo = try #require(copied.probe.video)
        #expect(copiedVideo.codec_name == "h264" && abs(copiedVideo.durationSeconds - 4) < 0.1, "video \(copiedVideo.durationSeconds) s")
        #expect(abs((copied.probe.audio?.durationSeconds ?? 0) - 4) < 0.15)

        // It declares about 2 s and holds 4: the duration limit is enforced on what is read, not only declared.
        let limited = TranscodeSession(inputPath: input, outputPath: folder.appendingPathComponent("limited.mp4").path,
                                       settings: TranscodeSettings(), limits: MediaLimits(maxDuration: 3))
        #expect { try limited.run() } throws: { ($0 as? MediaError)?.code == "input_too_long" }
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("limited.mp4").path))
    }

    /// AAC whose sample rate changes part-way (MPEG-TS files at 44.1 and 48 kHz joined) cannot be copied into one
    /// track: it was, with the first rate, and the second part played at the wrong speed while the job succeeded.
    /// Refused in words; encoded, it is whole.
    @Test func aCopyOfAACThatChangesRatePartWayIsRefused() throws {
        let folder = try Media.scratch()
        var joined = Data()
        for (index, rate) in ["44100", "48000"].enumerated() {
            let part = folder.appendingPathComponent("part\(index).ts").path
            try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=2", "-f", "lavfi", "-i", "sine=d=2", "-ar", rate,
                              "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-f", "mpegts", part])
            joined.append(try Data(contentsOf: URL(fileURLWithPath: part)))
        }
        let input = folder.appendingPathComponent("joined.ts").path
        try joined.write(to: URL(fileURLWithPath: input))
        let copy = TranscodeSession(inputPath: input, outputPath: folder.appendingPathComponent("copied.mp4").path,
                                    settings: try TranscodeSettings.parse(Data(#"{"video": "copy", "audio": "copy"}"#.utf8)))
        let refused = #expect(throws: MediaError.self) { try copy.run() }
        #expect(refused?.code == "copy_not_supported" && refused?.message.contains("changes its sample rate or channels part-way at 2.") == true,
                "\(String(describing: refused))")
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("copied.mp4").path))
        let encoded = try transcode(input, #"{"video": "copy"}"#)
        #expect(abs((encoded.probe.audio?.durationSeconds ?? 0) - 4) < 0.15, "\(String(describing: encoded.probe.audio))")
    }

    /// A fragmented MP4 whose clock starts at 12 s: an HLS stream's init segment joined with three of its media
    /// segments from the middle, as stream downloaders save a part. FFmpeg gives such a stream, as its "duration",
    /// where its last fragment ends on the file's clock; added to the start it declared 36 s, and the file was
    /// refused as cut short at 24 s (and its track said 24 s long, and the job was sized as 24 s).
    @Test func aFragmentedMP4CutFromTheMiddleIsWhole() throws {
        let folder = try Media.scratch()
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=24", "-f", "lavfi", "-i", "sine=d=24",
                          "-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-pix_fmt", "yuv420p", "-c:a", "aac",
                          "-f", "hls", "-hls_time", "4", "-hls_segment_type", "fmp4", "-hls_playlist_type", "vod",
                          folder.appendingPathComponent("index.m3u8").path])
        var joined = try Data(contentsOf: folder.appendingPathComponent("init.mp4"))
        for segment in 3...5 { joined.append(try Data(contentsOf: folder.appendingPathComponent("index\(segment).m4s"))) }
        let input = folder.appendingPathComponent("cut.mp4").path
        try joined.write(to: URL(fileURLWithPath: input))
        let reader = try MediaReader(path: input)
        #expect(reader.tracks.allSatisfy { abs(($0.duration ?? 0) - 12) < 0.1 }, "\(reader.tracks.map(\.duration))")
        var durations: [Double] = []
        let run = try transcode(input) { durations.append($0.duration) }
        // The job is sized as 12 s too: at 24 s its progress stood at half way until the end.
        #expect(!durations.isEmpty && durations.allSatisfy { abs($0 - 12) < 0.2 }, "\(Set(durations))")
        let video = try #require(run.probe.video), audio = try #require(run.probe.audio)
        #expect(run.result.framesEncoded == 300 && abs(video.durationSeconds - 12) < 0.1, "video \(video.durationSeconds) s")
        #expect(abs(audio.durationSeconds - 12) < 0.15, "audio \(audio.durationSeconds) s")
    }

    /// The same with a clock that leaps a minute ahead at the splice: FFmpeg declares the minute (its duration
    /// runs from the first timestamps to the last), and the file read on the closed-up clock seemed a minute short:
    /// it was refused as cut short.
    @Test func aTransportStreamWhoseClockLeapsAheadComesOutWhole() throws {
        let input = try joinedTransportStream(in: try Media.scratch(), parts: [(tone: 440, clock: 0), (tone: 440, clock: 60)])
        try #require(try Probe.read(input).format.durationSeconds > 60, "what FFmpeg declares")
        let run = try transcode(input)
        #expect(run.result.framesEncoded == 100)
        let video = try #require(run.probe.video), audio = try #require(run.probe.audio)
        #expect(abs(video.durationSeconds - 4) < 0.1 && abs(audio.durationSeconds - 4) < 0.15,
                "video \(video.durationSeconds) s, audio \(audio.durationSeconds) s")
    }

    /// An MPEG-TS file (4 s, 320×240 at 25 fps and a tone, video on PID 0x100, audio on 0x101) whose clock leaps on
    /// the PIDs `leaps` name, each by its seconds from its content time on (every PES timestamp from then on moved;
    /// leaps add up), as a splice whose streams change clocks at different points of the file.
    /// `muxed`: more options of the MPEG-TS muxer (`-muxdelay 1` puts the video read well ahead of the audio).
    private static func transportStream(leaps: [(pid: Int, from: Double, seconds: Double)], muxed: [String] = [], in folder: URL,
                                        name: String) throws -> String {
        let whole = folder.appendingPathComponent("whole-\(name)").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=4", "-f", "lavfi", "-i", "sine=f=1000:d=4",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "mp2"] + muxed + ["-f", "mpegts", whole])
        var bytes = try Data(contentsOf: URL(fileURLWithPath: whole))
        try #require(bytes.count % 188 == 0)
        // A PES timestamp: 33 bits in five bytes, marker bits between.
        func read(_ at: Int) -> Int64 {
            Int64(bytes[at] >> 1 & 7) << 30 | Int64(bytes[at + 1]) << 22 | Int64(bytes[at + 2] >> 1) << 15
                | Int64(bytes[at + 3]) << 7 | Int64(bytes[at + 4] >> 1)
        }
        func write(_ value: Int64, _ at: Int) {
            bytes[at] = bytes[at] & 0xf1 | UInt8(value >> 30 & 7) << 1
            bytes[at + 1] = UInt8(value >> 22 & 0xff)
            bytes[at + 2] = UInt8(value >> 15 & 0x7f) << 1 | 1
            bytes[at + 3] = UInt8(value >> 7 & 0xff)
            bytes[at + 4] = UInt8(value & 0x7f) << 1 | 1
        }
        var first: [Int: Int64] = [:], moved = 0
        for start in stride(from: 0, to: bytes.count, by: 188) where bytes[start + 1] & 0x40 != 0 {
            let pid = Int(bytes[start + 1] & 0x1f) << 8 | Int(bytes[start + 2])
            guard leaps.contains(where: { $0.pid == pid }) else { continue }
            var payload = start + 4
            if bytes[start + 3] & 0x20 != 0 { payload += 1 + Int(bytes[start + 4]) }
            guard bytes[payload] == 0, bytes[payload + 1] == 0, bytes[payload + 2] == 1 else { continue }
            let flags = bytes[payload + 7] >> 6
            guard flags & 2 != 0 else { continue }
            let pts = read(payload + 9)
            let start = first[pid] ?? pts
            first[pid] = start
            let content = Double(pts - start) / 90_000
            let seconds = leaps.filter { $0.pid == pid && content >= $0.from }.reduce(0) { $0 + $1.seconds }
            guard seconds != 0 else { continue }
            let leap = Int64(seconds * 90_000)
            write(pts + leap, payload + 9)
            if flags == 3 { write(read(payload + 14) + leap, payload + 14) }
            moved += 1
        }
        try #require(moved > 3, "timestamps were moved")
        let path = folder.appendingPathComponent(name).path
        try bytes.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// A splice whose video changes clocks a second before its audio (the video's first packets on the new clock
    /// come before the audio's last on the old one), or where the audio's clock alone leaps, comes out as long as its
    /// content, as from FFmpeg's CLI. One shift for every stream moved back and forth at each packet until both had
    /// changed, each time to where the latest stream ended: 5 s from 4, the sound broken up. And a programme that
    /// comes back from a break to its own clock, which ran 5 s further meanwhile, goes on where the break ended (a
    /// stream taking up the old clock's shift again had a 5 s hole).
    @Test func aSpliceWhoseStreamsChangeClocksAtDifferentPointsKeepsItsLength() throws {
        let folder = try Media.scratch()
        // The audio's clock leaping alone where the video is read well ahead of it (large PES, a second's mux
        // delay): continued from where the video had been read, the audio came out a quarter second late.
        let ahead = ["-pes_payload_size", "16000", "-muxdelay", "1"]
        let cases: [(String, [(pid: Int, from: Double, seconds: Double)], [String])] = [
            ("video-first.ts", [(0x100, 2, 100), (0x101, 3, 100)], []), ("audio-first.ts", [(0x100, 3, 100), (0x101, 2, 100)], []),
            ("audio-only.ts", [(0x101, 2, 20)], []), ("audio-only-behind.ts", [(0x101, 2, 20)], ahead),
            ("break.ts", [(0x100, 1.5, 100), (0x101, 1.5, 100), (0x100, 3, -95), (0x101, 3, -95)], []),
        ]
        for (name, leaps, muxed) in cases {
            let input = try Self.transportStream(leaps: leaps, muxed: muxed, in: folder, name: name)
            let run = try transcode(input, #"{"video": {"preset": "ultrafast"}}"#)
            let video = try #require(run.probe.video), audio = try #require(run.probe.audio)
            #expect(run.result.framesEncoded == 100, "\(name)")
            #expect(abs(video.durationSeconds - 4) < 0.1 && abs(audio.durationSeconds - 4) < 0.15,
                    "\(name): video \(video.durationSeconds) s, audio \(audio.durationSeconds) s")
            #expect(try Probe.read(run.output).format.durationSeconds < 4.15, "\(name)")
        }
    }

    /// A splice around a break that has one kind of media alone (sound without pictures, or pictures without sound,
    /// as an ad break recorded so): three MPEG-TS files joined with `cat`, each on its own clock (video on PID
    /// 0x100, audio on 0x101), of `parts` seconds, `nil` for a part without that media. The stream that was away
    /// comes back where the other is: joined to its own end, it lost the break's length and stayed that far from
    /// the other to the end of the file (the pictures 3 s ahead of the sound after 3 s of sound alone; the sound 11 s
    /// ahead after 11 s of pictures alone).
    @Test func aStreamAwayDuringABreakComesBackInStepWithTheOther() throws {
        let folder = try Media.scratch()
        // Pictures alone for 11 s: past the 10 s within which the sound took up the pictures' new clock before.
        for (name, middle) in [("sound-alone", (video: false, audio: true, seconds: 3)), ("pictures-alone", (video: true, audio: false, seconds: 11))] {
            var joined = Data()
            let parts: [(video: Bool, audio: Bool, seconds: Int)] = [(true, true, 2), (middle.video, middle.audio, middle.seconds), (true, true, 2)]
            for (index, part) in parts.enumerated() {
                let path = folder.appendingPathComponent("\(name)-\(index).ts").path
                var arguments: [String] = [], ids: [String] = []
                if part.video {
                    arguments += ["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=\(part.seconds)"]
                    ids += ["-streamid", "\(ids.count / 2):256"]
                }
                if part.audio {
                    arguments += ["-f", "lavfi", "-i", "sine=f=1000:d=\(part.seconds)"]
                    ids += ["-streamid", "\(ids.count / 2):257"]
                }
                try Media.ffmpeg(arguments + ids + ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-f", "mpegts", path])
                joined.append(try Data(contentsOf: URL(fileURLWithPath: path)))
            }
            let input = folder.appendingPathComponent("\(name).ts").path
            try joined.write(to: URL(fileURLWithPath: input))
            let run = try transcode(input, #"{"video": {"preset": "ultrafast"}}"#)
            let video = try #require(run.probe.video), audio = try #require(run.probe.audio)
            let length = 4.0 + Double(middle.seconds)
            #expect(run.result.framesEncoded == 100 + (middle.video ? 25 * middle.seconds : 0), "\(name)")
            let videoEnd = video.startTime + video.durationSeconds, audioEnd = audio.startTime + audio.durationSeconds
            #expect(abs(videoEnd - audioEnd) < 0.1 && abs(videoEnd - length) < 0.2, "\(name): video ends at \(videoEnd) s, audio at \(audioEnd) s")
            if !middle.audio {
                // The break's silence is where the break is, and the sound after it plays with the pictures after it.
                let hole = try Probe.silences(run.output).first { $0.end - $0.start > 2 }
                #expect(hole.map { abs($0.start - 2) < 0.1 && abs($0.end - 2 - Double(middle.seconds)) < 0.1 } == true, "\(name): \(String(describing: hole))")
            }
        }
    }

    /// A picture the decoder fails on with another error than invalid data (zlib's, in a PNG-coded screen capture)
    /// is passed over, as players and FFmpeg's CLI pass it: the job failed with `decode_failed`. Up to 16 in a row: a
    /// stream whose every picture fails so still fails (a memory limit's refusals show up so), and one whose every
    /// picture is invalid data has nothing to encode.
    @Test func aBrokenPictureIsPassedOverButABrokenStreamFails() throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("png.mov").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=160x120:r=30:d=1", "-c:v", "png", source])
        let listing = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "packet=pos,size", "-of", "json", source])
        let packets = try #require((try JSONSerialization.jsonObject(with: Data(listing.utf8)) as? [String: Any])?["packets"] as? [[String: Any]])
            .compactMap { packet -> Range<Int>? in
                guard let pos = Int(packet["pos"] as? String ?? ""), let size = Int(packet["size"] as? String ?? "") else { return nil }
                return pos..<pos + size
            }
        try #require(packets.count == 30)
        /// The source with the compressed data of the pictures at `indices` damaged: the start of their zlib stream
        /// (in the PNG's IDAT chunk) zeroed.
        func broken(_ indices: some Sequence<Int>, _ name: String) throws -> String {
            var bytes = try Data(contentsOf: URL(fileURLWithPath: source))
            for index in indices {
                let chunk = try #require(bytes[packets[index]].firstRange(of: Data("IDAT".utf8)), "picture \(index)")
                bytes.replaceSubrange(chunk.upperBound..<chunk.upperBound + 8, with: Data(count: 8))
            }
            let path = folder.appendingPathComponent(name).path
            try bytes.write(to: URL(fileURLWithPath: path))
            return path
        }
        let nearTheEnd = try broken([28], "near-end.mov")
        try #require(try Shell.run("ffmpeg", ["-v", "error", "-i", nearTheEnd, "-f", "null", "-"]).stderr.contains("inflate returned error"),
                     "zlib refuses the picture")
        #expect(try transcode(nearTheEnd).result.framesEncoded == 29)
        #expect(try transcode(try broken(0..<16, "sixteen.mov")).result.framesEncoded == 14)
        #expect { try self.transcode(try broken(0..<30, "all.mov")) } throws: { ($0 as? MediaError)?.code == "decode_failed" }
        // Every picture invalid data (FFmpeg's noise filter on the packets), one failure reported by the flush: no
        // picture, a failure that says so (the flush's failed the job as decode_failed).
        let noise = folder.appendingPathComponent("noise.mov").path
        try Media.ffmpeg(["-i", source, "-c", "copy", "-bsf:v", "noise=amount=20", noise])
        #expect { try self.transcode(noise) } throws: { ($0 as? MediaError)?.code == "no_decodable_video" }
    }

    /// An MPEG-TS file of 3 s: H.264 video (PID 0x100) and `audio` MP2 tracks (0x101, 0x102, ...), with every packet
    /// of the PIDs in `emptied` taken out (the programme still declares them: a recording whose sound was never sent).
    private static func transportStream(audio: Int, emptied: Set<Int>, in folder: URL, name: String) throws -> String {
        let whole = folder.appendingPathComponent("whole-\(name)").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=3", "-f", "lavfi", "-i", "sine=d=3", "-map", "0:v"]
                         + Array(repeating: ["-map", "1:a"], count: audio).flatMap { $0 }
                         + ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "mp2", "-f", "mpegts", whole])
        let bytes = try Data(contentsOf: URL(fileURLWithPath: whole))
        try #require(bytes.count % 188 == 0)
        var kept = Data()
        for start in stride(from: 0, to: bytes.count, by: 188) where !emptied.contains(Int(bytes[start + 1] & 0x1f) << 8 | Int(bytes[start + 2])) {
            kept.append(bytes[start..<start + 188])
        }
        try #require(emptied.isEmpty || kept.count < bytes.count, "packets were taken out")
        let path = folder.appendingPathComponent(name).path
        try kept.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// An MPEG-TS programme that declares an audio stream which never carries a packet (a recording whose sound
    /// was never sent) gives the video alone, as `ffmpeg` does, encoded or copied: the empty stream (no channels, no
    /// rate) was taken as the sound, and the job failed with `no_decodable_audio` though its video was whole. (Sound
    /// that only starts after FFmpeg's probe, without channels in its header too, is kept: `AudioSyncTests`.)
    @Test func aDeclaredAudioStreamWithoutPacketsIsLeftOut() throws {
        let folder = try Media.scratch()
        let input = try Self.transportStream(audio: 1, emptied: [0x101], in: folder, name: "silent.ts")
        let declared = try Shell.check("ffprobe", ["-v", "error", "-show_entries", "stream=codec_type,channels", "-of", "csv=p=0", input])
        try #require(Set(declared.split(separator: "\n").map(String.init)) == ["video", "audio,0"], "the programme still declares the audio: \(declared)")
        for json in [#"{"video": {"preset": "ultrafast"}}"#, #"{"video": {"preset": "ultrafast"}, "audio": "copy"}"#] {
            let run = try transcode(input, json)
            #expect(run.probe.audio == nil && run.result.tracks.map(\.mediaType) == [.video], "\(json)")
            #expect(try #require(run.probe.video).nb_frames == "75", "\(json)")
        }
        // Its sound alone is asked for: the error says there is none, not that the settings drop every track.
        #expect { try self.transcode(input, #"{"video": null}"#, name: "out.m4a") } throws: {
            ($0 as? MediaError)?.code == "no_decodable_audio"
        }
    }

    /// Its video likewise: a programme that declares a video stream which never carries a packet (a radio recording)
    /// gives the sound alone. The job failed with "The input's video has no picture size".
    @Test func aDeclaredVideoStreamWithoutPacketsIsLeftOut() throws {
        let folder = try Media.scratch()
        let input = try Self.transportStream(audio: 1, emptied: [0x100], in: folder, name: "radio.ts")
        let declared = try Shell.check("ffprobe", ["-v", "error", "-show_entries", "stream=codec_type,width", "-of", "csv=p=0", input])
        try #require(declared.split(separator: "\n").contains("video,0"), "the programme still declares the video: \(declared)")
        let run = try transcode(input)
        #expect(run.probe.video == nil && run.result.tracks.map(\.mediaType) == [.audio])
        #expect((2.5...3.5).contains(run.probe.format.durationSeconds), "\(run.probe.format.durationSeconds) s")
    }

    /// The file is read looking for a packet only when the track chosen has no channels said: beside a working
    /// audio track, an empty one (a DVB recording's declared AC-3 or audio description) costs nothing; the scan
    /// read the whole file for it, in every pass, before any progress.
    @Test func anEmptyAudioStreamBesideAWorkingOneIsNotLookedFor() throws {
        let folder = try Media.scratch()
        for (emptied, expected) in [(0x102, 1), (0x101, 2)] {
            let input = try Self.transportStream(audio: 2, emptied: [emptied], in: folder, name: "two-\(emptied).ts")
            let reader = try MediaReader(path: input)
            #expect(reader.mainAudioTrack?.index == expected && reader.mainAudioTrack(copying: true)?.index == expected, "\(emptied)")
            #expect(reader.packetsFound.isEmpty, "no scan: \(reader.packetsFound)")
        }
        let alone = try MediaReader(path: try Self.transportStream(audio: 1, emptied: [0x101], in: folder, name: "alone.ts"))
        #expect(alone.mainAudioTrack == nil && alone.packetsFound == [1: false], "\(alone.packetsFound)")
    }

    /// An audio track its container says lasts no time (a Matroska track muxed without a frame, its DURATION tag
    /// zero; an MP4 track of priming packets only, duration 0) gives the video alone, as `ffmpeg` does: it was taken
    /// for the sound, gave none, and the job failed with `no_decodable_audio` though its video was whole.
    @Test func anAudioTrackThatLastsNoTimeIsLeftOut() throws {
        let folder = try Media.scratch()
        let video = folder.appendingPathComponent("video.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=3", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", video])
        let empty = folder.appendingPathComponent("empty.mkv").path
        try Media.ffmpeg(["-i", video, "-f", "lavfi", "-i", "sine=d=3", "-map", "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "aac",
                          "-af", "atrim=end_sample=0", empty])
        let priming = folder.appendingPathComponent("priming.mp4").path
        try Media.ffmpeg(["-i", video, "-f", "lavfi", "-i", "sine=d=3", "-map", "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "aac",
                          "-af", "atrim=end_sample=1", priming])
        for input in [empty, priming] {
            let declared = try Shell.check("ffprobe", ["-v", "error", "-show_entries", "stream=codec_type", "-of", "csv=p=0", input])
            try #require(declared.split(separator: "\n") == ["video", "audio"], "the file declares its audio: \(declared)")
            let run = try transcode(input, #"{"video": {"preset": "ultrafast"}}"#)
            #expect(run.probe.audio == nil && run.result.tracks.map(\.mediaType) == [.video], "\(input)")
            #expect(try #require(run.probe.video).nb_frames == "75", "\(input)")
        }
    }

    /// Frames FFmpeg's `idet` filter counts as interlaced (either field first) and as progressive.
    private static func fieldDetection(_ path: String, from start: Double = 0) throws -> (interlaced: Int, progressive: Int) {
        let run = try Shell.run("ffmpeg", ["-nostdin", "-ss", String(start), "-i", path, "-an", "-vf", "idet", "-f", "null", "-"])
        let line = try #require(run.stderr.split(separator: "\n").last { $0.contains("Multi frame detection") })
        func count(_ label: String) -> Int {
            guard let range = line.range(of: label + ":") else { return -1 }
            return Int(line[range.upperBound...].drop { $0 == " " }.prefix { $0.isNumber }) ?? -1
        }
        return (count("TFF") + count("BFF"), count("Progressive"))
    }

    @Test func audioOnlyInputGivesAudioOnlyOutput() throws {
        let run = try transcode(try Media.path(.audioOnly), name: "out.m4a")
        #expect(run.probe.video == nil)
        let audio = try #require(run.probe.audio)
        #expect(audio.codec_name == "aac" && audio.channels == 2 && audio.sampleRate == 44_100)
        #expect(abs(audio.durationSeconds - 3) < 0.1)
        #expect(run.result.mimeType == "audio/mp4")
    }

    @Test func videoOnlyInputGivesVideoOnlyOutput() throws {
        let run = try transcode(try Media.path(.videoOnly), #"{"container": "mov"}"#, name: "out.mov")
        #expect(run.probe.audio == nil)
        #expect(run.probe.video?.codec_name == "h264" && run.probe.video?.width == 320)
        #expect(run.probe.format.format_name.contains("mov"))
        #expect(abs(run.probe.format.durationSeconds - 2) < 0.1)
    }

    @Test func lateAudioKeepsItsOffset() throws {
        let run = try transcode(try Media.path(.lateAudio))
        let video = try #require(run.probe.video)
        let audio = try #require(run.probe.audio)
        #expect(abs(video.startTime) < 0.05)
        #expect(abs(audio.startTime - 0.5) < 0.05, "audio starts at \(audio.startTime)")
    }

    @Test func copyKeepsPacketsBitIdentical() throws {
        let input = try Media.path(.standard)
        let run = try transcode(input, #"{"video": "copy", "audio": "copy"}"#)
        #expect(try Probe.packetHashes(run.output, type: "v") == (try Probe.packetHashes(input, type: "v")))
        #expect(try Probe.packetHashes(run.output, type: "a") == (try Probe.packetHashes(input, type: "a")))
        #expect(run.result.framesEncoded == 0)
    }

    /// HEVC copied into MP4 is `hvc1`, the only tag Apple's players play: from an MP4 tagged `hev1` (FFmpeg's own
    /// choice), an iPhone's `hvc1` and a Matroska file that has no tag. The muxer's choice, `hev1`, was written.
    @Test func hevcCopiedIntoMP4IsTaggedForApplePlayers() throws {
        let folder = try Media.scratch()
        let encode = ["-f", "lavfi", "-i", "testsrc2=s=320x240:d=1", "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error"]
        var inputs: [String] = []
        for (name, tag) in [("hevc.mkv", nil), ("iphone.mov", "hvc1"), ("hev1.mp4", "hev1")] {
            let path = folder.appendingPathComponent(name).path
            try Media.ffmpeg(encode + (tag.map { ["-tag:v", $0] } ?? []) + [path])
            inputs.append(path)
        }
        #expect(try Probe.read(inputs[2]).video?.codec_tag_string == "hev1")
        for input in inputs {
            let run = try transcode(input, #"{"video": "copy", "audio": null}"#)
            #expect(run.probe.video?.codec_tag_string == "hvc1", "\(input): \(run.probe.video?.codec_tag_string ?? "none")")
            #expect(try Probe.packetHashes(run.output, type: "v") == (try Probe.packetHashes(input, type: "v")))
        }
    }

    /// An output a source's size leads to that no H.264 level holds (here 8192×8192, upscaled from a square) is
    /// refused before anything is encoded, naming the size: it was decoded, then failed as out of memory.
    @Test func anOutputLargerThanAnyLevelIsRefusedNamingItsSize() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("square.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-c:v", "libx264", "-preset", "ultrafast", input])
        let output = folder.appendingPathComponent("out.mp4").path
        let session = TranscodeSession(inputPath: input, outputPath: output,
                                       settings: try TranscodeSettings.parse(Data(#"{"video": {"width": 8192, "allowUpscaling": true}}"#.utf8)))
        #expect { try session.run() } throws: { error in
            let media = error as? MediaError
            return media?.code == "invalid_settings" && media?.message.hasPrefix("video: H.264 holds pictures of at most 139264 macroblocks") == true
                && media?.message.contains("8192×8192") == true
        }
        #expect(!FileManager.default.fileExists(atPath: output) && Media.files(in: folder) == ["square.mkv"])
    }

    @Test func copyIntoAContainerThatCannotHoldTheCodecIsRefused() throws {
        let folder = try Media.scratch()
        let settings = try TranscodeSettings.parse(Data(#"{"video": "copy"}"#.utf8))
        let session = TranscodeSession(inputPath: try Media.path(.videoOnly), outputPath: folder.appendingPathComponent("o.m4v").path,
                                       settings: TranscodeSettings(container: .m4v, video: settings.video))
        #expect { try session.run() } throws: { ($0 as? MediaError)?.code == "copy_not_supported" }
        #expect(Media.files(in: folder).isEmpty)
        // Codecs FFmpeg says a container takes and its muxer then refuses in the header: they failed as FFmpeg errors.
        // And Vorbis in MP4, which FFmpeg writes with an object type of its own that no browser or Apple player
        // plays: the job succeeded with a file nobody could hear.
        let vp9 = folder.appendingPathComponent("libvpx-vp9.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=0.5", "-c:v", "libvpx-vp9", "-cpu-used", "8", vp9])
        for (codec, container) in [("flac", FileType.mp4), ("flac", .mov), ("libopus", .mov), ("libvpx-vp9", .mov), ("libvorbis", .mp4)] {
            let input = folder.appendingPathComponent("\(codec).mkv").path
            if codec != "libvpx-vp9" { try Media.ffmpeg(["-f", "lavfi", "-i", "sine=d=1", "-c:a", codec, input]) }
            let output = folder.appendingPathComponent("o.\(container.rawValue)").path
            let copy = TranscodeSession(inputPath: input, outputPath: output,
                                        settings: codec == "libvpx-vp9" ? TranscodeSettings(container: container, video: .copy, audio: .drop)
                                            : TranscodeSettings(container: container, video: .drop, audio: .copy))
            #expect { try copy.run() } throws: { ($0 as? MediaError)?.code == "copy_not_supported" }
            #expect(!FileManager.default.fileExists(atPath: output), "\(codec) into \(container.rawValue)")
        }
        // Opus in MP4 is taken.
        let opus = folder.appendingPathComponent("libopus.mkv").path
        _ = try TranscodeSession(inputPath: opus, outputPath: folder.appendingPathComponent("opus.mp4").path,
                                 settings: TranscodeSettings(container: .mp4, video: .drop, audio: .copy)).run()
        #expect(try Probe.read(folder.appendingPathComponent("opus.mp4").path).audio?.codec_name == "opus")
    }

    @Test func droppingTheAudioAndChangingTheFrameRate() throws {
        let run = try transcode(try Media.path(.standard), #"{"audio": null, "video": {"frameRate": 15}}"#)
        #expect(run.probe.audio == nil)
        let video = try #require(run.probe.video)
        #expect(abs(video.frameRate - 15) < 0.5, "frame rate \(video.frameRate)")
        #expect(abs(run.probe.format.durationSeconds - 4) < 0.15)
    }

    /// Of two source pictures on one output time, the one at that time is kept: a 60 fps source whose even frames are
    /// dark and odd ones bright, halved to 30, shows only dark pictures (frame 2n at n/30 s; keeping the first to
    /// land, 2n − 1, showed the bright ones, each half a source frame before its time, behind the sound).
    /// In every container: Matroska's millisecond times round the last frame's down, MP4's and MPEG-TS's exact ones
    /// put it on a half tick, which rounds up to the source's end (a 61st picture, bright, at 2.000 s).
    @Test(arguments: ["mkv", "mp4", "ts"])
    func aHalvedFrameRateKeepsThePicturesOnTime(container: String) throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("alternating.\(container)").path
        try Media.ffmpeg(["-f", "lavfi", "-i", #"nullsrc=s=64x64:r=60:d=2,geq=lum=if(mod(N\,2)\,235\,16):cb=128:cr=128"#,
                          "-pix_fmt", "yuv420p"] + (container == "mkv" ? ["-c:v", "ffv1"] : ["-c:v", "libx264", "-qp", "0"]) + [source])
        let run = try transcode(source, #"{"video": {"frameRate": 30, "preset": "ultrafast"}}"#)
        let raw = folder.appendingPathComponent("frames.gray").path
        try Media.ffmpeg(["-i", run.output, "-f", "rawvideo", "-pix_fmt", "gray", raw])
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: raw)))
        let means = stride(from: 0, to: bytes.count, by: 64 * 64).map { start in
            bytes[start..<min(bytes.count, start + 64 * 64)].reduce(0) { $0 + Int($1) } / (64 * 64)
        }
        #expect(means.count == 60, "\(means.count) pictures")
        #expect(means.allSatisfy { $0 < 60 }, "mean luma of each picture: \(means)")
    }

    /// A lower frame rate ends the video where the source's ends: no picture on a tick at its end (ffmpeg's `fps`
    /// keeps none there either). 3 s at 30 fps gave 46 pictures at 15 (3.067 s) and 4 at 1 (4 s of video beside 3 s
    /// of sound).
    @Test(arguments: [(15, 45), (24, 72), (1, 3)])
    func aLowerFrameRateAddsNoPictureAfterTheSourcesEnd(rate: Int, pictures: Int) throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("thirty.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=128x72:r=30:d=3", "-f", "lavfi", "-i", "sine=d=3",
                          "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", source])
        let run = try transcode(source, #"{"video": {"frameRate": \#(rate), "preset": "ultrafast"}}"#)
        let video = try #require(run.probe.video)
        #expect(video.nb_frames == String(pictures), "\(video.nb_frames ?? "?") pictures at \(rate) fps")
        #expect(abs((Double(video.duration ?? "") ?? 0) - 3) < 0.01, "video lasts \(video.duration ?? "?") s")
    }

    /// A display matrix that turns by other than a quarter turn (45°, scaled as such matrices are) does not turn the
    /// picture, as ffmpeg leaves it ("odd rotation angle"): snapped to the nearest quarter turn, a 4:3 picture came
    /// out on its side (240×320). The same patch with a quarter turn turns it, so the patched matrix is read.
    @Test(arguments: [[1, 1, -1, 1, 320, 240], [0, 1, -1, 0, 240, 320]])
    func onlyQuarterTurnsOfTheDisplayMatrixTurnThePicture(_ values: [Int]) throws {
        let folder = try Media.scratch()
        let plain = folder.appendingPathComponent("plain.mp4").path, turned = folder.appendingPathComponent("turned.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:d=0.5", "-c:v", "libx264", "-preset", "ultrafast", plain])
        // The track header's matrix (16.16 fixed point), after the header's times, track id, layer, group and volume.
        let patch = """
            import struct, sys
            data = bytearray(open(sys.argv[1], 'rb').read())
            at = data.find(b'tkhd') + 4
            at += 4 + (20 if data[at] == 0 else 32) + 16
            a, b, c, d = map(int, sys.argv[3:7])
            data[at:at + 36] = struct.pack('>9i', a << 16, b << 16, 0, c << 16, d << 16, 0, 0, 0, 1 << 30)
            open(sys.argv[2], 'wb').write(data)
            """
        _ = try Shell.check("python3", ["-c", patch, plain, turned] + values[0..<4].map(String.init))
        let run = try transcode(turned, #"{"video": {"preset": "ultrafast"}}"#)
        #expect(run.probe.video?.width == values[4] && run.probe.video?.height == values[5],
                "\(run.probe.video?.width ?? 0)×\(run.probe.video?.height ?? 0)")
    }

    /// A level asked holds the stream to its bit rate (H.264 Table A-1), not only its picture size and rate: x264
    /// labelled the stream level 3 and spent what it liked where the picture was hard (ABR, no buffer model), and
    /// decoders that hold to the level refuse it. Six quiet seconds then two of noise, at level 3's 10 Mb/s in
    /// Main: without a bound the noise took about everything the average allowed for eight seconds; within the
    /// level's buffer (10 Mbit) it takes at most 2 s × 10 Mb/s + 10 Mbit.
    @Test func aLevelAskedBoundsTheBitRate() throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("quiet-then-noise.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=gray:s=720x576:r=25:d=6", "-f", "lavfi", "-i", "nullsrc=s=720x576:r=25:d=2,geq=random(1)*255:128:128",
                          "-filter_complex", "[0:v][1:v]concat=n=2:v=1", "-c:v", "ffv1", source])
        let run = try transcode(source, #"{"video": {"level": "3", "profile": "main", "averageBitRate": 10000000, "preset": "ultrafast"}}"#)
        #expect(run.probe.video?.level == 30)
        let packets = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time,size", "-of", "csv=p=0", run.output])
        let noiseBits = packets.split(separator: "\n").compactMap { line -> Int? in
            let fields = line.split(separator: ",")
            guard fields.count == 2, let time = Double(fields[0]), let size = Int(fields[1]), time >= 6 else { return nil }
            return size * 8
        }.reduce(0, +)
        #expect(noiseBits > 5_000_000, "the noise is coded at all: \(noiseBits) bits")
        #expect(noiseBits <= 31_000_000, "\(noiseBits) bits in the two seconds of noise")
        // A bit rate over the level's is refused when the job runs too (an input given by URL is judged then).
        let refused = try #require(throws: MediaError.self) {
            try transcode(source, #"{"video": {"level": "3", "profile": "main", "averageBitRate": 11000000}}"#)
        }
        #expect(refused.code == "invalid_settings" && refused.message.hasPrefix("video.averageBitRate: level 3 carries at most 10000000"), "\(refused)")
    }

    @Test func progressTracksTheWorkAndEndsAtOne() throws {
        var updates: [TranscodeProgress] = []
        // Made (or waited for, behind other tests' clips) before the clock starts: the rate below is the transcode's.
        let source = try Media.path(.long)
        let started = Date()
        let run = try transcode(source, #"{"video": {"preset": "ultrafast", "width": 640}}"#) { updates.append($0) }
        let wall = Date().timeIntervalSince(started)
        #expect(run.probe.video?.width == 640)
        let last = try #require(updates.last)
        #expect(last.fraction == 1 && last.presentationTime == last.duration)
        #expect(abs(last.duration - 8) < 0.1)
        #expect(zip(updates, updates.dropFirst()).allSatisfy { $1.presentationTime >= $0.presentationTime })
        #expect(updates.allSatisfy { $0.presentationTime <= $0.duration }, "never past the duration")
        #expect(Double(updates.count) >= 4 * wall * 0.9, "\(updates.count) updates in \(wall) s")
        // It moves while the work goes on (a reporter silent until the end fails here), and it says what was done:
        // the time written matches the frames encoded at 30 frames a second, within the encoder's few frames of delay.
        let middle = updates.filter { $0.fraction > 0.1 && $0.fraction < 0.9 }
        #expect(Set(middle.map(\.presentationTime)).count >= 5, "\(updates.map(\.fraction))")
        for update in middle {
            let encoded = Double(update.framesEncoded) / 30
            #expect(abs(update.presentationTime - encoded) < 0.5, "\(update.presentationTime) s written, \(update.framesEncoded) frames encoded")
        }
    }

    /// After the last sample the file is completed (the index moved to the front; from a checkpoint, the whole file
    /// muxed first): that work reports steps counting up, after every transcoding update, so a watchdog sees it move.
    @Test(arguments: [false, true])
    func theFinishReportsStepsThatCountUp(checkpointed: Bool) throws {
        let folder = try Media.scratch()
        let session = TranscodeSession(inputPath: try Media.path(.long), outputDirectory: folder.appendingPathComponent("out").path,
                                       settings: try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8)))
        let checkpoint = folder.appendingPathComponent("checkpoint")
        if checkpointed { session.checkpointDirectory = checkpoint.path }
        var updates: [TranscodeProgress] = []
        _ = try session.run { updates.append($0) }
        #expect(try Probe.read(session.outputPath).video != nil)
        #expect(Media.files(in: checkpoint).isEmpty != checkpointed, "the checkpoint folder holds the pieces, when asked for")
        let first = try #require(updates.firstIndex { $0.finishing != nil }, "no finishing step was reported")
        #expect(first > 0, "the transcode reported its progress before the finish")
        let steps = updates[first...].compactMap(\.finishing)
        #expect(steps.count == updates.count - first, "a transcoding update came after the finish began")
        // Throttled, so steps are skipped; the last update (the end) repeats the count reached.
        let reported = steps.dropLast()
        #expect(reported.first == 1 && zip(reported, reported.dropFirst()).allSatisfy { $1 > $0 } && steps.last! >= reported.last!,
                "\(steps)")
        #expect(steps.last! > 1, "the finish took \(steps.last!) step: a count that does not move tells a watchdog nothing")
        // The time stays put while the file is completed, where the last sample left it: the end of the media (not
        // the last time the throttle let through before it).
        let during = updates[first...].dropLast().map(\.presentationTime)
        #expect(Set(during).count == 1 && during[0] >= updates[first - 1].presentationTime, "\(during)")
        // Within a video frame and an AAC frame: the written time is the last picture's start, the duration runs to
        // the end of the longest stream.
        #expect(abs(during[0] - updates.last!.duration) < 1.0 / 30 + 1024.0 / 44100, "\(during[0]) s of \(updates.last!.duration) s")
        #expect(updates.last?.fraction == 1)
    }

    /// Of several tracks, the one marked default is transcoded, as a player would play it: here a silent commentary
    /// and a small video angle come first in the file. Before, the first of each kind was taken.
    @Test func theTracksMarkedDefaultAreTheOnesTranscoded() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("tracks.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=160x120:d=2", "-f", "lavfi", "-i", "testsrc2=s=320x240:d=2",
                          "-f", "lavfi", "-i", "aevalsrc=0:d=2", "-f", "lavfi", "-i", "sine=d=2",
                          "-map", "0", "-map", "1", "-map", "2", "-map", "3", "-c:v", "libx264", "-preset", "ultrafast",
                          "-pix_fmt", "yuv420p", "-c:a", "aac", "-disposition:v:0", "0", "-disposition:v:1", "default",
                          "-disposition:a:0", "comment", "-disposition:a:1", "default", input])
        let run = try transcode(input)
        let video = try #require(run.probe.video)
        #expect(video.width == 320 && video.height == 240, "the default video: \(video.width)x\(video.height)")
        #expect(try Probe.silences(run.output).isEmpty, "the default audio, the tone, not the silent commentary")
    }

    /// A variable-rate source (a screen recorder's: a 120 Hz clock, about 33 pictures a second) keeps its times and
    /// gets key frames every 2 s of its real rate. Before, the rate was taken from the clock, 120, and the one key
    /// frame 2 s "of 120" ever came was the first: 198 pictures with no other place to seek to.
    @Test func aVariableRateSourceGetsKeyFramesEveryTwoSeconds() throws {
        let input = try Media.scratch().appendingPathComponent("vfr.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=120:d=6", "-vf", #"select='not(mod(n\,4))+eq(mod(n\,40)\,1)'"#,
                          "-c:v", "libx264", "-preset", "ultrafast", "-fps_mode", "vfr", input])
        let source = try Probe.keyFrames(input).frameCount
        let run = try transcode(input)
        let (keys, frames) = try Probe.keyFrames(run.output)
        #expect(frames == source && abs(run.probe.format.durationSeconds - 6) < 0.1, "\(frames) of \(source) frames")
        #expect(keys.count >= 3 && zip(keys, keys.dropFirst()).allSatisfy { $1 - $0 <= 70 }, "key frames at \(keys) of \(frames)")
    }

    /// A video track of one picture under a minute of sound (a still image made into a "video" for a podcast):
    /// progress follows the sound once the pictures end. Before, it stood at the picture's 0.04 s until the end, and
    /// a long enough file was failed by the watchdog as stalled; from a checkpoint, the sound's own pass was waited
    /// for with no progress at all.
    @Test(arguments: [false, true])
    func progressFollowsTheSoundPastTheLastPicture(checkpointed: Bool) throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("still.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=0.04", "-f", "lavfi", "-i", "sine=d=60",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let session = TranscodeSession(inputPath: input, outputDirectory: folder.appendingPathComponent("out").path,
                                       settings: try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8)))
        if checkpointed { session.checkpointDirectory = folder.appendingPathComponent("checkpoint").path }
        session.progressInterval = 0
        var updates: [TranscodeProgress] = []
        let result = try session.run { updates.append($0) }
        #expect(result.framesEncoded == 1 && abs(result.duration - 60) < 0.5, "\(result.framesEncoded) frames, \(result.duration) s")
        // What was said before the file is completed: neither the finish's steps nor the last report (at the end).
        let before = updates.dropLast().prefix { $0.finishing == nil }.map(\.presentationTime)
        #expect((before.max() ?? 0) > 5, "progress before the end reached \(before.max() ?? 0) s of 60, not past the picture")
    }

    /// A resumed transcode first checks, file by file, what the earlier attempt left, and says so before it goes on.
    @Test func aResumedTranscodeReportsItsCheckpointCheckFirst() throws {
        let settings = try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8))
        let second = try Interrupted.transcode(try Media.path(.long), settings: settings, in: try Media.scratch()) { $0.fraction > 0.7 }
        second.progressInterval = 0
        var updates: [TranscodeProgress] = []
        let result = try second.run { updates.append($0) }
        #expect((result.resumedFrom ?? 0) > 0, "the second attempt continued from the checkpoint")
        let checks = updates.prefix { $0.verifying != nil }.compactMap(\.verifying)
        #expect(checks.count >= 2 && checks == Array(1...checks.count), "files checked: \(checks)")
        #expect(updates.dropFirst(checks.count).allSatisfy { $0.verifying == nil }, "a check step after the transcode began")
        #expect(updates.prefix(checks.count).allSatisfy { $0.presentationTime == 0 })
    }

    /// A resumed transcode of an input that cannot seek reliably (MPEG-TS) reads it again from its start up to the
    /// checkpoint's end, minutes for a long recording with no new time: every sample read is a step of getting
    /// back there (`verifying`), where before nothing moved and the watchdog failed the job as stalled (and removed
    /// its checkpoint with it).
    @Test func aResumeThatReadsItsInputFromTheStartCountsEachSampleAsAStep() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("recording.ts").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=10", "-f", "lavfi", "-i", "sine=d=10",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-f", "mpegts", input])
        let settings = try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8))
        let second = try Interrupted.transcode(input, settings: settings, in: folder) { $0.fraction > 0.7 }
        second.progressInterval = 0
        var updates: [TranscodeProgress] = []
        let result = try second.run { updates.append($0) }
        let resumedFrom = try #require(result.resumedFrom, "the second attempt continued from the checkpoint")
        let steps = updates.prefix { $0.verifying != nil }.compactMap(\.verifying)
        #expect(!steps.isEmpty && steps == Array(1...steps.count), "one step after another: \(steps.prefix(8))")
        // Every frame before the checkpoint's end was read again (and the sound's packets): at least one step each.
        #expect(Double(steps.count) >= resumedFrom * 25, "\(steps.count) steps to get back to \(resumedFrom) s")
        // No rate while getting back (it said a speed of -130 there, measured from the checkpoint's end).
        #expect(updates.prefix(steps.count).allSatisfy { $0.speed == 0 && $0.framesPerSecond == 0 }, "\(updates.prefix(3).map { ($0.speed, $0.framesPerSecond) })")
        // After it, a speed measured from the checkpoint's end: time past it.
        #expect(updates.dropFirst(steps.count).allSatisfy { $0.presentationTime >= resumedFrom && $0.speed > 0 },
                "\(updates.dropFirst(steps.count).prefix(3).map { ($0.presentationTime, $0.speed) })")
        let after = updates.dropFirst(steps.count)
        #expect(after.allSatisfy { $0.verifying == nil } && (after.first?.presentationTime ?? 0) > resumedFrom,
                "then time goes on from the checkpoint: \(after.first.map { "\($0)" } ?? "nothing")")
    }

    /// A checkpointed ladder's last work (every file linked into the output, then flushed) counts as finishing
    /// steps, one a file at least: a long ladder's thousands of files on slow storage took minutes with no progress,
    /// and the watchdog failed the job as stalled at its very end (its checkpoint removed with it).
    @Test func aCheckpointedLadderCountsItsFilesAsFinishingSteps() throws {
        let folder = try Media.scratch()
        let settings = try TranscodeSettings.parse(Data(#"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 180, "preset": "ultrafast"}}]}"#.utf8))
        let session = TranscodeSession(inputPath: try Media.path(.standard), outputDirectory: folder.appendingPathComponent("out").path,
                                       settings: settings)
        session.checkpointDirectory = folder.appendingPathComponent("checkpoint").path
        session.progressInterval = 0
        var updates: [TranscodeProgress] = []
        let result = try session.run { updates.append($0) }
        let files = try #require(result.files).count
        let steps = updates.compactMap(\.finishing)
        #expect(files >= 8 && (steps.last ?? 0) >= files, "\(steps.last ?? 0) finishing steps for \(files) files")
    }

    /// A transcode interrupted after its first checkpoint segment resumes even when its video starts after its
    /// sound: the warm-up then begins before the first picture, which the resumed encoder took for a seek that
    /// skipped frames, and so did the read from the start it fell back to (`resume_seek_missed`, at every attempt).
    @Test func aVideoThatStartsLateResumesAfterItsFirstSegment() throws {
        let settings = try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8))
        let second = try Interrupted.transcode(try Media.path(.lateVideo), settings: settings, in: try Media.scratch()) { $0.presentationTime > 2.1 }
        let result = try second.run()
        let resumedFrom = try #require(result.resumedFrom, "the second attempt continued from the checkpoint")
        #expect(abs(resumedFrom - 2) < 0.05, "after the first segment, 1 s of video: \(resumedFrom) s")
        let video = try #require(try Probe.read(result.path).video)
        #expect(abs(video.startTime - 1) < 0.05, "the video keeps its late start: \(video.startTime) s")
        #expect(try SeamCheck.videoPackets(result.path).count == 75, "3 s at 25 fps, every frame once")
    }

    /// A cancellation during the finish stops it and leaves no file.
    @Test func cancelingWhileTheFileIsCompletedStopsAndLeavesNothing() throws {
        let folder = try Media.scratch()
        let token = CancellationToken()
        let session = TranscodeSession(inputPath: try Media.path(.standard), outputPath: folder.appendingPathComponent("o.mp4").path,
                                       settings: TranscodeSettings(), cancellation: token)
        var sawFinish = false
        var error: MediaError?
        do {
            _ = try session.run { progress in
                if progress.finishing != nil {
                    sawFinish = true
                    token.cancel()
                }
            }
        } catch let caught {
            error = caught
        }
        #expect(sawFinish)
        #expect(error?.code == "canceled")
        #expect(Media.files(in: folder).isEmpty, "left: \(Media.files(in: folder))")
    }

    @Test func cancellationStopsQuicklyAndLeavesNothing() throws {
        let folder = try Media.scratch()
        let token = CancellationToken()
        let session = TranscodeSession(inputPath: try Media.path(.long), outputPath: folder.appendingPathComponent("o.mp4").path,
                                       settings: TranscodeSettings(video: .encode(VideoSettings(preset: "veryslow"))),
                                       cancellation: token)
        let canceledAt = LockedValue<Date?>(nil)
        var error: MediaError?
        do {
            _ = try session.run { progress in
                if progress.fraction > 0.1 && canceledAt.withLock({ $0 == nil }) {
                    canceledAt.withLock { $0 = Date() }
                    token.cancel()
                }
            }
        } catch let caught {
            error = caught
        }
        let stopped = Date()
        #expect(error?.code == "canceled")
        let asked = try #require(canceledAt.withLock { $0 })
        // Within a second here; three for a busy machine, where x264 finishes its frames in flight as it is freed
        // (veryslow: a transcode that missed the cancel has well over three seconds of work left).
        #expect(stopped.timeIntervalSince(asked) < 3.0, "stopped \(stopped.timeIntervalSince(asked)) s after the cancel")
        #expect(Media.files(in: folder).isEmpty, "left: \(Media.files(in: folder))")
    }
}
