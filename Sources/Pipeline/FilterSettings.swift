/// The `filters` section: effects applied to the decoded source before scaling and encoding. Only this schema is
/// accepted; each key maps to a filter built here from validated numbers, never to a user's filtergraph text.
public struct FilterSettings: Sendable, Equatable, Codable {
    /// A rectangle of the source picture, in stored pixels (before any rotation is applied).
    public struct Crop: Sendable, Equatable, Codable {
        public var x: Int
        public var y: Int
        public var width: Int
        public var height: Int
    }

    /// An image laid over the picture. `upload` names an uploaded PNG or JPEG; the job layer resolves it to
    /// `imagePath` before the transcode (the pipeline itself knows nothing of uploads).
    public struct Watermark: Sendable, Equatable, Codable {
        public enum Position: String, Sendable, Codable, CaseIterable {
            case topLeft, topRight, bottomLeft, bottomRight, center
        }

        public var upload: String
        public var position: Position
        /// Pixels between the image and the picture's edges.
        public var margin: Int
        /// 0 (invisible) to 1 (opaque).
        public var opacity: Double
        /// Local path of the image, set by the job layer; never read from JSON.
        public var imagePath: String?

        private enum CodingKeys: String, CodingKey { case upload, position, margin, opacity }
    }

    public struct Video: Sendable, Equatable, Codable {
        public var crop: Crop?
        public var watermark: Watermark?
        /// Drops all colour (chroma at neutral).
        public var grayscale: Bool?
        /// -1 to 1; 0 leaves it.
        public var brightness: Double?
        /// 0 to 3; 1 leaves it.
        public var contrast: Double?
        /// 0 to 3; 1 leaves it.
        public var saturation: Double?
    }

    public struct Audio: Sendable, Equatable, Codable {
        /// Gain factor, 0 to 10; 1 leaves it.
        public var volume: Double?
        /// Pitch factor without changing tempo, 0.5 to 2 (2 = an octave up).
        public var pitch: Double?
        /// Tempo factor without changing pitch, 0.5 to 2; the duration (and progress) follow it.
        public var tempo: Double?
        /// EBU R128 loudness normalisation (`loudnorm`, -16 LUFS).
        public var normalize: Bool?
    }

    public var video: Video?
    public var audio: Audio?

    public init(video: Video? = nil, audio: Audio? = nil) {
        self.video = video
        self.audio = audio
    }

    init(_ value: JSONValue) throws(SettingsError) {
        let reader = try SettingsReader(value, path: "filters", allowed: ["video", "audio"])
        if let value = reader.value("video"), value != .null {
            let video = try SettingsReader(value, path: "filters.video",
                                           allowed: ["crop", "grayscale", "brightness", "contrast", "saturation", "watermark"])
            var result = Video()
            if let value = video.value("crop"), value != .null {
                let crop = try SettingsReader(value, path: "filters.video.crop", allowed: ["x", "y", "width", "height"])
                let x = try crop.integer("x", in: 0...16_384, unit: "pixels") ?? 0
                let y = try crop.integer("y", in: 0...16_384, unit: "pixels") ?? 0
                guard let width = try crop.integer("width", in: 2...16_384, unit: "pixels"),
                      let height = try crop.integer("height", in: 2...16_384, unit: "pixels") else {
                    throw SettingsError(key: "filters.video.crop", message: "needs width and height (pixels)")
                }
                result.crop = Crop(x: x, y: y, width: width, height: height)
            }
            if let value = video.value("watermark"), value != .null {
                let mark = try SettingsReader(value, path: "filters.video.watermark", allowed: ["upload", "position", "margin", "opacity"])
                guard case .string(let upload)? = mark.value("upload"), !upload.isEmpty else {
                    throw SettingsError(key: "filters.video.watermark.upload", message: "expected the id of an uploaded PNG or JPEG image")
                }
                let position = try mark.string("position", oneOf: Watermark.Position.allCases.map(\.rawValue)) ?? "bottomRight"
                result.watermark = Watermark(upload: upload, position: Watermark.Position(rawValue: position)!,
                                             margin: try mark.integer("margin", in: 0...4096, unit: "pixels") ?? 16,
                                             opacity: try mark.number("opacity", in: 0...1, unit: "opacity") ?? 1)
            }
            result.grayscale = try video.bool("grayscale")
            result.brightness = try video.number("brightness", in: -1...1, unit: "brightness")
            result.contrast = try video.number("contrast", in: 0...3, unit: "contrast")
            result.saturation = try video.number("saturation", in: 0...3, unit: "saturation")
            self.video = result
        }
        if let value = reader.value("audio"), value != .null {
            let audio = try SettingsReader(value, path: "filters.audio", allowed: ["volume", "pitch", "tempo", "normalize"])
            self.audio = Audio(volume: try audio.number("volume", in: 0...10, unit: "gain"),
                               pitch: try audio.number("pitch", in: 0.5...2, unit: "pitch factor"),
                               tempo: try audio.number("tempo", in: 0.5...2, unit: "tempo factor"),
                               normalize: try audio.bool("normalize"))
        }
    }

    /// Speed-up of the output timeline (1 when no tempo is set).
    var tempo: Double { audio?.tempo ?? 1 }

    /// The overlay that puts the image (`[mark]`) on the filtered picture (`[main]`), or nil without a watermark;
    /// turned and placed for the picture's `orientation`, so that it shows as asked. `kept` is the share of the
    /// picture's width and height (stored axes) that every output shows, centred (a fill crop cuts the rest away
    /// later): a corner is that part's corner, where it was the whole picture's and the mark was cut away with it.
    func watermarkChain(orientation: PictureOrientation = PictureOrientation(), kept: (x: Double, y: Double) = (1, 1)) -> String? {
        guard let mark = video?.watermark else { return nil }
        let mx = orientation.storedWidth(mark.margin), my = mark.margin
        let x: String, y: String
        if mark.position == .center {
            (x, y) = ("(W-w)/2", "(H-h)/2")
        } else {
            let corner = orientation.storedCorner(right: [.topRight, .bottomRight].contains(mark.position),
                                                  bottom: [.bottomLeft, .bottomRight].contains(mark.position))
            // What a fill crop cuts from each end of a side ("W" or "H"), when it cuts anything.
            func cut(_ share: Double, _ side: String) -> String? {
                share < 1 ? side + "*" + String(format: "%.6f", (1 - share) / 2) : nil
            }
            let cutX = cut(kept.x, "W"), cutY = cut(kept.y, "H")
            x = corner.right ? "W-\(cutX.map { $0 + "-" } ?? "")w-\(mx)" : "\(cutX.map { $0 + "+" } ?? "")\(mx)"
            y = corner.bottom ? "H-\(cutY.map { $0 + "-" } ?? "")h-\(my)" : "\(cutY.map { $0 + "+" } ?? "")\(my)"
        }
        let turn = orientation.imageFilters.map { "," + $0 } ?? ""
        return "[wm]format=rgba,colorchannelmixer=aa=\(mark.opacity)\(turn)[mark];[main][mark]overlay=x=\(x):y=\(y):format=auto[out]"
    }

    /// The video filter chain, or nil when nothing is asked. Numbers only: no text from the user reaches it.
    /// `deinterlace` puts `bwdif` first, on frames flagged interlaced only, one frame out per frame in, so the frame
    /// rate, timestamps and key-frame interval stay those of the source. A tempo scales time from `origin` (the
    /// output's zero, in microseconds: `AV_TIME_BASE`) on, as the audio's does: a source that starts late (a transport
    /// stream's clock) keeps its pictures with its sound. `toneMapping` (`ToneMapping.filters`) maps HDR to SDR.
    ///
    /// The crop is given in the pixels of a `sourceSize` picture (the stream's), and taken as that share of
    /// whatever size each picture has: a source that changes size mid-stream (a broadcast switching programmes)
    /// keeps the same part of its picture, where a rectangle of pixels failed the job on a smaller picture.
    func videoChain(deinterlace: Bool = false, origin: Int64 = 0, toneMapping: String? = nil,
                    orientation: PictureOrientation = PictureOrientation(), sourceSize: (width: Int, height: Int)? = nil,
                    kept: (x: Double, y: Double) = (1, 1), toYUV: String? = nil) -> String? {
        var filters: [String] = []
        if deinterlace { filters.append("bwdif=mode=send_frame:parity=auto:deint=interlaced") }
        // Before the crop (zimg misreads a picture cropped to an odd offset), and before the picture adjustments
        // (they are meant for what is seen).
        if let toneMapping { filters.append(toneMapping) }
        if let crop = video?.crop {
            if let (width, height) = sourceSize, width > 0, height > 0 {
                // Multiplied first: a picture of the source's size gets the very rectangle asked.
                filters.append("crop=w=iw*\(crop.width)/\(width):h=ih*\(crop.height)/\(height):x=iw*\(crop.x)/\(width):y=ih*\(crop.y)/\(height):exact=1")
            } else {
                filters.append("crop=\(crop.width):\(crop.height):\(crop.x):\(crop.y):exact=1")
            }
        }
        let brightness = video?.brightness ?? 0, contrast = video?.contrast ?? 1, saturation = video?.saturation ?? 1
        let adjusts = brightness != 0 || contrast != 1 || saturation != 1
        // `hue` and `eq` take Y'CbCr only: RGB pictures are converted first as the rest of the pipeline reads them
        // (`toYUV`), not by the conversion FFmpeg would put in (BT.601, limited range, which a full-range source's
        // tags then misread: black came out grey, white light grey).
        // Not after tone mapping, whose output is Y'CbCr already (BT.709, limited range): converted again, into
        // the RGB source's own matrix and range, it came out crushed, black under 16.
        if let toYUV, toneMapping == nil, video?.grayscale == true || adjusts { filters.append(toYUV) }
        if video?.grayscale == true { filters.append("hue=s=0") }
        if adjusts {
            filters.append("eq=brightness=\(brightness):contrast=\(contrast):saturation=\(saturation)")
        }
        // In microseconds first: a coarse time base (an AVI's 1/25) would put two sped-up pictures on one tick.
        if tempo != 1 {
            filters.append("settb=AVTB")
            filters.append(origin == 0 ? "setpts=PTS/\(tempo)" : "setpts=(PTS-(\(origin)))/\(tempo)+(\(origin))")
        }
        if let overlay = watermarkChain(orientation: orientation, kept: kept) {
            let main = filters.isEmpty ? "null" : filters.joined(separator: ",")
            return "[in]\(main)[main];" + overlay
        }
        return filters.isEmpty ? nil : filters.joined(separator: ",")
    }

    /// The audio filter chain for input at `sampleRate`, before the mix to the output's channels, or nil when
    /// nothing is asked (loudness is measured after the mix: `loudnessChain`).
    func audioChain(sampleRate: Int) -> String? {
        var filters: [String] = []
        if let volume = audio?.volume, volume != 1 { filters.append("volume=\(volume)") }
        if let pitch = audio?.pitch, pitch != 1 {
            // Play faster by the pitch factor, then stretch back to the original tempo.
            filters.append("asetrate=\(Int((Double(sampleRate) * pitch).rounded())),aresample=\(sampleRate),atempo=\(1 / pitch)")
        }
        if tempo != 1 { filters.append("atempo=\(tempo)") }
        return filters.isEmpty ? nil : filters.joined(separator: ",")
    }

    /// The loudness normalisation's chain (EBU R128, -16 LUFS), for the audio as the output holds it (mixed to its
    /// channels: 5.1 measured before a mix down to stereo came out 4 dB quieter than asked), or nil when not asked.
    var loudnessChain: String? {
        audio?.normalize == true ? "loudnorm=I=-16:TP=-1.5:LRA=11" : nil
    }
}
