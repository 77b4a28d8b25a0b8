import Foundation

/// One file of a job's output: its path in the output directory, its size and the MIME type to serve it with.
public struct OutputFile: Sendable, Equatable, Codable {
    /// Relative path with `/` separators, e.g. `output.mp4`, `720p/segment_00001.m4s`, `thumbnails/00001.jpg`.
    public var path: String
    /// Bytes.
    public var size: Int
    public var mimeType: String

    public init(path: String, size: Int, mimeType: String) {
        self.path = path
        self.size = size
        self.mimeType = mimeType
    }

    /// The MIME type of a file a transcode writes, by its name; `mainType` for the main file of a single-file output.
    public static func mimeType(of path: String, mainType: String) -> String {
        let name = URL(fileURLWithPath: path).lastPathComponent
        switch URL(fileURLWithPath: path).pathExtension {
        case "m3u8": return "application/vnd.apple.mpegurl"
        case "mpd": return "application/dash+xml"
        case "m4s": return path.hasPrefix("audio/") ? "audio/mp4" : "video/mp4"
        case "jpg": return "image/jpeg"
        case "vtt": return "text/vtt"
        default:
            if name == SegmentedOutput.initName { return path.hasPrefix("audio/") ? "audio/mp4" : "video/mp4" }
            return mainType
        }
    }

    /// Every regular file under `directory`, sorted by path, described for serving (symbolic links and anything
    /// else are left out: only files a transcode wrote are listed).
    public static func list(directory: String, mainType: String) -> [OutputFile] {
        let root = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        guard let walker = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isRegularFileKey, .fileSizeKey]) else {
            return []
        }
        var files: [OutputFile] = []
        for case let url as URL in walker {
            guard let values = try? url.resourceValues(forKeys: [.isRegularFileKey, .fileSizeKey]), values.isRegularFile == true else { continue }
            let path = String(url.standardizedFileURL.path.dropFirst(root.path.count + 1))
            files.append(OutputFile(path: path, size: values.fileSize ?? 0, mimeType: mimeType(of: path, mainType: mainType)))
        }
        return files.sorted { $0.path < $1.path }
    }
}
