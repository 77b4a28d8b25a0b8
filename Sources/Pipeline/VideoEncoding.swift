import CFFmpeg

/// Video settings with every default filled in from the source: what the H.264 encoder is opened with.
struct VideoEncoding {
    /// Output size in pixels (even).
    var width: Int
    var height: Int
    /// Size the (cropped) source is scaled to before it is rotated upright, in pixels.
    var scaledWidth: Int
    var scaledHeight: Int
    /// Part of the source picture kept to fill the box (fill mode), in source pixels; `cropWidth` 0 keeps it all.
    var cropX: Int
    var cropY: Int
    var cropWidth: Int
    var cropHeight: Int
    /// Clockwise rotation applied after scaling, in degrees.
    var rotation: Int
    /// The picture is mirrored left to right after scaling, before the rotation (the display matrix said so).
    var mirrored = false
    /// The picture the geometry was made for: its size in pixels (the user's crop taken), its display aspect
    /// (width × sample aspect / height, before rotation), the sample aspect its codec states (what decoded pictures
    /// carry; 1 when unstated), and the scaling mode (`fit` when the box followed the picture's aspect). A picture
    /// of another shape mid-stream is laid out from these (`PictureLayout`).
    var sourceWidth = 0
    var sourceHeight = 0
    /// The share of the picture's width and of its height the output shows (its fill crop, which is centred).
    var keptShare: (x: Double, y: Double) {
        guard cropWidth > 0, sourceWidth > 0, sourceHeight > 0 else { return (1, 1) }
        return (Double(cropWidth) / Double(sourceWidth), Double(cropHeight) / Double(sourceHeight))
    }
    var sourceAspect = 1.0
    var codecSampleAspect = 1.0
    var scalingMode = VideoSettings.ScalingMode.fit
    /// Bits per second.
    var averageBitRate: Int
    /// The peak bit rate and buffer (bits) the encoder keeps to, a level's when one is asked (else 0: none).
    var maxBitRate = 0
    var bufferSize = 0
    /// Frames.
    var maxKeyFrameInterval: Int
    var profile: String
    /// Level times ten, e.g. 41 for 4.1.
    var level: Int
    var preset: String
    /// Frames per second the encoder is told. With a frame rate in the settings below the source's the time base
    /// is 1/rate, and of the frames that land on one tick the nearest to it is kept.
    var frameRate: AVRational
    /// Time base of the frames handed to the encoder.
    var timeBase: AVRational
    var colors: ColorTags
    /// Key frames only where the caller forces them (closed GOPs, no scene cuts): a ladder's renditions must put
    /// their IDRs at the same instants.
    var keyFramesForcedOnly = false
    /// Pictures the caller marks I become IDRs (a checkpoint segment's first), with x264's own key frames in between.
    var forcedKeyFramesAreIDR = false
    /// The source's HDR10 metadata, when its HDR is kept (not tone-mapped) and the output is tagged HDR.
    var hdrMetadata: HDRMetadata?
    /// x264 threads; 0: its own choice for the machine (see `FFmpeg.threadCount`). A ladder shares the cores
    /// between its encoders.
    var threads: Int32 = 0

    /// Refuses a picture no H.264 level holds (`H264Level.largestFrameSize`), for an encoding that is made (not one
    /// that only measures the source): x264 only warns, and under a job's memory limit it failed as out of memory.
    func checkFitsALevel() throws(MediaError) {
        if let problem = H264Level.problem(width: width, height: height) {
            throw MediaError(code: "invalid_settings", message: "video: \(problem); ask for a smaller width or height.")
        }
    }

    /// The output picture `settings` make of `track`'s, and the source size they start from: `crop`'s, which
    /// must lie inside the picture, or the track's. From the track alone (the intake judges with it, `InputFit`).
    static func picture(of track: Track, settings: VideoSettings, crop: FilterSettings.Crop?)
        throws(MediaError) -> (geometry: OutputGeometry, sourceWidth: Int, sourceHeight: Int) {
        var sourceWidth = track.width ?? 0, sourceHeight = track.height ?? 0
        if let crop {
            guard crop.x + crop.width <= sourceWidth, crop.y + crop.height <= sourceHeight else {
                throw MediaError(code: "invalid_settings",
                                 message: "filters.video.crop: the rectangle is outside the \(sourceWidth)×\(sourceHeight) picture.")
            }
            (sourceWidth, sourceHeight) = (crop.width, crop.height)
        }
        let geometry = try OutputGeometry.resolve(
            sourceWidth: sourceWidth, sourceHeight: sourceHeight, sampleAspect: track.sampleAspectValue,
            rotation: track.rotation ?? 0, settings: settings)
        return (geometry, sourceWidth, sourceHeight)
    }

    /// Every default of `settings` filled in from the source stream: size from the (cropped) display size, frame
    /// rate and time base from the stream (times the tempo: `setpts` plays the pictures faster or slower), bit
    /// rate from the size, key frames every two seconds of the output.
    /// - Parameter filters: the job's filters, whose crop and tempo change what the encoder gets.
    /// - Parameter toneMapped: the pictures reach the encoder tone-mapped to SDR BT.709 (`ToneMapping`), so the
    ///   settings' colours apply over BT.709 instead of the source's tags.
    static func resolve(track: Track, stream: UnsafeMutablePointer<AVStream>, settings: VideoSettings,
                        filters: FilterSettings?, toneMapped: Bool = false) throws(MediaError) -> VideoEncoding {
        let (geometry, sourceWidth, sourceHeight) = try picture(of: track, settings: settings, crop: filters?.video?.crop)
        let parameters = stream.pointee.codecpar.pointee
        var frameRate: AVRational
        var timeBase: AVRational
        let source = sourceFrameRate(of: stream, tempo: filters?.tempo)
        var keyFrameInterval = settings.maxKeyFrameInterval
        // A rate at or above a constant source's keeps the source's pictures and clock: pictures are dropped to
        // reach a lower rate, never repeated, so the stream would hold the source's pictures while being told (and
        // given its level and key-frame interval for) the rate asked: key frames 4 s apart at 60 asked of 30. An
        // interval asked stays as many seconds (rungs checked at intake by it keep their key frames together). A
        // variable source (its average far below its clock's rate) keeps the asked rate as its ceiling.
        if let rate = settings.frameRate, !source.constant || rate < av_q2d(source.rate) {
            frameRate = rational(rate)
            timeBase = av_inv_q(frameRate)
        } else {
            if let rate = settings.frameRate, let interval = keyFrameInterval {
                keyFrameInterval = max(1, Int((Double(interval) / rate * av_q2d(source.rate)).rounded()))
            }
            frameRate = source.rate
            timeBase = stream.pointee.time_base
            // A time base coarser than a frame, or absurdly fine, is replaced by MPEG's 90 kHz clock.
            if !FFmpeg.isValid(timeBase) || av_q2d(timeBase) > av_q2d(av_inv_q(frameRate)) || timeBase.den / max(timeBase.num, 1) > 10_000_000 {
                timeBase = AVRational(num: 1, den: 90_000)
            }
        }
        if let level = settings.level,
           let problem = H264Level.problem(level: level, width: geometry.width, height: geometry.height, frameRate: av_q2d(frameRate)) {
            throw MediaError(code: "invalid_settings", message: "video.level: \(problem); leave the level out for x264's own choice.")
        }
        // A level asked is kept in bit rate too: its peak and buffer bound the encoder, a bit rate asked above its
        // peak is refused (as at intake, `InputFit`), and the default one (the picture's size × 4) stays below it.
        if let problem = H264Level.bitRateProblem(settings) {
            throw MediaError(code: "invalid_settings", message: "video.averageBitRate: \(problem).")
        }
        let limit = H264Level.bitRateLimit(settings)
        var encoding = VideoEncoding(
            width: geometry.width, height: geometry.height,
            scaledWidth: geometry.scaledWidth, scaledHeight: geometry.scaledHeight,
            cropX: geometry.cropX, cropY: geometry.cropY, cropWidth: geometry.cropWidth, cropHeight: geometry.cropHeight,
            rotation: geometry.rotation, mirrored: track.mirrored == true,
            sourceWidth: sourceWidth, sourceHeight: sourceHeight,
            sourceAspect: Double(sourceWidth) * track.sampleAspectValue / Double(max(1, sourceHeight)),
            codecSampleAspect: FFmpeg.isValid(parameters.sample_aspect_ratio) ? av_q2d(parameters.sample_aspect_ratio) : 1,
            scalingMode: settings.width != nil && settings.height != nil ? settings.scalingMode ?? .fit : .fit,
            // width × height × 4, but at least 64 kb/s: x264 counts in kb/s and refuses 0 (a 2×2 input gave 16 b/s).
            averageBitRate: settings.averageBitRate ?? max(geometry.width * geometry.height * 4, 64_000),
            maxKeyFrameInterval: keyFrameInterval ?? max(1, Int((2 * av_q2d(frameRate)).rounded())),
            profile: settings.profile ?? "high",
            level: settings.level.map { Int(((Double($0) ?? 0) * 10).rounded()) } ?? -99,
            preset: settings.preset ?? "veryfast",
            frameRate: frameRate, timeBase: timeBase,
            colors: (toneMapped ? ColorTags.bt709 : ColorTags(source: parameters, assumingHeight: geometry.height).madeYCbCr(from: parameters))
                .overridden(by: settings.color))
        if !toneMapped && encoding.colors.isHDR { encoding.hdrMetadata = HDRMetadata(stream: stream) }
        if let limit {
            encoding.averageBitRate = min(encoding.averageBitRate, limit.maxRate)
            encoding.maxBitRate = limit.maxRate
            encoding.bufferSize = limit.buffer
        }
        return encoding
    }

    /// The pictures a second the source's stream has (times the tempo): its clock's rate when that is its
    /// average too (`constant`), else its average; 30 when it says neither.
    private static func sourceFrameRate(of stream: UnsafeMutablePointer<AVStream>, tempo: Double?) -> (rate: AVRational, constant: Bool) {
        var guessed = av_guess_frame_rate(nil, stream, nil)
        var constant = true
        // A variable rate's base (a phone's or a screen recorder's 120, 600 or 1000 ticks) is far above the
        // pictures it has a second: key frames every 2 s of the base would come every 7 s or more, and x264's
        // level would be set for a rate never reached. The average is the rate then.
        let average = stream.pointee.avg_frame_rate
        if FFmpeg.isValid(average), av_q2d(average) >= 1, !FFmpeg.isValid(guessed) || av_q2d(guessed) > av_q2d(average) * 1.1 {
            guessed = av_d2q(av_q2d(average), 100_000)
            constant = false
        }
        var rate = guessed
        if !FFmpeg.isValid(guessed) || av_q2d(guessed) > 1000 {
            rate = AVRational(num: 30, den: 1)
            constant = false
        }
        // A tempo plays the pictures faster or slower: twice as many a second at 2 (the level and key-frame
        // interval are for those).
        guard let tempo, tempo != 1 else { return (rate, constant) }
        return (av_mul_q(rate, av_d2q(tempo, 1000)), constant)
    }

    /// NTSC rates as their exact 1001 fractions; others as close fractions.
    static func rational(_ rate: Double) -> AVRational {
        let ntsc = rate * 1001 / 1000
        if abs(ntsc - ntsc.rounded()) < 0.001 && abs(rate - rate.rounded()) > 0.001 {
            return AVRational(num: Int32(ntsc.rounded()) * 1000, den: 1001)
        }
        return av_d2q(rate, 100_000)
    }

    /// Seconds between two key frames.
    var keyFrameSeconds: Double { Double(maxKeyFrameInterval) / av_q2d(frameRate) }
}

/// Audio settings with every default filled in: what the AAC encoder is opened with.
struct AudioEncoding: Equatable {
    /// Bits per second.
    var bitRate: Int
    /// Samples per second.
    var sampleRate: Int
    var channels: Int
}

/// Colour description of a picture, as carried in the H.264 VUI and the MP4 `colr` atom.
struct ColorTags {
    var primaries: AVColorPrimaries
    var transfer: AVColorTransferCharacteristic
    var matrix: AVColorSpace
    var range: AVColorRange

    init(primaries: AVColorPrimaries, transfer: AVColorTransferCharacteristic, matrix: AVColorSpace, range: AVColorRange) {
        self.primaries = primaries
        self.transfer = transfer
        self.matrix = matrix
        self.range = range
    }

    /// SDR HD video: BT.709 throughout, limited range (what a tone-mapped HDR picture becomes).
    static let bt709 = ColorTags(primaries: AVCOL_PRI_BT709, transfer: AVCOL_TRC_BT709, matrix: AVCOL_SPC_BT709,
                                 range: AVCOL_RANGE_MPEG)

    /// High dynamic range: the PQ (SMPTE ST 2084) or HLG (ARIB STD-B67) transfer.
    var isHDR: Bool { videoRange != nil }

    /// The HLS `VIDEO-RANGE` of pictures so tagged: `PQ`, `HLG`, or nil for SDR (the attribute's absence).
    var videoRange: String? { Self.videoRange(transfer) }

    /// `PQ` or `HLG` for an HDR transfer, nil for any other.
    static func videoRange(_ transfer: AVColorTransferCharacteristic) -> String? {
        switch transfer {
        case AVCOL_TRC_SMPTE2084: "PQ"
        case AVCOL_TRC_ARIB_STD_B67: "HLG"
        default: nil
        }
    }

    /// The source's tags; where it says nothing, BT.709 for a picture `height` pixels high if that is HD, else BT.601,
    /// and BT.2020 primaries and matrix with an HDR transfer (HDR is mastered in BT.2020).
    init(source parameters: AVCodecParameters, assumingHeight height: Int) {
        let hd = height >= 720
        transfer = parameters.color_trc != AVCOL_TRC_UNSPECIFIED
            ? parameters.color_trc : (hd ? AVCOL_TRC_BT709 : AVCOL_TRC_SMPTE170M)
        let hdr = Self.videoRange(transfer) != nil
        primaries = parameters.color_primaries != AVCOL_PRI_UNSPECIFIED
            ? parameters.color_primaries : (hdr ? AVCOL_PRI_BT2020 : hd ? AVCOL_PRI_BT709 : AVCOL_PRI_SMPTE170M)
        matrix = Self.yuvMatrices.contains(parameters.color_space)
            ? parameters.color_space : (hdr ? AVCOL_SPC_BT2020_NCL : hd ? AVCOL_SPC_BT709 : AVCOL_SPC_SMPTE170M)
        range = parameters.color_range == AVCOL_RANGE_JPEG ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG
    }

    /// These tags for the Y'CbCr pictures made of a source in `parameters`: an RGB source's range tag (`pc`, as RGB
    /// levels always are: PNG (a palette's too), FFV1 `bgr0`, UtVideo `gbrp`, screen recordings) says nothing of the
    /// Y'CbCr it becomes, which is limited range, as ffmpeg makes it; copied, the output was full range, its blacks
    /// crushed and whites clipped by players that ignore the flag. So for a grey-only source (a grey or 1-bit PNG):
    /// its levels are converted into the limited range, as a colour image's are.
    func madeYCbCr(from parameters: AVCodecParameters) -> ColorTags {
        guard parameters.color_space == AVCOL_SPC_RGB || VideoSource.isRGB(parameters.format)
              || VideoSource.isGray(parameters.format) else { return self }
        var tags = self
        tags.range = AVCOL_RANGE_MPEG
        return tags
    }

    /// The matrices an output picture (Y'CbCr 4:2:0, made by swscale) can be in: the source's other tags say what
    /// its own pictures were (`gbr` for RGB: an RGB source's tag copied made players read Y as green), or name a
    /// matrix swscale does not convert into (YCgCo, ICtCp, chromaticity-derived); such a source gets the default.
    static let yuvMatrices: [AVColorSpace] = [
        AVCOL_SPC_BT709, AVCOL_SPC_BT470BG, AVCOL_SPC_SMPTE170M, AVCOL_SPC_SMPTE240M, AVCOL_SPC_FCC, AVCOL_SPC_BT2020_NCL,
    ]

    /// These tags with what `settings` names replaced.
    func overridden(by settings: ColorSettings?) -> ColorTags {
        guard let settings else { return self }
        var tags = self
        if let name = settings.primaries { tags.primaries = name == "bt709" ? AVCOL_PRI_BT709 : AVCOL_PRI_SMPTE170M }
        if let name = settings.transfer { tags.transfer = name == "bt709" ? AVCOL_TRC_BT709 : AVCOL_TRC_SMPTE170M }
        if let name = settings.matrix { tags.matrix = name == "bt709" ? AVCOL_SPC_BT709 : AVCOL_SPC_SMPTE170M }
        if let name = settings.range { tags.range = name == "pc" ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG }
        return tags
    }

    func apply(to context: UnsafeMutablePointer<AVCodecContext>) {
        context.pointee.color_primaries = primaries
        context.pointee.color_trc = transfer
        context.pointee.colorspace = matrix
        context.pointee.color_range = range
    }
}
