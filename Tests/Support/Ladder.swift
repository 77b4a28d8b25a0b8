import Foundation

/// Checks on a ladder folder (HLS + DASH over CMAF segments) with real tools: the m3u8 parser from PyPI (through
/// Tests/Streaming/check_ladder.py, from the project's .venv), ffprobe and ffmpeg.
public enum Ladder {
    public struct Summary: Decodable, Sendable {
        public struct Variant: Decodable, Sendable {
            public let uri: String
            public let bandwidth: Int
            public let averageBandwidth: Int
            public let codecs: String
            public let resolution: [Int]?
            public let frameRate: Double?
            public let audio: String?
            public let segments: Int
            public let duration: Double
            public let durations: [Double]
        }

        public struct IFrames: Decodable, Sendable {
            public let uri: String
            public let count: Int
            public let codecs: String
            public let durations: [Double]
        }

        public struct Audio: Decodable, Sendable {
            public let uri: String
            public let segments: Int
            public let duration: Double
        }

        public struct Representation: Decodable, Sendable {
            public let id: String
            public let segments: Int
            public let bandwidth: Int
        }

        public let variants: [Variant]
        public let iframes: [IFrames]
        public let audio: Audio?
        public let dash: [Representation]
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Runs the playlist and manifest checker; throws with its complaint when a rule is broken.
    public static func check(_ folder: String) throws -> Summary {
        let python = root.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw ShellError(message: "\(python) is missing: run scripts/venv (scripts/test does)")
        }
        let script = root.appendingPathComponent("Tests/Streaming/check_ladder.py").path
        let run = try Shell.run(python, [script, folder])
        guard run.status == 0 else { throw ShellError(message: "check_ladder.py: \(run.stderr)") }
        return try JSONDecoder().decode(Summary.self, from: Data(run.stdout.utf8))
    }

    /// The seconds a media playlist of the ladder lists (its `EXTINF` lengths added up), by its path in the folder.
    public static func listedSeconds(_ folder: String, playlist: String) throws -> Double {
        try String(contentsOfFile: folder + "/" + playlist, encoding: .utf8).split(separator: "\n")
            .filter { $0.hasPrefix("#EXTINF:") }.compactMap { Double($0.dropFirst(8).prefix { $0 != "," }) }.reduce(0, +)
    }

    /// A track of the ladder as one file (its init segment and every media segment, in order), for ffprobe.
    public static func joined(_ folder: String, track: String) throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder + "/" + track)
            .filter { $0.hasPrefix("segment_") }.sorted()
        var data = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + track + "/init.mp4"))
        for name in names { data.append(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + track + "/" + name))) }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ladder-\(UUID().uuidString).mp4").path
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Presentation times (seconds) of the video key frames of a track, and its frame count.
    public static func keyFrameTimes(_ folder: String, track: String) throws -> (times: [Double], frames: Int) {
        let path = try joined(folder, track: track)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let csv = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time,flags",
                                              "-of", "csv=p=0", path])
        let packets = csv.split(separator: "\n").map { line -> (Double, Bool) in
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            return (Double(fields.first ?? "") ?? .nan, fields.dropFirst().first?.contains("K") ?? false)
        }
        return (packets.filter(\.1).map(\.0).sorted(), packets.count)
    }

    /// Whether the first video packet of each media segment of `track` (read with its init segment) is a key frame.
    public static func segmentsStartWithKeyFrames(_ folder: String, track: String) throws -> [Bool] {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder + "/" + track)
            .filter { $0.hasPrefix("segment_") }.sorted()
        let initData = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + track + "/init.mp4"))
        return try names.map { name in
            var data = initData
            data.append(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + track + "/" + name)))
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("segment-\(UUID().uuidString).mp4").path
            try data.write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let csv = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v:0", "-read_intervals", "%+#1",
                                                  "-show_entries", "packet=flags", "-of", "csv=p=0", path])
            return csv.split(separator: "\n").first?.contains("K") ?? false
        }
    }

    /// Decodes `url` (a playlist or manifest, a path or an http URL) to the end with `-xerror`: any error fails.
    public static func decodesCleanly(_ url: String) throws -> Shell.Output {
        try Shell.run("ffmpeg", ["-nostdin", "-v", "error", "-xerror", "-i", url, "-map", "0", "-f", "null", "-"])
    }
}
