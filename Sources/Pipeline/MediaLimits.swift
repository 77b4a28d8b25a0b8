/// What an input may demand before it is refused: bounds checked from the headers before anything is decoded, so a
/// decompression bomb (a tiny file that declares huge frames) never gets to allocate them.
public struct MediaLimits: Sendable, Equatable, Codable {
    /// Longest accepted input, in seconds.
    public var maxDuration: Double
    /// Largest accepted picture width or height, in pixels.
    public var maxDimension: Int
    /// Largest accepted decoded picture, in bytes (width × height × bytes per pixel of the source format).
    public var maxFrameBytes: Int

    /// Highest accepted audio sample rate, in hertz: twice the highest any recorder or format in use makes (DXD's
    /// 352.8 kHz, 384 kHz PCM). A header can claim a billion (an 8 KB WAV did): the resampler's set-up then took
    /// half a minute and gigabytes in one call no cancel could stop, and failed the job as having no audio.
    public static let maxSampleRate = 768_000

    /// 6 hours, 8192 pixels, 512 MiB.
    public init(maxDuration: Double = 6 * 3600, maxDimension: Int = 8192, maxFrameBytes: Int = 512 * 1024 * 1024) {
        self.maxDuration = maxDuration
        self.maxDimension = maxDimension
        self.maxFrameBytes = maxFrameBytes
    }

    /// Throws `input_too_large` / `input_too_long` when a track or the file is over a limit; its declared duration
    /// only when it can be judged (`judgesDeclaredDuration`: not a guess from a clock that may jump; `checkRead`
    /// holds the limit as the media is read).
    func check(_ track: Track, bytesPerPixel: Double, judgesDeclaredDuration: Bool = true) throws(MediaError) {
        if track.mediaType == .video, let width = track.width, let height = track.height {
            guard width <= maxDimension, height <= maxDimension else {
                throw MediaError(code: "input_too_large",
                                 message: "The input's video is \(width)×\(height); the largest accepted is \(maxDimension)×\(maxDimension).")
            }
            let bytes = Double(width) * Double(height) * bytesPerPixel
            guard bytes <= Double(maxFrameBytes) else {
                throw MediaError(code: "input_too_large",
                                 message: "A decoded \(width)×\(height) picture would take \(Int(bytes / 1_048_576)) MiB; the limit is \(maxFrameBytes / 1_048_576) MiB.")
            }
        }
        if track.mediaType == .audio, let rate = track.sampleRate { try Self.check(sampleRate: rate) }
        if judgesDeclaredDuration, let duration = track.duration { try checkDeclared(duration: duration) }
    }

    /// Throws `input_too_large` when audio is sampled faster than `maxSampleRate` (a stream can change its rate
    /// part-way: checked again as it is decoded).
    static func check(sampleRate rate: Int) throws(MediaError) {
        guard rate > maxSampleRate else { return }
        throw MediaError(code: "input_too_large",
                         message: "The input's audio is sampled at \(rate) Hz; the highest accepted rate is \(maxSampleRate) Hz.")
    }

    /// Throws `input_too_long` when a declared duration (of a track or the file), in seconds, is over the limit.
    func checkDeclared(duration: Double) throws(MediaError) {
        guard duration > maxDuration else { return }
        throw MediaError(code: "input_too_long",
                         message: String(format: "The input lasts %.0f s; the longest accepted is %.0f s.", duration, maxDuration))
    }

    /// Throws `input_too_long` when `seconds` of input have been read past the limit (with a second's slack): a file
    /// can declare less than it holds (a transport stream whose clock restarts), and the declared figure is all
    /// `checkDeclared` sees.
    func checkRead(seconds: Double) throws(MediaError) {
        guard seconds > maxDuration + 1 else { return }
        throw MediaError(code: "input_too_long",
                         message: "The input holds more than \(Int(maxDuration)) s of media; the longest accepted is \(Int(maxDuration)) s.")
    }
}
