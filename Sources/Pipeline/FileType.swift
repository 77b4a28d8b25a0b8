/// Container of the output file, as `AVFileType` names them.
public enum FileType: String, Sendable, Codable, CaseIterable {
    /// MPEG-4 (`AVFileTypeMPEG4`), `.mp4`.
    case mp4
    /// QuickTime movie (`AVFileTypeQuickTimeMovie`), `.mov`.
    case mov
    /// Apple M4V (`AVFileTypeAppleM4V`), `.m4v`.
    case m4v
    /// Audio-only MPEG-4 (`AVFileTypeAppleM4A`), `.m4a`.
    case m4a
    /// Raw H.264 Annex B byte stream, SPS and PPS before every key frame; video only.
    case h264
    /// Raw AAC in ADTS frames (a 7-byte header on each); audio only.
    case aac

    /// FFmpeg's muxer for this file type.
    var muxerName: String {
        switch self {
        case .mp4: "mp4"
        case .mov: "mov"
        case .m4v, .m4a: "ipod"
        case .h264: "h264"
        case .aac: "adts"
        }
    }

    /// Whether the file can hold video, audio, or both.
    public var holdsVideo: Bool { self != .m4a && self != .aac }
    public var holdsAudio: Bool { self != .h264 }

    /// The MIME type a server sends the file with; `audio/mp4` when it holds no video.
    public func mimeType(hasVideo: Bool) -> String {
        switch self {
        case .mp4: hasVideo ? "video/mp4" : "audio/mp4"
        case .mov: "video/quicktime"
        case .m4v: hasVideo ? "video/x-m4v" : "audio/mp4"
        case .m4a: "audio/mp4"
        case .h264: "video/h264"
        case .aac: "audio/aac"
        }
    }

    /// File name extension, without the dot.
    public var fileExtension: String { rawValue }
}
