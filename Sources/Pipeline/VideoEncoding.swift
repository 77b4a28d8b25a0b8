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
    /// Bits per second.
    var averageBitRate: Int
    /// Frames.
    var maxKeyFrameInterval: Int
    var profile: String
    /// Level times ten, e.g. 41 for 4.1.
    var level: Int
    var preset: String
    /// Frames per second the encoder is told. With a frame rate in the settings the time base is 1/rate, so
    /// frames that land on an already used tick are dropped.
    var frameRate: AVRational
    /// Time base of the frames handed to the encoder.
    var timeBase: AVRational
    var colors: ColorTags
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

    /// The source's tags; where it says nothing, BT.709 for a picture `height` pixels high if that is HD, else BT.601.
    init(source parameters: AVCodecParameters, assumingHeight height: Int) {
        let hd = height >= 720
        primaries = parameters.color_primaries != AVCOL_PRI_UNSPECIFIED
            ? parameters.color_primaries : (hd ? AVCOL_PRI_BT709 : AVCOL_PRI_SMPTE170M)
        transfer = parameters.color_trc != AVCOL_TRC_UNSPECIFIED
            ? parameters.color_trc : (hd ? AVCOL_TRC_BT709 : AVCOL_TRC_SMPTE170M)
        matrix = parameters.color_space != AVCOL_SPC_UNSPECIFIED
            ? parameters.color_space : (hd ? AVCOL_SPC_BT709 : AVCOL_SPC_SMPTE170M)
        range = parameters.color_range == AVCOL_RANGE_JPEG ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG
    }

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
