/// What a reader or a finished output knows about one track (stream) of a media file.
public struct Track: Sendable, Codable, Equatable {
    /// The kind of media a track carries.
    public enum MediaType: String, Sendable, Codable {
        case video, audio, subtitle, data, attachment, unknown
    }

    /// Stream index inside the container.
    public var index: Int
    public var mediaType: MediaType
    /// FFmpeg's short codec name, e.g. `h264`, `aac`.
    public var codec: String
    /// Codec profile name when known, e.g. `High`, `LC`.
    public var profile: String?
    /// Coded size in pixels (video).
    public var width: Int?
    public var height: Int?
    /// Sample (pixel) aspect ratio as `num:den` (video); `1:1` for square pixels.
    public var sampleAspectRatio: String?
    /// Clockwise rotation, in degrees (0, 90, 180 or 270), that the display matrix asks players to apply.
    public var rotation: Int?
    /// True when the display matrix also mirrors the picture, left to right before the rotation (a front camera's
    /// recording, a flipped one); absent otherwise.
    public var mirrored: Bool?
    /// Average frame rate in frames per second (video).
    public var frameRate: Double?
    /// Duration in seconds, when the container declares one.
    public var duration: Double?
    /// Samples per second (audio).
    public var sampleRate: Int?
    /// Number of audio channels.
    public var channels: Int?
    /// FFmpeg's channel layout description, e.g. `stereo`, `5.1`.
    public var channelLayout: String?
    /// Bit rate in bits per second, when known.
    public var bitRate: Int?
    /// Pixel format name (video), e.g. `yuv420p`.
    public var pixelFormat: String?
    /// `PQ` or `HLG` for an HDR video track (absent for SDR): its transfer, which decides tone mapping.
    public var hdr: String?
    /// The Dolby Vision profile a video track states (5, 7, 8, …; absent without one). Profile 5 cannot be
    /// re-encoded here (`DolbyVision`); the others are transcoded from their HDR10, HLG or SDR base layer.
    public var dolbyVisionProfile: Int?
    /// True for a still picture attached to the file (an album's cover, a thumbnail), not video; absent otherwise.
    /// It is never transcoded.
    public var coverArt: Bool?

    /// Size as displayed: sample aspect ratio and rotation applied, in pixels (not rounded to even).
    public var displaySize: (width: Double, height: Double)? {
        guard let width, let height else { return nil }
        var displayWidth = Double(width) * sampleAspectValue
        var displayHeight = Double(height)
        if let rotation, rotation % 180 != 0 { swap(&displayWidth, &displayHeight) }
        return (displayWidth, displayHeight)
    }

    /// The sample aspect ratio as a number; 1 when unknown.
    public var sampleAspectValue: Double {
        guard let sampleAspectRatio else { return 1 }
        let parts = sampleAspectRatio.split(separator: ":").compactMap { Double($0) }
        guard parts.count == 2, parts[0] > 0, parts[1] > 0 else { return 1 }
        return parts[0] / parts[1]
    }
}
