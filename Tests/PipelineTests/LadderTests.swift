import Foundation
import Locks
import Testing
import TestSupport
@testable import Pipeline

/// Ladders (`"container": "hls"`) and thumbnails, end to end: each output read back with the m3u8 parser, ffprobe
/// and ffmpeg.
@Suite(.serialized) struct LadderTests {
    struct Run {
        let result: TranscodeResult
        let folder: String
        let scratch: URL
    }

    private func transcode(_ input: String, _ json: String, cancellation: CancellationToken = CancellationToken(),
                           progress: (TranscodeProgress) -> Void = { _ in }) throws -> Run {
        let scratch = try Media.scratch()
        let folder = scratch.appendingPathComponent("out").path
        let session = TranscodeSession(inputPath: input, outputDirectory: folder,
                                       settings: try TranscodeSettings.parse(Data(json.utf8)), cancellation: cancellation)
        let result = try session.run(progress: progress)
        #expect(Media.files(in: scratch) == ["out"], "only the finished folder is left")
        return Run(result: result, folder: folder, scratch: scratch)
    }

    /// The cues of a storyboard track: start, end, and the x, y, w, h of its tile.
    private func cues(_ path: String) throws -> [(start: Double, end: Double, box: [Int])] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix("WEBVTT\n"))
        func seconds(_ stamp: Substring) -> Double {
            let parts = stamp.split(separator: ":").map { Double($0) ?? .nan }
            return parts.reduce(0) { $0 * 60 + $1 }
        }
        var result: [(Double, Double, [Int])] = []
        let lines = text.split(separator: "\n")
        for (index, line) in lines.enumerated() where line.contains(" --> ") {
            let times = line.components(separatedBy: " --> ")
            let target = lines[index + 1]
            #expect(target.hasPrefix("storyboard.jpg#xywh="), "\(target)")
            let box = target.split(separator: "=").last?.split(separator: ",").compactMap { Int($0) } ?? []
            result.append((seconds(Substring(times[0])), seconds(Substring(times[1])), box))
        }
        return result
    }

    @Test func aLadderFromOneDecodeHasAlignedKeyFramesAndTruthfulPlaylists() throws {
        let run = try transcode(try Media.path(.tenSeconds), """
            {"container": "hls", "segmentDuration": 4,
             "renditions": [{"video": {"height": 360}}, {"video": {"height": 288, "averageBitRate": 500000}},
                            {"video": {"height": 234, "averageBitRate": 300000, "profile": "main"}}],
             "thumbnails": {"interval": 2, "width": 96, "storyboard": true, "poster": 0.5}}
            """)
        let folder = run.folder
        let summary = try Ladder.check(folder)
        #expect(summary.variants.map(\.resolution) == [[640, 360], [512, 288], [416, 234]])
        #expect(summary.variants.allSatisfy { $0.audio == "audio" && $0.frameRate == 30 })
        #expect(summary.variants.map { $0.codecs.prefix(7) } == ["avc1.64", "avc1.64", "avc1.4d"],
                "High, High, then Main: \(summary.variants.map(\.codecs))")
        #expect(summary.variants.allSatisfy { $0.codecs.hasSuffix(",mp4a.40.2") })
        // CODECS against what ffprobe reads from each rendition: profile_idc and level_idc (avc1.PPCCLL, hex).
        for (variant, track) in zip(summary.variants, ["360p", "288p", "234p"]) {
            let joined = try Ladder.joined(folder, track: track)
            defer { try? FileManager.default.removeItem(atPath: joined) }
            let stream = try #require(try Probe.read(joined).video)
            let profile = ["High": "64", "Main": "4d", "Constrained Baseline": "42", "Baseline": "42"][stream.profile ?? ""] ?? "?"
            let level = String(format: "%02x", stream.level ?? -1)
            let avc = variant.codecs.split(separator: ",").first.map(String.init) ?? ""
            #expect(avc.hasPrefix("avc1." + profile) && avc.hasSuffix(level), "\(avc) vs ffprobe \(stream.profile ?? "?") level \(stream.level ?? -1)")
        }
        #expect(summary.variants.allSatisfy { $0.durations == [4, 4, 2] }, "\(summary.variants.map(\.durations))")
        let bandwidths = summary.variants.map(\.bandwidth)
        #expect(bandwidths == bandwidths.sorted(by: >), "\(bandwidths)")
        #expect(summary.iframes.map(\.count) == [5, 5, 5], "an I-frame every 2 s")
        #expect(summary.iframes.allSatisfy { $0.durations.allSatisfy { abs($0 - 2) < 0.001 } }, "\(summary.iframes.map(\.durations))")
        #expect(summary.audio?.segments == 3)
        #expect(summary.dash.map(\.id) == ["360p", "288p", "234p", "audio"] && summary.dash.map(\.segments) == [3, 3, 3, 3])
        // One decode, two encodes: the same frames, key frames at the same instants, every 2 s, opening every segment.
        let high = try Ladder.keyFrameTimes(folder, track: "360p"), middle = try Ladder.keyFrameTimes(folder, track: "288p")
        let low = try Ladder.keyFrameTimes(folder, track: "234p")
        #expect(high.frames == 300 && middle.frames == 300 && low.frames == 300)
        #expect(high.times == low.times && middle.times == low.times && high.times.count == 5, "\(high.times) vs \(middle.times) vs \(low.times)")
        let gaps = zip(high.times.dropFirst(), high.times).map { $0 - $1 }
        #expect(gaps.allSatisfy { abs($0 - 2) < 0.001 }, "\(gaps)")
        #expect(try Ladder.segmentsStartWithKeyFrames(folder, track: "360p") == [true, true, true])
        #expect(try Ladder.segmentsStartWithKeyFrames(folder, track: "288p") == [true, true, true])
        #expect(try Ladder.segmentsStartWithKeyFrames(folder, track: "234p") == [true, true, true])
        for manifest in ["master.m3u8", "manifest.mpd"] {
            let decode = try Ladder.decodesCleanly(folder + "/" + manifest)
            #expect(decode.status == 0 && decode.stderr.isEmpty, "\(manifest): \(decode.stderr.suffix(500))")
        }
        // Thumbnails every 2 s from the same decode, the storyboard's cues covering the whole run without a gap.
        let thumbnails = Media.files(in: URL(fileURLWithPath: folder + "/thumbnails"))
        #expect(thumbnails == ["00001.jpg", "00002.jpg", "00003.jpg", "00004.jpg", "00005.jpg"])
        let pictures = try thumbnails.map { try Data(contentsOf: URL(fileURLWithPath: folder + "/thumbnails/" + $0)) }
        #expect(Set(pictures).count == 5, "each thumbnail shows its own moment")
        let thumbnail = try #require(try Probe.read(folder + "/thumbnails/00001.jpg").video)
        #expect(thumbnail.width == 96 && thumbnail.height == 54 && thumbnail.codec_name == "mjpeg")
        let sprite = try #require(try Probe.read(folder + "/storyboard.jpg").video)
        #expect(sprite.width == 5 * 96 && sprite.height == 54)
        let track = try cues(folder + "/storyboard.vtt")
        #expect(track.count == 5)
        #expect(track.first?.start == 0 && abs((track.last?.end ?? 0) - 10) < 0.05, "the cues end where the media does")
        #expect(zip(track.dropFirst(), track).allSatisfy { $0.start == $1.end }, "cues follow each other")
        #expect(track.allSatisfy { $0.box.count == 4 && $0.box[0] + $0.box[2] <= sprite.width! && $0.box[1] + $0.box[3] <= sprite.height! })
        #expect(Set(track.map { $0.box[0] }).count == 5, "each cue its own tile")
        let poster = try #require(try Probe.read(folder + "/poster.jpg").video)
        #expect(poster.width == 640 && poster.height == 360)
        // Each picture shows its own moment: closer to the source's frame at its time than to the one a second later.
        let source = try Media.path(.tenSeconds)
        let references = try Media.scratch()
        for index in 0..<5 {
            let time = Double(index * 2)
            let now = try Probe.frame(source, at: time, width: 96, height: 54, into: references)
            let later = try Probe.frame(source, at: time + 1, width: 96, height: 54, into: references)
            let thumbnailPath = folder + "/thumbnails/" + thumbnails[index]
            let (same, other) = (try Probe.psnr(thumbnailPath, now), try Probe.psnr(thumbnailPath, later))
            #expect(same > other + 1, "thumbnail \(index + 1) at \(time) s: \(same) dB against its moment, \(other) dB a second later")
            let tile = (x: index * 96, y: 0, width: 96, height: 54)
            let (tileSame, tileOther) = (try Probe.psnr(folder + "/storyboard.jpg", now, crop: tile),
                                         try Probe.psnr(folder + "/storyboard.jpg", later, crop: tile))
            #expect(tileSame > tileOther + 1, "tile \(index + 1): \(tileSame) dB vs \(tileOther) dB")
        }
        let posterNow = try Probe.frame(source, at: 5, width: 640, height: 360, into: references)
        let posterLater = try Probe.frame(source, at: 6, width: 640, height: 360, into: references)
        let (posterSame, posterOther) = (try Probe.psnr(folder + "/poster.jpg", posterNow), try Probe.psnr(folder + "/poster.jpg", posterLater))
        #expect(posterSame > posterOther + 1, "the poster at 5 s: \(posterSame) dB vs \(posterOther) dB")
        // The result lists every file once, with what to serve it as.
        let files = run.result.files ?? []
        #expect(Set(files.map(\.path)).count == files.count)
        let listed = Dictionary(files.map { ($0.path, $0.mimeType) }) { first, _ in first }
        for file in files {
            #expect(file.size == (try FileManager.default.attributesOfItem(atPath: folder + "/" + file.path)[.size] as? Int), "\(file.path)")
        }
        let onDisk = FileManager.default.enumerator(atPath: folder)?.compactMap { $0 as? String }
            .filter { !(((try? FileManager.default.attributesOfItem(atPath: folder + "/" + $0)[.type]) as? FileAttributeType) == .typeDirectory) }
        #expect(Set(onDisk ?? []) == Set(files.map(\.path)), "every file written is listed")
        #expect(listed["master.m3u8"] == "application/vnd.apple.mpegurl" && listed["manifest.mpd"] == "application/dash+xml")
        #expect(listed["360p/segment_00001.m4s"] == "video/mp4" && listed["audio/init.mp4"] == "audio/mp4")
        #expect(listed["storyboard.vtt"] == "text/vtt" && listed["poster.jpg"] == "image/jpeg")
        #expect(run.result.path == folder + "/master.m3u8" && run.result.container == .hls)
        #expect(run.result.size == (run.result.files ?? []).reduce(0) { $0 + $1.size })
        #expect(abs(run.result.duration - 10) < 0.1)
        #expect(run.result.framesEncoded == 300)
        #expect(run.result.tracks.map(\.height) == [360, 288, 234, nil] && run.result.tracks.map(\.index) == [0, 1, 2, 3])
        #expect(run.result.tracks[0].frameRate == 30 && abs((run.result.tracks[0].duration ?? 0) - 10) < 0.01)
        #expect(run.result.tracks.allSatisfy { ($0.bitRate ?? 0) > 0 })
    }

    @Test func theAutomaticLadderNeverUpscales() throws {
        let run = try transcode(try Media.path(.standard), #"{"container": "hls"}"#)
        let summary = try Ladder.check(run.folder)
        // A 640×360 source: Apple's rungs of 360 and 234 lines, no larger.
        #expect(summary.variants.map(\.resolution) == [[640, 360], [416, 234]])
        let rates = summary.variants.map(\.averageBandwidth)
        #expect(rates == rates.sorted(by: >), "\(rates)")
        let high = try Ladder.keyFrameTimes(run.folder, track: "360p"), low = try Ladder.keyFrameTimes(run.folder, track: "234p")
        #expect(high.times == low.times && high.times.count == 2)
    }

    /// A source larger than any H.264 level holds (8192×8192) still gets its automatic ladder: only the encodings
    /// made are held to the largest level, not the source's size the ladder is measured from.
    @Test func theAutomaticLadderOfASourceLargerThanAnyLevel() throws {
        let input = try Media.scratch().appendingPathComponent("huge.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=gray:s=8192x8192:r=1:d=2", "-c:v", "ffv1", input])
        let run = try transcode(input, #"{"container": "hls", "video": {"preset": "ultrafast"}}"#)
        let summary = try Ladder.check(run.folder)
        #expect(summary.variants.first?.resolution == [1080, 1080], "\(summary.variants.map(\.resolution))")
        // Shown wider than the largest output (4608 wide, pixels twice as wide as tall): measured within it.
        let wide = try Media.scratch().appendingPathComponent("wide.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=4608x1024:r=1:d=2,setsar=2", "-c:v", "ffv1", wide])
        let wideRun = try transcode(wide, #"{"container": "hls", "video": {"preset": "ultrafast"}}"#)
        #expect(try Ladder.check(wideRun.folder).variants.first?.resolution == [6480, 720])
    }

    /// A source one picture longer than its last whole segment ends in a segment of one IDR (33 ms): BANDWIDTH is
    /// the peak over runs of segments lasting half to one and a half target durations, as players measure it, not
    /// that one frame's rate (here 2.4 times the average, for a detailed picture far more: players pass the rung over).
    @Test func aOneFrameLastSegmentDoesNotInflateTheBandwidth() throws {
        let input = try Media.scratch().appendingPathComponent("tail.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=30", "-f", "lavfi", "-i", "sine=d=4", "-frames:v", "121",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 360}}]}"#)
        let summary = try Ladder.check(run.folder) // BANDWIDTH within 10 % of the windowed peak, checked there
        let variant = try #require(summary.variants.first)
        #expect(variant.durations.last.map { $0 < 0.05 } == true, "the last segment is one frame: \(variant.durations)")
        #expect(Double(variant.bandwidth) < 1.5 * Double(variant.averageBandwidth), "\(variant.bandwidth) against \(variant.averageBandwidth)")
    }

    /// A source shorter than a segment: its video's one segment lasts 2.4 s, its audio's 2.6 s. Every media playlist
    /// states one target duration, as RFC 8216 requires of a variant's playlists; before, the video's said 2 and the
    /// audio's 3 (`Ladder.check` compares them).
    @Test func allMediaPlaylistsShareOneTargetDuration() throws {
        let input = try Media.scratch().appendingPathComponent("short.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=2.4", "-f", "lavfi", "-i", "sine=d=2.6",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 6, "renditions": [{"video": {"height": 240}}]}"#)
        let summary = try Ladder.check(run.folder)
        let video = try #require(summary.variants.first?.durations.first)
        #expect(video < 2.5, "the video's segment rounds down on its own: \(video)")
        for playlist in ["240p/index.m3u8", "audio/index.m3u8"] {
            let text = try String(contentsOfFile: run.folder + "/" + playlist, encoding: .utf8)
            #expect(text.contains("#EXT-X-TARGETDURATION:3\n"), "\(playlist): \(text)")
        }
    }

    /// A variable-rate source whose first pictures come slowly (a tenth of a second apart, then 30 a second): x264
    /// decodes its first frames earlier than the start delay of the average rate covers. Before, the ladder failed
    /// ("segments start before the ladder's time offset allows"); the single MP4 had an edit list for it.
    @Test func aLadderOfASourceThatStartsSlowlyIsWhole() throws {
        let input = try Media.scratch().appendingPathComponent("slow-start.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=3", "-vf", "setpts='if(lt(N,3),N*0.1,0.3+(N-3)/30)/TB'",
                          "-fps_mode", "vfr", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 1}"#)
        _ = try Ladder.check(run.folder)
        #expect(run.result.framesEncoded == 90)
        let decode = try Ladder.decodesCleanly(run.folder + "/master.m3u8")
        #expect(decode.status == 0, "\(decode.stderr.suffix(300))")
    }

    /// Every picture of a variable-rate source is shown in the ladder when the source shows it (give or take the
    /// files' offset): x264's packets say no length, the muxer gave each one frame of the average rate and started
    /// every fragment where those added up to, so the key frame after a 4 s pause was shown at the pause's start,
    /// and with bursts of motion between still stretches key frames came out after the pictures they precede.
    @Test(arguments: [("not(between(t\\,4\\,8))", "ultrafast"), ("lt(mod(t\\,3)\\,1)", "ultrafast"), ("not(between(t\\,4\\,8))", "veryfast")])
    func aVariableRateSourceKeepsItsPresentationTimes(selection: String, preset: String) throws {
        let input = try Media.scratch().appendingPathComponent("vfr.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=12", "-vf", "select='\(selection)'", "-fps_mode", "vfr",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        // (veryfast: B-frames, decoding times apart from presentation times.)
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 240, "preset": "\#(preset)"}}]}"#)
        func times(_ path: String) throws -> [Double] {
            try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time", "-of", "csv=p=0", path])
                .split(separator: "\n").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }.sorted()
        }
        let source = try times(input)
        try #require(zip(source, source.dropFirst()).map { $1 - $0 }.max() ?? 0 > 1.5, "the source pauses")
        let joined = try Ladder.joined(run.folder, track: "240p")
        defer { try? FileManager.default.removeItem(atPath: joined) }
        let shown = try times(joined)
        try #require(shown.count == source.count && source.count > 60, "\(shown.count) pictures of \(source.count)")
        let offset = shown[0] - source[0]
        let moved = zip(source, shown).filter { abs($1 - offset - $0) > 0.002 }
        #expect(moved.isEmpty, "\(moved.count) pictures moved, first: \(moved.prefix(3).map { "\($0.0) s shown at \($0.1 - offset) s" })")
        let decode = try Ladder.decodesCleanly(run.folder + "/master.m3u8")
        #expect(decode.status == 0, "\(decode.stderr.suffix(300))")
    }

    @Test func aLadderWithoutAudioHasNoAudioGroup() throws {
        let run = try transcode(try Media.path(.videoOnly), #"{"container": "hls", "segmentDuration": 1}"#)
        let summary = try Ladder.check(run.folder)
        // 320×240: only the 234-line rung fits.
        #expect(summary.variants.map(\.resolution) == [[312, 234]])
        let variant = try #require(summary.variants.first)
        #expect(summary.audio == nil && variant.audio == nil)
        #expect(!variant.codecs.contains("mp4a"))
        let master = try String(contentsOfFile: run.folder + "/master.m3u8", encoding: .utf8)
        #expect(!master.contains("EXT-X-MEDIA"))
        #expect(variant.durations == [1, 1], "\(variant.durations)")
        #expect(summary.dash.map(\.id) == ["234p"])
    }

    @Test func anAudioOnlyLadderIsOneVariant() throws {
        let run = try transcode(try Media.path(.audioOnly), #"{"container": "hls", "video": null}"#)
        let summary = try Ladder.check(run.folder)
        let variant = try #require(summary.variants.first)
        #expect(summary.variants.count == 1 && variant.resolution == nil)
        #expect(variant.codecs == "mp4a.40.2" && summary.iframes.isEmpty)
        #expect(summary.dash.map(\.id) == ["audio"])
        let decode = try Ladder.decodesCleanly(run.folder + "/master.m3u8")
        #expect(decode.status == 0, "\(decode.stderr.suffix(300))")
    }

    @Test func thumbnailsComeWithAnMP4Too() throws {
        let run = try transcode(try Media.path(.standard),
                                #"{"thumbnails": {"count": 4, "width": 64, "poster": {"time": 1}}}"#)
        #expect(Media.files(in: URL(fileURLWithPath: run.folder)) == ["output.mp4", "poster.jpg", "thumbnails"])
        #expect(Media.files(in: URL(fileURLWithPath: run.folder + "/thumbnails")).count == 4)
        #expect(run.result.path == run.folder + "/output.mp4")
        let video = try #require(try Probe.read(run.folder + "/output.mp4").video)
        #expect(video.width == 640)
        let poster = try #require(try Probe.read(run.folder + "/poster.jpg").video)
        #expect(poster.width == 640 && poster.height == 360)
    }

    /// A thumbnail (and a poster) shows the picture on screen at its time: the last one at or before it. In a gap
    /// of a variable-rate source (a screen recording, a cut: pictures from 3.967 s to 8.033 s) the points at 4 and
    /// 6 s showed the picture after the gap, seconds away from what a player shows there.
    @Test func aThumbnailInAGapShowsThePictureBeforeIt() throws {
        let input = try Media.scratch().appendingPathComponent("gap.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=12", "-vf", "select='not(between(t,4,8))'", "-fps_mode", "vfr",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        let run = try transcode(input, #"{"thumbnails": {"interval": 2, "width": 160, "poster": {"time": 5}}}"#)
        let frames = try Media.scratch()
        let before = try Probe.frame(input, at: 3.95, width: 160, height: 120, into: frames)
        let after = try Probe.frame(input, at: 8.05, width: 160, height: 120, into: frames)
        for number in [3, 4] {
            let thumbnail = run.folder + "/" + Thumbnailer.thumbnailPath(number)
            let (toBefore, toAfter) = (try Probe.psnr(thumbnail, before), try Probe.psnr(thumbnail, after))
            #expect(toBefore > toAfter + 3, "thumbnail \(number): \(toBefore) dB to the picture before the gap, \(toAfter) dB to the one after")
        }
        let posterBefore = try Probe.frame(input, at: 3.95, width: 320, height: 240, into: frames)
        let posterAfter = try Probe.frame(input, at: 8.05, width: 320, height: 240, into: frames)
        let poster = run.folder + "/poster.jpg"
        #expect(try Probe.psnr(poster, posterBefore) > Probe.psnr(poster, posterAfter) + 3, "the poster at 5 s is the picture before the gap")
    }

    /// Thumbnails by count are all written, those past the last picture from it: a song's one cover frame over 10 s
    /// of sound wrote one of 10.
    @Test func everyCountedThumbnailIsWritten() throws {
        let input = try Media.scratch().appendingPathComponent("still.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=1:d=1", "-f", "lavfi", "-i", "sine=d=10",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let run = try transcode(input, #"{"thumbnails": {"count": 10, "width": 64, "storyboard": true}}"#)
        #expect(Media.files(in: URL(fileURLWithPath: run.folder + "/thumbnails")).count == 10)
        let cues = try cues(run.folder + "/storyboard.vtt")
        #expect(cues.count == 10 && cues.first?.start == 0, "\(cues.map(\.start))")
    }

    /// An MP4's storyboard cues last as long as the file: past a video of 2 s, the 6 s of audio; without audio, to the
    /// last picture's end. Before, the last cue ended where the writer's progress stood (2 s into the audio's last
    /// 4 s), and by the checkpointed path at the video's end; without audio at the last picture's start.
    @Test func anMP4sStoryboardCoversTheWholeFile() throws {
        let input = try Media.scratch().appendingPathComponent("short-video.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=2", "-f", "lavfi", "-i", "sine=d=6",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let silent = try Media.scratch().appendingPathComponent("silent.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=2", "-c:v", "libx264", "-preset", "ultrafast",
                          "-pix_fmt", "yuv420p", silent])
        let settings = #"{"thumbnails": {"interval": 0.5, "width": 64, "storyboard": true}}"#
        for (input, checkpointed) in [(input, false), (input, true), (silent, false)] {
            let scratch = try Media.scratch()
            let folder = scratch.appendingPathComponent("out").path
            let session = TranscodeSession(inputPath: input, outputDirectory: folder, settings: try TranscodeSettings.parse(Data(settings.utf8)))
            if checkpointed { session.checkpointDirectory = scratch.appendingPathComponent("checkpoint").path }
            _ = try session.run()
            let length = try Probe.read(folder + "/output.mp4").format.durationSeconds
            #expect(length > (input == silent ? 1.99 : 5.9), "\(length)")
            let cues = try cues(folder + "/storyboard.vtt")
            let end = try #require(cues.last?.end)
            #expect(abs(end - length) < 0.01, "\(input), checkpointed \(checkpointed): the cues end at \(end) s of \(length) s")
        }
    }

    /// A checkpointed transcode's pictures are flushed into the checkpoint and linked into the output one by one,
    /// each a step of the finishing: with none, 10,000 thumbnails on storage slow to flush outlasted the stall
    /// timeout, and the job failed for good, its checkpoint with it. Each picture is now a step three times (flushed
    /// in the checkpoint, linked, flushed in the output), where the output's flush alone made one.
    @Test func aCheckpointsPicturesAreStepsOfTheFinishing() throws {
        let scratch = try Media.scratch()
        let folder = scratch.appendingPathComponent("out").path
        let settings = try TranscodeSettings.parse(Data(#"{"thumbnails": {"interval": 0.1, "width": 32}}"#.utf8))
        let session = TranscodeSession(inputPath: try Media.path(.standard), outputDirectory: folder, settings: settings)
        session.checkpointDirectory = scratch.appendingPathComponent("checkpoint").path
        var steps = 0
        _ = try session.run { steps = max(steps, $0.finishing ?? 0) }
        let pictures = Media.files(in: URL(fileURLWithPath: folder + "/thumbnails")).count
        #expect(pictures >= 40, "\(pictures)")
        #expect(steps >= 3 * pictures, "\(steps) finishing steps for \(pictures) pictures")
    }

    /// Thumbnails asked large keep their size; the storyboard's tiles are shrunk to 320 pixels on their longer side,
    /// so a sprite of many large tiles neither holds gigabytes nor passes JPEG's size limit. Portrait here: the
    /// height is the longer side.
    @Test func largeThumbnailsMakeAStoryboardOfSmallTiles() throws {
        let input = try Media.scratch().appendingPathComponent("portrait.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=360x640:r=10:d=3", "-c:v", "libx264", "-preset", "ultrafast",
                          "-pix_fmt", "yuv420p", input])
        let run = try transcode(input, #"{"thumbnails": {"interval": 0.5, "width": 720, "storyboard": true}}"#)
        let thumbnail = try #require(try Probe.read(run.folder + "/thumbnails/00001.jpg").video)
        #expect(thumbnail.width == 720 && thumbnail.height == 1280)
        let sprite = try #require(try Probe.read(run.folder + "/storyboard.jpg").video)
        #expect(sprite.width == 6 * 180 && sprite.height == 320, "\(sprite.width)x\(sprite.height)")
        let cues = try String(contentsOfFile: run.folder + "/storyboard.vtt", encoding: .utf8)
        #expect(cues.contains("storyboard.jpg#xywh=180,0,180,320"), "\(cues.prefix(200))")
    }

    /// A video that starts a second after its audio ends a second after its length: the DASH manifest lasts until
    /// then, or players stop before the last second of the video.
    @Test func theManifestLastsUntilTheLastTrackEnds() throws {
        let input = try Media.scratch().appendingPathComponent("late.mkv").path
        try Media.ffmpeg(["-itsoffset", "1", "-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=4", "-f", "lavfi", "-i", "sine=d=3",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 1, "thumbnails": {"interval": 1, "storyboard": true}}"#)
        let manifest = try String(contentsOfFile: run.folder + "/manifest.mpd", encoding: .utf8)
        let declared = try #require((manifest.firstMatch(of: #/mediaPresentationDuration="PT([0-9.]+)S"/#)?.1).flatMap { Double($0) })
        #expect(abs(declared - 5) < 0.1, "the manifest lasts \(declared) s; the video ends at 5 s")
        // So do the job's duration and the storyboard: its cues (thumbnails at 0, 1, … 4 s of the timeline) cover the
        // last second too. They stopped at the video's length (4 s), the last cue empty (4 --> 4).
        #expect(abs(run.result.duration - 5) < 0.1, "\(run.result.duration)")
        let cues = try String(contentsOfFile: run.folder + "/storyboard.vtt", encoding: .utf8).split(separator: "\n")
            .filter { $0.contains(" --> ") }.map { line in line.split(separator: " ").compactMap { Self.vttSeconds($0) } }
        #expect(cues.allSatisfy { $0.count == 2 && $0[1] > $0[0] } && abs((cues.last?.last ?? 0) - 5) < 0.1, "\(cues)")
    }

    /// Sound that starts 3 s after the picture has silence before it in a ladder, so its playlist starts at zero as
    /// the video's does: a playlist places segments by adding up their lengths from zero, and the audio's first
    /// segment, holding 3 s of media time, was listed at 0 (an MSE player buffered from 3 s on and skipped the
    /// video's first seconds; a seek took the wrong segment).
    @Test func soundThatStartsLateIsPrecededBySilenceInALadder() throws {
        let input = try Media.scratch().appendingPathComponent("late-sound.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=6", "-itsoffset", "3", "-f", "lavfi", "-i", "sine=f=1000:d=3",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 234}}]}"#)
        let audio = try Ladder.listedSeconds(run.folder, playlist: "audio/index.m3u8")
        let video = try Ladder.listedSeconds(run.folder, playlist: "234p/index.m3u8")
        #expect(abs(audio - 6) < 0.1 && abs(video - 6) < 0.1, "audio lists \(audio) s, video \(video) s")
        // Played through its playlist: silence, then the tone from 3 s.
        // The stretch measured alone (`atrim` before `volumedetect`: output -ss and -t cut after the filters).
        func level(from start: Double, for seconds: Double) throws -> Double {
            try #require(try Media.meanVolume(of: run.folder + "/audio/index.m3u8", after: "atrim=start=\(start):duration=\(seconds)"),
                         "no level from \(start) s")
        }
        let before = try level(from: 0.2, for: 2.6), after = try level(from: 3.1, for: 2.7)
        #expect(before < -60 && after > -26, "before 3 s: \(before) dB, after: \(after) dB")
        _ = try Ladder.check(run.folder)
    }

    /// Video that starts after its sound has its first picture held from zero in a ladder, so its playlist and the
    /// audio's both start there (RFC 8216: every variant's first segment at the same time): its first segment,
    /// holding media from 1.5 s, was listed from 0, and a player placed the video 1.5 s early.
    @Test func videoThatStartsLateHoldsItsFirstPictureFromZeroInALadder() throws {
        let input = try Media.scratch().appendingPathComponent("late-video.mkv").path
        try Media.ffmpeg(["-itsoffset", "1.5", "-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=4.5", "-f", "lavfi", "-i", "sine=f=1000:d=6",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 234}}]}"#)
        // Where each track's first sample is on the ladder's timeline, read from its joined segments.
        func firstTime(_ track: String) throws -> Double {
            let joined = try Ladder.joined(run.folder, track: track)
            let text = try Shell.check("ffprobe", ["-v", "error", "-show_entries", "packet=pts_time", "-read_intervals", "%+#1", "-of", "csv=p=0", joined])
            return try #require(Double(text.split(separator: "\n").first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""), "\(text)")
        }
        // A source whose tracks start together comes out about 0.13 s apart here (the video's B-frame delay beside
        // the audio's priming); 1.5 s late, the video started 1.6 s after.
        let video = try firstTime("234p"), audio = try firstTime("audio")
        #expect(abs(video - audio) < 0.3, "video from \(video) s, audio from \(audio) s")
        let listed = try Ladder.listedSeconds(run.folder, playlist: "234p/index.m3u8")
        #expect(abs(listed - 6) < 0.1, "the video lists \(listed) s")
        _ = try Ladder.check(run.folder)
    }

    /// `HH:MM:SS.mmm` in seconds.
    private static func vttSeconds(_ text: Substring) -> Double? {
        let parts = text.split(separator: ":").compactMap { Double($0) }
        guard parts.count == 3, text.contains(".") else { return nil }
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    }

    /// A 1 s 1920×1080 clip at 30 fps.
    private func fullHD() throws -> String {
        let input = try Media.scratch().appendingPathComponent("1080p.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=1920x1080:r=30:d=1", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        return input
    }

    /// A level holds the rungs of an automatic ladder, not the source they are made from: a 1080p source is over
    /// level 3.1 (the source's own size was checked too, and the job failed), and so is the table's 1080-line rung,
    /// left out as a rung larger than the source is (it failed the job too): the rungs go up to 1280×720.
    @Test func anAutomaticLadderHoldsItsRungsToTheLevel() throws {
        let run = try transcode(try fullHD(), #"{"container": "hls", "video": {"level": "3.1"}}"#)
        #expect(run.result.tracks.filter { $0.mediaType == .video }.compactMap(\.height) == [720, 540, 432, 360, 234], "\(run.result.tracks)")
    }

    /// An automatic ladder stays within the box of the preset (or the document's width and height): the page's
    /// "480p" with a ladder made rungs up to 1920×1080 of a 1080p source.
    @Test func anAutomaticLadderStaysWithinThePresetsBox() throws {
        let run = try transcode(try fullHD(), #"{"preset": "480p", "container": "hls", "renditions": "auto"}"#)
        let summary = try Ladder.check(run.folder)
        #expect(summary.variants.compactMap(\.resolution) == [[768, 432], [640, 360], [416, 234]], "\(summary.variants.map(\.resolution))")
    }

    /// Rungs that ask no key-frame interval share the ladder's grid: one at 30 fps (60 pictures, 2.000 s) beside
    /// one keeping a 59.94 fps source's rate (120 pictures, 2.002 s) failed the job, refused as misaligned.
    @Test func rungsAtWholeAndNTSCRatesShareTheirKeyFrames() throws {
        let input = try Media.scratch().appendingPathComponent("ntsc.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=60000/1001:d=5", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        let run = try transcode(input, #"{"container": "hls", "renditions": [{"video": {"height": 360}}, {"video": {"height": 234, "frameRate": 30}}]}"#)
        let high = try Ladder.keyFrameTimes(run.folder, track: "360p"), low = try Ladder.keyFrameTimes(run.folder, track: "234p")
        // As decoded (each rung's own encoder delay before its first picture), 2 s apart in both.
        let spacing = { (times: [Double]) in zip(times.dropFirst(), times).map { (($0 - $1) * 100).rounded() / 100 } }
        #expect(high.times.count == 3 && spacing(high.times) == [2, 2] && spacing(low.times) == [2, 2],
                "key frames at \(high.times) and \(low.times)")
        _ = try Ladder.check(run.folder)
    }

    /// The DASH manifest calls the video renditions' segments aligned only when they start at the same times: at
    /// another frame rate (10 fps beside 29.97) a rung's segments start up to a frame apart, and it said aligned
    /// regardless (its segments overlap, which ISO 23009-1's alignment excludes); at one rate they are.
    @Test func theManifestSaysSegmentsAreAlignedOnlyWhenTheyAre() throws {
        let input = try Media.scratch().appendingPathComponent("ntsc.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=30000/1001:d=6", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", input])
        for (rungs, expected) in [(#"[{"video": {"height": 360}}, {"video": {"height": 234, "frameRate": 10}}]"#, false),
                                  (#"[{"video": {"height": 360}}, {"video": {"height": 234}}]"#, true)] {
            let run = try transcode(input, #"{"container": "hls", "segmentDuration": 2, "renditions": \#(rungs)}"#)
            let manifest = try String(contentsOfFile: run.folder + "/manifest.mpd", encoding: .utf8)
            // Each representation's segment starts in seconds, read from the manifest.
            var starts: [[Double]] = []
            for representation in manifest.components(separatedBy: "<Representation ").dropFirst() where representation.contains("width=") {
                func attribute(_ name: String, in text: some StringProtocol) -> Double {
                    guard let range = text.range(of: " \(name)=\"") else { return 0 }
                    return Double(text[range.upperBound...].prefix { $0 != "\"" }) ?? 0
                }
                let template = try #require(representation.components(separatedBy: "<SegmentTemplate").dropFirst().first)
                let scale = attribute("timescale", in: template), offset = attribute("presentationTimeOffset", in: template)
                var times: [Double] = [], next = 0.0
                for entry in template.components(separatedBy: "<S ").dropFirst() {
                    let start = entry.contains(" t=") ? attribute("t", in: " " + entry) : next
                    let duration = attribute("d", in: " " + entry), repeats = Int(attribute("r", in: " " + entry))
                    for index in 0...repeats { times.append((start + Double(index) * duration - offset) / scale) }
                    next = start + Double(repeats + 1) * duration
                }
                starts.append(times)
            }
            try #require(starts.count == 2, "\(starts)")
            let apart = starts[0].count != starts[1].count ? .infinity : zip(starts[0], starts[1]).map { abs($0 - $1) }.max() ?? 0
            #expect((apart < 0.001) == expected, "\(rungs): segments \(apart) s apart: \(starts)")
            #expect(manifest.contains(#"segmentAlignment="\#(expected)""#), "\(rungs): \(manifest.prefix(700))")
            _ = try Ladder.check(run.folder)
        }
    }

    /// A last segment too short to measure a peak over (1 s of 2 s segments) left BANDWIDTH below the playlist's
    /// own AVERAGE-BANDWIDTH (`Ladder.check` refuses that for every variant and I-frame playlist).
    @Test func theBandwidthIsNeverBelowTheAverage() throws {
        let input = try Media.scratch().appendingPathComponent("tone.m4a").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "sine=d=3:sample_rate=48000", "-ac", "1", "-c:a", "aac", input])
        let run = try transcode(input, #"{"container": "hls", "segmentDuration": 2}"#)
        let summary = try Ladder.check(run.folder)
        #expect(summary.variants.count == 1 && summary.variants[0].bandwidth >= summary.variants[0].averageBandwidth)
    }

    @Test func aCanceledLadderLeavesNothing() throws {
        let scratch = try Media.scratch()
        let token = CancellationToken()
        let session = TranscodeSession(inputPath: try Media.path(.tenSeconds), outputDirectory: scratch.appendingPathComponent("out").path,
                                       settings: try TranscodeSettings.parse(Data(#"{"container": "hls", "thumbnails": {"interval": 1}}"#.utf8)),
                                       cancellation: token)
        #expect(throws: MediaError.canceled) {
            try session.run { progress in if progress.presentationTime > 1 { token.cancel() } }
        }
        #expect(Media.files(in: scratch).isEmpty, "\(Media.files(in: scratch))")
    }

    @Test func renditionsMustShareTheirKeyFrameInstants() throws {
        let scratch = try Media.scratch()
        let session = TranscodeSession(
            inputPath: try Media.path(.standard), outputDirectory: scratch.appendingPathComponent("out").path,
            // 60 pictures at the source's 30 fps and at 15: intake cannot tell (the source's rate is not known there).
            settings: try TranscodeSettings.parse(Data(#"{"container": "hls", "renditions": [{"video": {"maxKeyFrameInterval": 60}}, {"video": {"height": 234, "frameRate": 15, "maxKeyFrameInterval": 60}}]}"#.utf8)))
        let error = #expect(throws: MediaError.self) { try session.run() }
        #expect(error?.code == "invalid_settings" && error?.message.contains("renditions[1].video.maxKeyFrameInterval") == true,
                "\(String(describing: error))")
        #expect(Media.files(in: scratch).isEmpty)
    }

    /// A rung's setting the source cannot meet is named as the rung's: a level too small for the rung's pictures
    /// (an 854×480 rung at level 3 and 30 fps, which intake cannot judge: the rate is not known there) failed
    /// naming `video.level`, a key the settings did not have.
    @Test func aRungsSettingTheSourceCannotMeetIsNamedAsTheRungs() throws {
        let scratch = try Media.scratch()
        let session = TranscodeSession(
            inputPath: try Media.path(.standard), outputDirectory: scratch.appendingPathComponent("out").path,
            settings: try TranscodeSettings.parse(Data(#"{"container": "hls", "renditions": [{"video": {"height": 234}}, {"video": {"height": 360, "level": "2"}}]}"#.utf8)))
        let error = #expect(throws: MediaError.self) { try session.run() }
        #expect(error?.code == "invalid_settings" && error?.message.hasPrefix("renditions[1].video.level: level 2 ") == true,
                "\(String(describing: error))")
        #expect(Media.files(in: scratch).isEmpty)
    }

    /// Rungs accepted at intake (60 pictures at 30 fps and 120 at 60: both 2 s) run on a 30 fps source, whose
    /// rate the rung asking 60 keeps: its interval stays 2 s, not 120 pictures of 30 (4 s, refused as misaligned).
    @Test func aRungAskingMoreThanTheSourcesRateKeepsItsKeyFrameSeconds() throws {
        let json = #"{"container": "hls", "renditions": [{"video": {"height": 360, "frameRate": 60, "maxKeyFrameInterval": 120}}, {"video": {"height": 234, "frameRate": 30, "maxKeyFrameInterval": 60}}]}"#
        try TranscodeSettings.parse(Data(json.utf8)).checkAtIntake()
        let run = try transcode(try Media.path(.standard), json)
        for track in ["360p", "234p"] {
            let (times, _) = try Ladder.keyFrameTimes(run.folder, track: track)
            #expect(times.count == 2 && abs(times[1] - times[0] - 2) < 0.01, "\(track): key frames at \(times)")
        }
        // Both variants say the rate they hold (the first said 60).
        let master = try String(contentsOfFile: run.folder + "/master.m3u8", encoding: .utf8)
        #expect(master.components(separatedBy: "FRAME-RATE=30.000").count == 3 && !master.contains("FRAME-RATE=60"), "\(master)")
    }

    @Test(arguments: [
        (#"{"renditions": "auto"}"#, "renditions: a ladder is written by \"container\": \"hls\" only"),
        (#"{"container": "hls", "segmentDuration": 0.5}"#, "segmentDuration: expected"),
        (#"{"segmentDuration": 4}"#, "segmentDuration: segments are written by \"container\": \"hls\" only"),
        (#"{"container": "hls", "video": "copy"}"#, "video: a ladder encodes its renditions"),
        (#"{"container": "hls", "renditions": []}"#, "renditions: expected 1 to 8 renditions"),
        (#"{"container": "hls", "renditions": [{"video": {"width": 641}}]}"#, "renditions[0].video.width: expected an even number"),
        (#"{"container": "hls", "renditions": [{"audio": {}}]}"#, "renditions[0].audio: unknown key"),
        (#"{"thumbnails": {"interval": 2, "count": 3}}"#, "thumbnails.count: give interval or count, not both"),
        (#"{"thumbnails": {"storyboard": true, "poster": 0.1}}"#, "thumbnails.storyboard: a storyboard is made of thumbnails"),
        (#"{"thumbnails": {"width": 100, "interval": 0.01}}"#, "thumbnails.interval: expected"),
        (#"{"thumbnails": {"poster": 2}}"#, "thumbnails.poster: expected"),
        (#"{"thumbnails": {}}"#, "thumbnails: expected interval, count or poster"),
    ])
    func ladderAndThumbnailSettingsAreValidated(json: String, expected: String) {
        var message: String?
        do {
            _ = try TranscodeSettings.parse(Data(json.utf8))
        } catch {
            message = error.description
        }
        #expect(message?.contains(expected) == true, "got \(message ?? "no error")")
    }

    @Test func keyFrameGridMarksIntervalsAndSegmentBoundaries() {
        var grid = KeyFrameGrid(interval: 2, segmentDuration: 3)
        let times = stride(from: 0.0, to: 7, by: 0.5).filter { grid.isKeyFrame(at: $0) }
        #expect(times == [0, 1.5, 3, 4.5, 6], "each 3 s segment split evenly, no part over 2 s")
        #expect(KeyFrameGrid.segment(at: 5.9996, duration: 3) == 2, "half a millisecond early is on time")
    }

    /// 60 pictures at 29.97 fps are 2.002 s: counted from 0 that interval drifts off the 6 s boundaries, and from
    /// 36 s on key frames came in pairs one picture apart (36.003 and 36.036), 394 IDRs in 10 minutes instead of 300.
    @Test func ntscKeyFramesStayEvenlySpacedOverTenMinutes() {
        var grid = KeyFrameGrid(interval: 60 * 1001 / 30000.0, segmentDuration: 6)
        let frame = 1001 / 30000.0
        let keys = (0..<(600 * 30000 / 1001)).map { Double($0) * frame }.filter { grid.isKeyFrame(at: $0) }
        let gaps = zip(keys, keys.dropFirst()).map { $1 - $0 }
        #expect(keys.count == 300, "\(keys.count) key frames")
        #expect(gaps.allSatisfy { $0 > 1.95 && $0 < 2.05 }, "gaps from \(gaps.min() ?? 0) to \(gaps.max() ?? 0) s")
        for boundary in stride(from: 0.0, to: 600, by: 6) {
            #expect(keys.contains { $0 >= boundary - 0.0005 && $0 < boundary + frame }, "a key frame opens the segment at \(boundary) s")
        }
    }

    @Test func storyboardCuesTileTheTimeline() {
        let board = Storyboard(tileWidth: 160, tileHeight: 90, starts: Array(stride(from: 0.0, to: 24, by: 2)))
        #expect(board.columns == 10 && board.rows == 2 && board.width == 1600 && board.height == 180)
        let text = board.cues(duration: 23.5)
        #expect(text.contains("00:00:20.000 --> 00:00:22.000\nstoryboard.jpg#xywh=0,90,160,90"))
        #expect(text.hasSuffix("00:00:22.000 --> 00:00:23.500\nstoryboard.jpg#xywh=160,90,160,90\n"))
    }

    @Test func automaticRungsFollowApplesTable() {
        #expect(Renditions.automatic(sourceLines: 2160).map(\.lines) == [1080, 720, 540, 432, 360])
        #expect(Renditions.automatic(sourceLines: 720).map(\.lines) == [720, 540, 432, 360, 234])
        #expect(Renditions.automatic(sourceLines: 480).map(\.lines) == [432, 360, 234])
        #expect(Renditions.automatic(sourceLines: 120).map(\.lines) == [120], "a tiny source keeps its own size")
    }

    /// A checkpointed ladder (every job's is) counts the frames it encoded: they were reckoned from its length and
    /// frame rate, 1196 for a variable-rate source's 1107.
    @Test func aCheckpointedLadderCountsTheFramesOfAVariableRateSource() throws {
        let scratch = try Media.scratch()
        let input = scratch.appendingPathComponent("vfr.mkv").path
        // 240 pictures at 30 fps, every 13th left out: 221.
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=30:d=8", "-vf", "select='mod(n\\,13)'", "-fps_mode", "vfr",
                          "-c:v", "libx264", "-preset", "ultrafast", input])
        let folder = scratch.appendingPathComponent("out").path
        let session = TranscodeSession(inputPath: input, outputDirectory: folder, settings: try TranscodeSettings.parse(Data(
            #"{"container": "hls", "segmentDuration": 2, "renditions": [{"video": {"height": 180, "preset": "ultrafast"}}]}"#.utf8)))
        session.checkpointDirectory = scratch.appendingPathComponent("checkpoint").path
        let result = try session.run()
        let joined = try Ladder.joined(folder, track: "180p")
        defer { try? FileManager.default.removeItem(atPath: joined) }
        let packets = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-count_packets", "-show_entries",
                                                  "stream=nb_read_packets", "-of", "csv=p=0", joined])
        #expect(Int(packets.trimmingCharacters(in: .whitespacesAndNewlines)) == 221 && result.framesEncoded == 221,
                "\(result.framesEncoded) frames said, \(packets) in the rendition")
    }
}
