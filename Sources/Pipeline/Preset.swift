/// A named set of settings that users can ask for by name (`"settings": "720p"`).
///
/// The video presets fit the picture inside their box and never make it larger than the source.
public struct Preset: Sendable, Equatable, Codable {
    public let name: String
    /// One line on what the preset is for.
    public let summary: String
    public let settings: TranscodeSettings

    /// Every preset, in the order they are listed.
    public static let all: [Preset] = [
        box("480p", width: 854, height: 480, bitRate: 1_500_000, summary: "H.264 Main fitted in 854×480, 1.5 Mb/s; AAC 128 kb/s stereo"),
        box("720p", width: 1280, height: 720, bitRate: 3_000_000, summary: "H.264 High fitted in 1280×720, 3 Mb/s; AAC 128 kb/s stereo"),
        box("1080p", width: 1920, height: 1080, bitRate: 6_000_000, summary: "H.264 High fitted in 1920×1080, 6 Mb/s; AAC 128 kb/s stereo"),
        Preset(name: "audio", summary: "Audio only: AAC-LC 128 kb/s, 44.1 kHz stereo in an MP4 (m4a) file",
               settings: TranscodeSettings(container: .mp4, video: .drop,
                                           audio: .encode(AudioSettings(codec: "aac", bitRate: 128_000, sampleRate: 44_100, channels: 2)))),
    ]

    /// Preset names, for help texts and errors.
    public static var names: [String] { all.map(\.name) }

    /// The preset called `name`, if any.
    public static func named(_ name: String) -> Preset? { all.first { $0.name == name } }

    private static func box(_ name: String, width: Int, height: Int, bitRate: Int, summary: String) -> Preset {
        let video = VideoSettings(codec: "h264", width: width, height: height, scalingMode: .fit, averageBitRate: bitRate,
                                  profile: height <= 480 ? "main" : "high", preset: "veryfast",
                                  allowUpscaling: false)
        let audio = AudioSettings(codec: "aac", bitRate: 128_000, sampleRate: 44_100, channels: 2)
        return Preset(name: name, summary: summary, settings: TranscodeSettings(video: .encode(video), audio: .encode(audio)))
    }
}
