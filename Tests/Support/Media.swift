import Foundation
import Pipeline
import Locks

/// Test media, generated with the ffmpeg CLI (lavfi `testsrc2` and `sine`) on first use and shared by the tests
/// of one process. Nothing binary is committed.
public enum Media {
    /// A generated clip; the name is its file name.
    public enum Clip: String, CaseIterable, Sendable {
        /// 640×360, 30 fps, 4 s, H.264 + AAC 48 kHz stereo in MP4 (moov first).
        case standard = "standard.mp4"
        /// 640×360, 30 fps, 10 s of moving noise-like picture, for bit-rate checks; index (moov) first.
        case tenSeconds = "ten-seconds.mp4"
        /// 320×240 red top half over blue bottom half, 2 s, H.264, tagged `rotate=90` (a quarter-turn display matrix).
        case rotated90 = "rotated-90.mp4"
        /// The same picture tagged `rotate=270`: the opposite quarter turn.
        case rotated270 = "rotated-270.mp4"
        /// 720×576 with a 16:15 sample aspect ratio (PAL 4:3), 2 s, MPEG-4 Part 2 in AVI.
        case anamorphic = "anamorphic.avi"
        /// 3 s of a 440 Hz sine, 48 kHz mono, WAV.
        case audioOnly = "audio-only.wav"
        /// 2 s of video only, 320×240 VP9 in WebM.
        case videoOnly = "video-only.webm"
        /// 8 s, 1280×720, for cancellation and progress.
        case long = "long.mkv"
        /// Audio starting 0.5 s after the video, MPEG-TS.
        case lateAudio = "late-audio.ts"
        /// 720×576 PAL 25i (top field first): 50 moving pictures a second woven into fields, 2 s, MPEG-2 in MPEG-TS.
        case interlaced = "interlaced.ts"
        /// 8 s of video; its audio, a 1 kHz tone in 0.1 s PCM frames, has a 2 s hole in its timestamps at 3 s (the
        /// tone stops at 3 s and comes back at 5 s), Matroska.
        case audioHole = "audio-hole.mkv"
        /// 5.7 s of video; its audio (a 1 kHz tone, silent from 4 to 4.5 s of its samples) is stamped 0.3 s early from
        /// 3 s on: 0.3 s of it overlaps what came before, and the silence belongs at 3.7 to 4.2 s, Matroska.
        case audioOverlap = "audio-overlap.mkv"
        /// 8 s of video; audio silent until a 1 kHz tone at 7 s, whose clock runs 0.5 % fast: 44,321 samples a second
        /// of timestamps in a stream tagged 44,100 Hz (played at its rate, the tone would come at 7.035 s), Matroska.
        case audioDrift = "audio-drift.mkv"
        /// Video starting 1 s after the audio (3 s of each), Matroska (FFmpeg's MP4 muxer would hold the first
        /// picture for that second instead).
        case lateVideo = "late-video.mkv"
        /// 8 s of video and audio whose timestamps start at 9,000,000,000 s, Matroska: its header declares the end
        /// of its timeline (9,000,000,008 s), not its length.
        case farStart = "far-start.mkv"
        /// 8 s of video and audio starting at 5 s, Matroska, in clusters of 0.5 s (for `Matroska.shiftClusters`).
        case offsetStart = "offset-start.mkv"
    }

    private static let generated = LockedValue<Set<String>>([])

    /// Folder of the generated files for this test process.
    public static let directory: URL = {
        // FFmpeg's own chatter from in-process transcodes would bury the test report; errors still show.
        MediaLog.setLevel(.error)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("transcoderd-tests")
        // Folders of test processes that have ended are removed, so runs do not pile up in /tmp.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? [] {
            if let pid = Int32(name), kill(pid, 0) != 0 { try? FileManager.default.removeItem(at: root.appendingPathComponent(name)) }
        }
        let url = root.appendingPathComponent(String(getpid()))
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }()

    /// A fresh, empty folder for one test's outputs.
    public static func scratch() throws -> URL {
        let url = directory.appendingPathComponent("scratch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// The clip's path, generating it the first time.
    public static func path(_ clip: Clip) throws -> String {
        let path = directory.appendingPathComponent(clip.rawValue).path
        try generated.withLock { done in
            guard !done.contains(clip.rawValue) else { return }
            try ffmpeg(arguments(clip, path))
            if clip == .rotated90 || clip == .rotated270 {
                // ffmpeg 5.1 ignores the rotate tag while encoding; a stream copy applies it.
                let plain = path + ".plain.mp4"
                try FileManager.default.moveItem(atPath: path, toPath: plain)
                let angle = clip == .rotated90 ? "90" : "270"
                try ffmpeg(["-i", plain, "-c", "copy", "-metadata:s:v:0", "rotate=" + angle, path])
                try FileManager.default.removeItem(atPath: plain)
            }
            done.insert(clip.rawValue)
        }
        return path
    }

    private static func arguments(_ clip: Clip, _ path: String) -> [String] {
        switch clip {
        case .standard:
            return ["-f", "lavfi", "-i", "testsrc2=s=640x360:r=30:d=4", "-f", "lavfi", "-i", "sine=f=440:r=48000:d=4",
                    "-ac", "2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac",
                    "-movflags", "+faststart", path]
        case .tenSeconds:
            return ["-f", "lavfi", "-i", "testsrc2=s=640x360:r=30:d=10,noise=alls=30:allf=t", "-f", "lavfi", "-i",
                    "sine=f=440:r=44100:d=10", "-ac", "2", "-c:v", "libx264", "-preset", "ultrafast", "-crf", "18",
                    "-pix_fmt", "yuv420p", "-c:a", "aac", "-movflags", "+faststart", path]
        case .rotated90, .rotated270:
            return ["-f", "lavfi", "-i", "color=red:s=320x120:r=30:d=2", "-f", "lavfi", "-i", "color=blue:s=320x120:r=30:d=2",
                    "-filter_complex", "[0][1]vstack", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", path]
        case .anamorphic:
            return ["-f", "lavfi", "-i", "testsrc2=s=720x576:r=25:d=2,setsar=16/15", "-c:v", "mpeg4", "-q:v", "3", path]
        case .audioOnly:
            return ["-f", "lavfi", "-i", "sine=f=440:r=48000:d=3", "-ac", "1", path]
        case .videoOnly:
            return ["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=2", "-c:v", "libvpx-vp9", "-deadline", "realtime",
                    "-cpu-used", "8", path]
        case .long:
            return ["-f", "lavfi", "-i", "testsrc2=s=1280x720:r=30:d=8", "-f", "lavfi", "-i", "sine=f=300:d=8",
                    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", path]
        case .lateAudio:
            return ["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=3", "-itsoffset", "0.5", "-f", "lavfi", "-i",
                    "sine=f=440:d=2.5", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                    "-c:a", "aac", "-f", "mpegts", path]
        case .interlaced:
            return interlacedArguments(size: "720x576") + [path]
        case .audioHole:
            // 0.1 s frames, so the hole starts exactly at 3 s (T is the frame's start; 2.95 keeps float rounding out).
            return ["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=8", "-f", "lavfi", "-i",
                    "sine=f=1000:r=44100:d=6:samples_per_frame=4410", "-af", "asetpts='if(gte(T,2.95),PTS+2/TB,PTS)'",
                    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "pcm_s16le", path]
        case .audioOverlap:
            return ["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=5.7", "-f", "lavfi", "-i",
                    "aevalsrc='if(between(t,4,4.5),0,sin(2*PI*1000*t))':s=44100:d=6:n=4410",
                    "-af", "asetpts='if(gte(T,2.95),PTS-0.3/TB,PTS)'",
                    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "pcm_s16le", path]
        case .audioDrift:
            return ["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=8", "-f", "lavfi", "-i",
                    "aevalsrc='if(gte(t,7),sin(2*PI*1000*t),0)':s=44321:d=8:n=4432",
                    "-af", "asetrate=44100,asetpts='N/44321/TB'",
                    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "pcm_s16le", path]
        case .lateVideo:
            return ["-itsoffset", "1", "-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=3", "-f", "lavfi", "-i",
                    "sine=f=440:d=3", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", path]
        case .farStart:
            return ["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=8", "-f", "lavfi", "-i", "sine=d=8",
                    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac",
                    "-output_ts_offset", "9000000000", path]
        case .offsetStart:
            return ["-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=8", "-f", "lavfi", "-i", "sine=d=8",
                    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac",
                    "-cluster_time_limit", "500", "-output_ts_offset", "5", path]
        }
    }

    /// ffmpeg arguments, all but the output path, for 2 s of `size` (e.g. `720x576`) video at 25i, top field first:
    /// 50 moving pictures a second woven into fields, MPEG-2 in MPEG-TS.
    public static func interlacedArguments(size: String) -> [String] {
        ["-f", "lavfi", "-i", "testsrc2=s=\(size):r=50:d=2", "-vf", "tinterlace=interleave_top,setfield=tff",
         "-c:v", "mpeg2video", "-b:v", "8M", "-flags", "+ilme+ildct", "-alternate_scan", "1", "-top", "1",
         "-f", "mpegts"]
    }

    /// The mean volume (dB) ffmpeg's `volumedetect` measures over the sound of `file` after `filters` (a filter
    /// chain, or none); nil when it says none.
    public static func meanVolume(of file: String, after filters: String? = nil) throws -> Double? {
        let chain = (filters.map { [$0] } ?? []) + ["volumedetect"]
        let report = try Shell.run("ffmpeg", ["-nostdin", "-i", file, "-af", chain.joined(separator: ","), "-f", "null", "-"]).stderr
        let line = report.split(separator: "\n").last { $0.contains("mean_volume:") }
        return line.flatMap { Double($0.split(separator: ":").last?.replacingOccurrences(of: "dB", with: "").trimmingCharacters(in: .whitespaces) ?? "") }
    }

    /// Runs ffmpeg quietly, overwriting its output.
    public static func ffmpeg(_ arguments: [String]) throws {
        try Shell.check("ffmpeg", ["-v", "error", "-y", "-nostdin"] + arguments)
    }

    /// Writes the first `fraction` of `source`'s bytes to a new file: an upload cut short.
    public static func truncated(_ source: String, fraction: Double, into folder: URL) throws -> String {
        let data = try Data(contentsOf: URL(fileURLWithPath: source))
        let path = folder.appendingPathComponent("truncated-\(Int(fraction * 100))-" + URL(fileURLWithPath: source).lastPathComponent).path
        try data.prefix(Int(Double(data.count) * fraction)).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// A file of `count` pseudo-random bytes.
    public static func randomBytes(_ count: Int, into folder: URL, name: String = "random.mp4") throws -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let path = folder.appendingPathComponent(name).path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// An HDR transfer a test source is made in.
    public enum HDRTransfer: String, Sendable {
        case pq = "smpte2084"
        case hlg = "arib-std-b67"
    }

    /// 640×360, 30 fps, 2 s of white, mid-grey (0x808080) and red patches side by side (columns 0–213, 214–425,
    /// 426–639) made HDR: BT.2020, `transfer` with SDR white at HDR's reference white (203 cd/m², BT.2408), 10-bit
    /// HEVC stating a content light level of `maxCLL` cd/m², tagged in the stream and the MP4 (`transferOnly`: the
    /// transfer alone, primaries and matrix left unspecified). Generated once per process and variant.
    public static func hdrPatches(_ transfer: HDRTransfer, maxCLL: Int = 1000, transferOnly: Bool = false) throws -> String {
        let path = directory.appendingPathComponent("hdr-\(transfer.rawValue)-\(maxCLL)\(transferOnly ? "-transfer-only" : "").mp4").path
        try generated.withLock { done in
            guard !done.contains(path) else { return }
            try encodeHDRPatches(transfer, seconds: 2, x265: ":max-cll=\(maxCLL),400", transferOnly: transferOnly, into: path)
            done.insert(path)
        }
        return path
    }

    /// The PQ patches of `hdrPatches` for 8 s with a key frame every second, whose content light level (203 cd/m²)
    /// only the first picture's SEI states, as in-band HEVC from a camera has it: the MP4 (its `hvcC` included) and
    /// the pictures after the first second state none, so a decoder started after it sees no peak at all.
    /// Generated once per process.
    public static func hdrPatchesStatingTheirPeakAtFirstOnly() throws -> String {
        let path = directory.appendingPathComponent("hdr-peak-at-first-only.mp4").path
        try generated.withLock { done in
            guard !done.contains(path) else { return }
            // Raw HEVC with its headers in-band, without B-frames (a raw stream has no timestamps to reorder by),
            // both parts one stream: the MP4 muxer takes the parameter sets into `hvcC`, but not the SEI.
            let first = path + ".first.hevc", rest = path + ".rest.hevc", both = path + ".hevc"
            try encodeHDRPatches(.pq, seconds: 1, x265: ":bframes=0:max-cll=203,400", transferOnly: false, format: ["-f", "hevc"], into: first)
            try encodeHDRPatches(.pq, seconds: 7, x265: ":bframes=0", transferOnly: false, format: ["-f", "hevc"], into: rest)
            var joined = try Data(contentsOf: URL(fileURLWithPath: first))
            joined.append(try Data(contentsOf: URL(fileURLWithPath: rest)))
            try joined.write(to: URL(fileURLWithPath: both))
            try ffmpeg(["-framerate", "30", "-i", both, "-c", "copy", "-tag:v", "hvc1", "-color_trc", HDRTransfer.pq.rawValue,
                        "-color_primaries", "bt2020", "-colorspace", "bt2020nc", path])
            for file in [first, rest, both] { unlink(file) }
            done.insert(path)
        }
        return path
    }

    /// Encodes the patches of `hdrPatches` for `seconds` into `path` (an MP4 unless `format` says otherwise), with
    /// `x265` added to the encoder's parameters.
    private static func encodeHDRPatches(_ transfer: HDRTransfer, seconds: Int, x265 extra: String, transferOnly: Bool,
                                         format: [String] = [], into path: String) throws {
        let t = transfer.rawValue
        let x265 = (transferOnly ? "" : "colorprim=bt2020:colormatrix=bt2020nc:") + "transfer=\(t):keyint=30:log-level=error" + extra
        try ffmpeg(["-f", "lavfi", "-i", "color=white:s=214x360:r=30:d=\(seconds)",
                    "-f", "lavfi", "-i", "color=0x808080:s=212x360:r=30:d=\(seconds)",
                    "-f", "lavfi", "-i", "color=red:s=214x360:r=30:d=\(seconds)",
                    "-filter_complex", "[0][1][2]hstack=3,format=yuv420p,zscale=tin=bt709:min=bt709:pin=bt709:rin=tv"
                        + ":t=\(t):m=bt2020nc:p=bt2020:r=tv:npl=203,format=yuv420p10le"
                        + (transferOnly ? ",setparams=color_primaries=unknown:colorspace=unknown" : ""),
                    "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", x265, "-color_trc", t, "-tag:v", "hvc1"]
                    + (transferOnly ? [] : ["-color_primaries", "bt2020", "-colorspace", "bt2020nc"]) + format + [path])
    }

    /// An MPEG-TS broadcast whose picture changes shape mid-stream: 2 s of white 640×360 (16:9), then 2 s of red
    /// 480×360 (4:3) with blue bands 40 lines high at its top and bottom, H.264 with its parameter sets in-band,
    /// no sound. Generated once per process.
    public static func shapeChange() throws -> String {
        let path = directory.appendingPathComponent("shape-change.ts").path
        try generated.withLock { done in
            guard !done.contains(path) else { return }
            let wide = path + ".wide.ts", narrow = path + ".narrow.ts"
            let x264 = ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", "30", "-an"]
            try ffmpeg(["-f", "lavfi", "-i", "color=white:s=640x360:r=30:d=2"] + x264 + [wide])
            try ffmpeg(["-f", "lavfi", "-i", "color=red:s=480x360:r=30:d=2",
                        "-vf", "drawbox=y=0:h=40:c=blue:t=fill,drawbox=y=320:h=40:c=blue:t=fill"]
                       + x264 + ["-output_ts_offset", "2", narrow])
            var joined = try Data(contentsOf: URL(fileURLWithPath: wide))
            joined.append(try Data(contentsOf: URL(fileURLWithPath: narrow)))
            try joined.write(to: URL(fileURLWithPath: path))
            for file in [wide, narrow] { unlink(file) }
            done.insert(path)
        }
        return path
    }

    /// Names of the files in `folder`.
    public static func files(in folder: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
    }
}
