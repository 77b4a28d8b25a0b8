import Foundation

/// What `ffprobe` reads from a file: the independent check on every output.
public struct Probe: Decodable, Sendable {
    public struct Stream: Decodable, Sendable {
        public let index: Int
        public let codec_type: String
        public let codec_name: String?
        /// The sample entry's four letters (`avc1`, `hvc1`).
        public let codec_tag_string: String?
        public let profile: String?
        /// H.264 level times ten (31 for 3.1).
        public let level: Int?
        public let width: Int?
        public let height: Int?
        public let sample_aspect_ratio: String?
        public let display_aspect_ratio: String?
        public let pix_fmt: String?
        public let sample_rate: String?
        public let channels: Int?
        public let bit_rate: String?
        public let start_time: String?
        public let duration: String?
        public let avg_frame_rate: String?
        public let nb_frames: String?
        public let color_primaries: String?
        public let color_transfer: String?
        public let color_space: String?
        public let color_range: String?
        public let side_data_list: [SideData]?

        public var startTime: Double { Double(start_time ?? "") ?? 0 }
        public var durationSeconds: Double { Double(duration ?? "") ?? 0 }
        public var bitRate: Double { Double(bit_rate ?? "") ?? 0 }
        public var sampleRate: Int { Int(sample_rate ?? "") ?? 0 }
        public var frameRate: Double {
            let parts = (avg_frame_rate ?? "0/1").split(separator: "/").compactMap { Double($0) }
            return parts.count == 2 && parts[1] != 0 ? parts[0] / parts[1] : 0
        }
        public var rotation: Int { side_data_list?.compactMap(\.rotation).first ?? 0 }
    }

    public struct SideData: Decodable, Sendable {
        public let side_data_type: String?
        public let rotation: Int?
        /// A Dolby Vision configuration's profile and base-layer compatibility.
        public let dv_profile: Int?
        public let dv_bl_signal_compatibility_id: Int?
        /// A content light level's MaxCLL.
        public let max_content: Int?
        /// A mastering display's peak, cd/m² as a fraction (`10000000/10000`).
        public let max_luminance: String?
    }

    public struct Format: Decodable, Sendable {
        public let format_name: String
        public let duration: String?
        public let bit_rate: String?
        public var durationSeconds: Double { Double(duration ?? "") ?? 0 }
    }

    public let streams: [Stream]
    public let format: Format

    public var video: Stream? { streams.first { $0.codec_type == "video" } }
    public var audio: Stream? { streams.first { $0.codec_type == "audio" } }

    /// Probes `path`'s streams and container.
    public static func read(_ path: String) throws -> Probe {
        let json = try Shell.check("ffprobe", ["-v", "error", "-show_streams", "-show_format", "-of", "json", path])
        return try JSONDecoder().decode(Probe.self, from: Data(json.utf8))
    }

    /// Presentation times (seconds) of the video key frames, in order, and the number of video frames.
    public static func keyFrames(_ path: String) throws -> (keyFrames: [Int], frameCount: Int) {
        let csv = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts,flags",
                                              "-of", "csv=p=0", path])
        let packets = csv.split(separator: "\n").map { line -> (Int, Bool) in
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            return (Int(fields.first ?? "") ?? 0, fields.dropFirst().first?.contains("K") ?? false)
        }.sorted { $0.0 < $1.0 }
        let keys = packets.enumerated().filter { $0.element.1 }.map(\.offset)
        return (keys, packets.count)
    }

    /// MD5 of every packet of the first stream of `type` ("v" or "a"), as ffmpeg's framemd5 stream copy prints them.
    public static func packetHashes(_ path: String, type: String) throws -> [String] {
        let text = try Shell.check("ffmpeg", ["-v", "error", "-i", path, "-map", "0:\(type):0", "-c", "copy", "-f", "framemd5", "-"])
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { $0.split(separator: ",").last.map {
            $0.trimmingCharacters(in: .whitespaces) } }
    }

    /// The stretches of silence in the first audio track (quieter than -40 dB for 50 ms or more), in seconds: where
    /// a tone stops and starts again.
    public static func silences(_ path: String) throws -> [(start: Double, end: Double)] {
        let run = try Shell.run("ffmpeg", ["-nostdin", "-i", path, "-map", "0:a:0", "-af", "silencedetect=noise=-40dB:d=0.05",
                                           "-f", "null", "-"])
        guard run.status == 0 else { throw ShellError(message: "silencedetect on \(path) failed: \(run.stderr.suffix(1000))") }
        var result: [(start: Double, end: Double)] = []
        for line in run.stderr.split(separator: "\n") {
            if let range = line.range(of: "silence_start: ") {
                result.append((Double(line[range.upperBound...].prefix { !$0.isWhitespace }) ?? .nan, .infinity))
            } else if let range = line.range(of: "silence_end: "), !result.isEmpty {
                result[result.count - 1].end = Double(line[range.upperBound...].prefix { !$0.isWhitespace }) ?? .nan
            }
        }
        return result
    }

    /// The source's frame at `time` seconds, scaled to `width` × `height`, as a PNG file in `folder`.
    public static func frame(_ source: String, at time: Double, width: Int, height: Int, into folder: URL) throws -> String {
        let path = folder.appendingPathComponent("frame-\(time)-\(width)x\(height).png").path
        try Shell.check("ffmpeg", ["-v", "error", "-y", "-ss", String(time), "-i", source, "-frames:v", "1",
                                   "-vf", "scale=\(width):\(height)", path])
        return path
    }

    /// PSNR (dB) of picture `a` against picture `b` (same size), optionally of the `crop` (x, y, w, h) of `a`.
    public static func psnr(_ a: String, _ b: String, crop: (x: Int, y: Int, width: Int, height: Int)? = nil) throws -> Double {
        let first = crop.map { "[0:v]crop=\($0.width):\($0.height):\($0.x):\($0.y)[a];" } ?? "[0:v]null[a];"
        let run = try Shell.run("ffmpeg", ["-nostdin", "-i", a, "-i", b, "-lavfi", first + "[a][1:v]psnr", "-f", "null", "-"])
        guard let range = run.stderr.range(of: "average:") else {
            throw ShellError(message: "psnr of \(a) and \(b): \(run.stderr.suffix(500))")
        }
        let value = run.stderr[range.upperBound...].prefix { !$0.isWhitespace }
        return value == "inf" ? 100 : Double(value) ?? .nan
    }

    /// Mean of the luma samples as stored (no range conversion) over a region of the first frame: 16 is black in
    /// limited range, 0 in full.
    public static func meanLuma(_ path: String, x: Int, y: Int, width: Int, height: Int) throws -> Double {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let raw = directory.appendingPathComponent("frame.y").path
        try Shell.check("ffmpeg", ["-v", "error", "-i", path, "-frames:v", "1", "-vf", "crop=\(width):\(height):\(x):\(y),extractplanes=y",
                                   "-f", "rawvideo", raw])
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: raw)))
        guard bytes.count == width * height else { throw ShellError(message: "\(path): \(bytes.count) luma samples for \(width)×\(height)") }
        return Double(bytes.reduce(0) { $0 + Int($1) }) / Double(bytes.count)
    }

    /// Mean value of each RGB channel over a region of the frame at `time` seconds (0...255); nil `time`: the
    /// first frame (seeking in a JPEG can find none).
    public static func meanColor(_ path: String, at time: Double? = 0.5, x: Int, y: Int, width: Int, height: Int) throws -> [Double] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let raw = directory.appendingPathComponent("frame.rgb").path
        try Shell.check("ffmpeg", ["-v", "error"] + (time.map { ["-ss", String($0)] } ?? []) + ["-i", path, "-frames:v", "1",
                                   "-vf", "crop=\(width):\(height):\(x):\(y)", "-pix_fmt", "rgb24", "-f", "rawvideo", raw])
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: raw)))
        guard bytes.count == width * height * 3 else {
            throw ShellError(message: "\(path): \(bytes.count) bytes of RGB for a \(width)×\(height) region (no picture at \(time.map { "\($0) s" } ?? "the start")?)")
        }
        var sums = [0.0, 0.0, 0.0]
        for (offset, byte) in bytes.enumerated() { sums[offset % 3] += Double(byte) }
        let pixels = Double(max(1, bytes.count / 3))
        return sums.map { $0 / pixels }
    }
}
