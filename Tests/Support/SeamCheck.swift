import Foundation

/// Measures an output against the same job run straight through, around the points where a resumed transcode
/// continued: frames, key frames, stream ends, PSNR against the source, and audio steps (clicks).
public enum SeamCheck {
    /// Video packets in presentation order: time (s) and whether it is a key frame.
    public static func videoPackets(_ path: String) throws -> [(time: Double, key: Bool)] {
        let text = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time,flags",
                                              "-of", "csv=p=0", path])
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: ",")
            guard fields.count >= 2, let time = Double(fields[0]) else { return nil }
            return (time, fields[1].contains("K"))
        }.sorted { $0.time < $1.time }
    }

    /// Where a stream ends (start + duration), seconds; `kind` is `v` or `a`.
    public static func end(_ path: String, _ kind: String) throws -> Double {
        let text = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "\(kind):0", "-show_entries",
                                              "stream=start_time,duration", "-of", "csv=p=0", path])
        let fields = text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").compactMap { Double($0) }
        guard fields.count == 2 else { throw ShellError(message: "no \(kind) stream times in \(path): \(text)") }
        return fields[0] + fields[1]
    }

    /// PSNR (average over planes, dB) of each frame of `path` against `source`, in order.
    public static func psnr(_ path: String, source: String) throws -> [Double] {
        let stats = try Media.scratch().appendingPathComponent("psnr.log").path
        try Media.ffmpeg(["-i", path, "-i", source, "-lavfi", "[0:v][1:v]psnr=stats_file=\(stats)", "-f", "null", "-"])
        return try String(contentsOfFile: stats, encoding: .utf8).split(separator: "\n").compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("psnr_avg:") }.flatMap { Double($0.dropFirst("psnr_avg:".count)) }
        }
    }

    /// MD5 of the first audio track's packets as stored (`-c copy`): equal digests, the very same encoded audio.
    public static func audioDigest(_ path: String) throws -> String {
        try Shell.check("ffmpeg", ["-v", "error", "-i", path, "-map", "0:a", "-c", "copy", "-f", "md5", "-"])
    }

    /// The audio decoded to mono 16-bit samples at `rate`.
    public static func samples(_ path: String, rate: Int) throws -> [Int16] {
        let raw = try Media.scratch().appendingPathComponent("audio.raw").path
        try Media.ffmpeg(["-i", path, "-map", "0:a:0", "-ac", "1", "-ar", String(rate), "-f", "s16le", raw])
        let data = try Data(contentsOf: URL(fileURLWithPath: raw))
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
    }

    /// The largest step between neighbouring samples in `range` (seconds).
    public static func largestStep(_ samples: [Int16], rate: Int, in range: ClosedRange<Double>) -> Int {
        let from = max(1, Int(range.lowerBound * Double(rate))), to = min(samples.count - 1, Int(range.upperBound * Double(rate)))
        guard from < to else { return 0 }
        return (from...to).map { abs(Int(samples[$0]) - Int(samples[$0 - 1])) }.max() ?? 0
    }

    /// A tone with a picture that changes every frame, for resume tests: `seconds` long, 30 fps, 48 kHz stereo sine.
    public static func clip(width: Int, height: Int, seconds: Int, into folder: URL, name: String = "seam-source.mp4") throws -> String {
        let path = folder.appendingPathComponent(name).path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=\(width)x\(height):rate=30:duration=\(seconds)",
                          "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=\(seconds)",
                          "-ac", "2", "-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-c:a", "aac", "-b:a", "192k",
                          "-shortest", path])
        return path
    }
}
