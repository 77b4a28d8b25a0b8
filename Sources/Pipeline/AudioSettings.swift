/// AAC output settings, after `AVAudioSettings`: every field is optional.
public struct AudioSettings: Sendable, Equatable, Codable {
    static let sampleRates = [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000]

    /// Always `aac` (AAC-LC).
    public var codec: String?
    /// Bits per second; default 128,000.
    public var bitRate: Int?
    /// Samples per second; default 44,100.
    public var sampleRate: Int?
    /// Channel count, 1 to 8; default 2 (stereo).
    public var channels: Int?

    public init(codec: String? = nil, bitRate: Int? = nil, sampleRate: Int? = nil, channels: Int? = nil) {
        self.codec = codec
        self.bitRate = bitRate
        self.sampleRate = sampleRate
        self.channels = channels
    }

    /// Reads and validates the `audio` object of a settings document, on top of `base`.
    init(_ value: JSONValue, path: String, base: AudioSettings) throws(SettingsError) {
        let reader = try SettingsReader(value, path: path, allowed: ["codec", "bitRate", "sampleRate", "channels"])
        codec = try reader.string("codec", oneOf: ["aac"]) ?? base.codec
        bitRate = try reader.integer("bitRate", in: 16_000...512_000, unit: "bits per second") ?? base.bitRate
        if let rate = try reader.integer("sampleRate", in: 8000...96000, unit: "samples per second") {
            guard Self.sampleRates.contains(rate) else {
                let list = Self.sampleRates.map(String.init).joined(separator: ", ")
                throw SettingsError(key: reader.key("sampleRate"), message: "expected one of \(list) (AAC rates), got \(rate)")
            }
            sampleRate = rate
        } else {
            sampleRate = base.sampleRate
        }
        channels = try reader.integer("channels", in: 1...8, unit: "channels") ?? base.channels
    }

    /// Settings with the defaults filled in.
    var resolved: AudioEncoding {
        AudioEncoding(bitRate: bitRate ?? 128_000, sampleRate: sampleRate ?? 44_100, channels: channels ?? 2)
    }
}
