/// The `thumbnails` section: still pictures taken from the same decode as the video, for any container.
///
/// `{"interval": 2}` (or `"count": 10`) writes `thumbnails/00001.jpg`, ...; `"storyboard": true` adds a sprite of
/// those pictures (`storyboard.jpg`) with a WebVTT track of `#xywh=` cues (`storyboard.vtt`) for scrub previews;
/// `"poster": 0.1` (a fraction of the duration) or `"poster": {"time": 12.5}` (seconds) writes `poster.jpg` at the
/// output's size.
public struct ThumbnailSettings: Sendable, Equatable, Codable {
    /// Where the poster is taken.
    public enum Poster: Sendable, Equatable, Codable {
        /// A fraction of the duration, 0 to 1.
        case fraction(Double)
        /// Seconds from the start of the output.
        case time(Double)

        public init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let fraction = try? container.decode(Double.self) {
                self = .fraction(fraction)
            } else {
                self = .time(try container.decode([String: Double].self)["time"] ?? 0)
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .fraction(let fraction): try container.encode(fraction)
            case .time(let seconds): try container.encode(["time": seconds])
            }
        }
    }

    /// Seconds between two thumbnails (the first is at 0).
    public var interval: Double?
    /// How many thumbnails, evenly spaced over the duration (instead of `interval`).
    public var count: Int?
    /// Width of each thumbnail in pixels (even); the height keeps the picture's aspect. Default 160.
    public var width: Int?
    /// Whether to write the sprite and its WebVTT track.
    public var storyboard: Bool?
    public var poster: Poster?

    /// Default thumbnail width, in pixels.
    static let defaultWidth = 160

    /// The settings of one thumbnail's picture: the width asked (or the default), upscaling allowed.
    var picture: VideoSettings { VideoSettings(width: width ?? Self.defaultWidth, allowUpscaling: true) }

    /// What becomes of a refusal of that picture: one larger than any output may be (a tall, narrow source at a
    /// wide thumbnail width) names `thumbnails.width`, not the video's size, which is not at fault.
    func refusal(_ error: MediaError) -> MediaError {
        guard error.code == "output_too_large" else { return error }
        return MediaError(code: error.code, message: "thumbnails.width: at \(width ?? Self.defaultWidth) px wide the thumbnails of this picture "
                          + "would be larger than the largest allowed, \(VideoSettings.maxDimension)×\(VideoSettings.maxDimension); choose a smaller width.")
    }

    public init(interval: Double? = nil, count: Int? = nil, width: Int? = nil, storyboard: Bool? = nil, poster: Poster? = nil) {
        self.interval = interval
        self.count = count
        self.width = width
        self.storyboard = storyboard
        self.poster = poster
    }

    init(_ value: JSONValue) throws(SettingsError) {
        let reader = try SettingsReader(value, path: "thumbnails", allowed: ["interval", "count", "width", "storyboard", "poster"])
        interval = try reader.number("interval", in: 0.1...3600, unit: "seconds")
        count = try reader.integer("count", in: 1...1000, unit: "thumbnails")
        if interval != nil && count != nil {
            throw SettingsError(key: "thumbnails.count", message: "give interval or count, not both")
        }
        if let size = try reader.integer("width", in: 16...1920, unit: "pixels") {
            guard size % 2 == 0 else {
                throw SettingsError(key: "thumbnails.width", message: "expected an even number of pixels, got \(size)")
            }
            width = size
        }
        storyboard = try reader.bool("storyboard")
        switch reader.value("poster") {
        case nil, .null?:
            poster = nil
        case .object?:
            let at = try SettingsReader(reader.value("poster")!, path: "thumbnails.poster", allowed: ["time"])
            guard let seconds = try at.number("time", in: 0...1_000_000, unit: "seconds") else {
                throw SettingsError(key: "thumbnails.poster.time", message: "expected a number of seconds")
            }
            poster = .time(seconds)
        default:
            guard let fraction = try reader.number("poster", in: 0...1, unit: "the duration (a fraction)") else {
                throw SettingsError(key: "thumbnails.poster", message: "expected a fraction from 0 to 1 or {\"time\": seconds}")
            }
            poster = .fraction(fraction)
        }
        if storyboard == true && interval == nil && count == nil {
            throw SettingsError(key: "thumbnails.storyboard", message: "a storyboard is made of thumbnails: give interval or count")
        }
        if interval == nil && count == nil && poster == nil {
            throw SettingsError(key: "thumbnails", message: "expected interval, count or poster")
        }
    }

}
