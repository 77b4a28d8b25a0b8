import CFFmpeg
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
    /// An adaptive-bitrate ladder: CMAF (fragmented MP4) segments that an HLS master playlist (`master.m3u8`) and a
    /// DASH manifest (`manifest.mpd`) both point at; a directory of files, not one file.
    case hls

    /// FFmpeg's muxer for this file type.
    var muxerName: String {
        switch self {
        case .mp4: "mp4"
        case .mov: "mov"
        case .m4v, .m4a: "ipod"
        case .h264: "h264"
        case .aac: "adts"
        case .hls: "mp4"
        }
    }

    /// Whether the container wants encoders' headers (SPS/PPS, AudioSpecificConfig) out of band.
    var wantsGlobalHeader: Bool {
        guard let format = av_guess_format(muxerName, nil, nil) else { return true }
        return format.pointee.flags & AVFMT_GLOBALHEADER != 0
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
        case .hls: "application/vnd.apple.mpegurl"
        }
    }

    /// File name extension, without the dot.
    public var fileExtension: String { self == .hls ? "m3u8" : rawValue }

    /// The name of the main file in a job's output directory: `output.mp4`, ..., or `master.m3u8` for a ladder.
    public var mainFileName: String { self == .hls ? "master.m3u8" : "output.\(fileExtension)" }

    /// Whether the output is a set of segments and playlists rather than one file.
    public var isSegmented: Bool { self == .hls }
}
