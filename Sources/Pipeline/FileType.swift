/// Container of the output file, as `AVFileType` names them.
public enum FileType: String, Sendable, Codable, CaseIterable {
    /// MPEG-4 (`AVFileTypeMPEG4`), `.mp4`.
    case mp4
    /// QuickTime movie (`AVFileTypeQuickTimeMovie`), `.mov`.
    case mov
    /// Apple M4V (`AVFileTypeAppleM4V`), `.m4v`.
    case m4v

    /// FFmpeg's muxer for this file type.
    var muxerName: String {
        switch self {
        case .mp4: "mp4"
        case .mov: "mov"
        case .m4v: "ipod"
        }
    }

    /// The MIME type a server sends the file with; `audio/mp4` when it holds no video.
    public func mimeType(hasVideo: Bool) -> String {
        switch self {
        case .mp4: hasVideo ? "video/mp4" : "audio/mp4"
        case .mov: "video/quicktime"
        case .m4v: hasVideo ? "video/x-m4v" : "audio/mp4"
        }
    }

    /// File name extension, without the dot.
    public var fileExtension: String { rawValue }
}
