import CFFmpeg

/// The decode side's video stage: decoded pictures → (deinterlace, tone mapping, user filters, watermark) → every
/// output that wants them. Runs on the decoding thread; what it emits carries its `pts` in the time base given with it.
final class VideoSource {
    let track: Int
    private let sourceTimeBase: AVRational
    private let filterSettings: FilterSettings?
    /// The container or the parser says the fields are interlaced (`field_order` tt, bb, tb or bt).
    private let sourceInterlaced: Bool
    /// Decided at the first frame, which also tells whether the source is interlaced, and again at the first
    /// interlaced frame of a source that started progressive; nil: frames go straight on.
    private var filterChain: String?
    private var chainDecided = false
    private var deinterlacing = false
    /// The output's zero in microseconds (`AV_TIME_BASE`), where a tempo filter scales time from.
    private let origin: Int64
    private var filters: FilterGraph?
    /// Size and pixel format the current graph was built for.
    private var filterInput: (width: Int32, height: Int32, format: Int32)?
    private let watermark: Frame?
    /// How the pictures are shown, for the watermark's turn and place.
    private let orientation: PictureOrientation
    /// The share of the picture's width and height every output shows, for the watermark's place.
    private let kept: (x: Double, y: Double)
    /// The size of the stream's pictures as they reach the crop, whose pixels are of it.
    private let sourceSize: (width: Int, height: Int)
    /// HDR → SDR filters, when the source is HDR and the settings ask for SDR.
    private let toneMappingFilters: String?
    /// What the pipeline takes the source's colours for (its tags, else what its size suggests).
    private let colors: ColorTags?
    /// The sample aspect of pictures that state none (the codec's, else square).
    private let codecSampleAspect: AVRational
    /// Where each picture goes, with the time base of its `pts`.
    private let emit: (Frame, AVRational) throws(MediaError) -> Void

    init(track: Int, stream: UnsafeMutablePointer<AVStream>, filters filterSettings: FilterSettings?, timeline: Timeline,
         toneMapping: ToneMapping?, orientation: PictureOrientation, kept: (x: Double, y: Double) = (1, 1),
         colors: ColorTags? = nil, emit: @escaping (Frame, AVRational) throws(MediaError) -> Void) throws(MediaError) {
        self.track = track
        self.orientation = orientation
        self.kept = kept
        self.colors = colors
        let (width, height) = (Int(stream.pointee.codecpar.pointee.width), Int(stream.pointee.codecpar.pointee.height))
        // The tone mapping makes a picture even before the crop.
        sourceSize = toneMapping?.evenSize(width: width, height: height) ?? (width, height)
        toneMappingFilters = toneMapping?.filters
        sourceTimeBase = stream.pointee.time_base
        origin = timeline.start
        self.filterSettings = filterSettings
        self.emit = emit
        if let mark = filterSettings?.video?.watermark {
            guard let path = mark.imagePath else {
                throw MediaError(code: "invalid_settings", message: "filters.video.watermark.upload: the image was not found.")
            }
            watermark = try MediaReader.firstPicture(path: path)
        } else {
            watermark = nil
        }
        let aspect = stream.pointee.codecpar.pointee.sample_aspect_ratio
        codecSampleAspect = FFmpeg.isValid(aspect) ? aspect : AVRational(num: 1, den: 1)
        let order = stream.pointee.codecpar.pointee.field_order
        sourceInterlaced = [AV_FIELD_TT, AV_FIELD_BB, AV_FIELD_TB, AV_FIELD_BT].contains(order)
    }

    /// Takes one decoded picture (the reader's, valid until its next sample).
    func append(_ frame: Frame) throws(MediaError) {
        let value = frame.pointer
        // Timestamps on the frame from here on: the decoder's best guess where it has one.
        if value.pointee.best_effort_timestamp != FFmpeg.noPTS { value.pointee.pts = value.pointee.best_effort_timestamp }
        // bwdif takes no picture under 3 lines or columns: such a one (said to be interlaced, as a container may say
        // of any) is left as it is. The job failed with `filter_failed` though no filter was asked for.
        let deinterlaceable = value.pointee.width >= 3 && value.pointee.height >= 3
        if !chainDecided || (!deinterlacing && value.pointee.interlaced_frame != 0 && deinterlaceable) {
            // An interlaced source is deinterlaced: H.264 is written progressive, and scaling woven fields smears them.
            // A broadcast that turns interlaced later (a progressive advert first) gets the deinterlacer from its
            // first interlaced picture on: the pictures before go through the graph they had, flushed.
            if chainDecided { try finish() }
            filters = nil
            chainDecided = true
            deinterlacing = (sourceInterlaced || value.pointee.interlaced_frame != 0) && deinterlaceable
            filterChain = (filterSettings ?? FilterSettings())
                .videoChain(deinterlace: deinterlacing, origin: origin, toneMapping: toneMappingFilters, orientation: orientation,
                            sourceSize: sourceSize, kept: kept, toYUV: Self.isRGB(value.pointee.format) ? colors.map(Self.toYUV) : nil)
        }
        guard let chain = filterChain else { return try emit(frame, sourceTimeBase) }
        // A filter that converts the picture (the watermark's overlay works in RGBA) reads its colours from the
        // frame: untagged, swscale took BT.601 where the rest of the pipeline takes an HD source for BT.709, and a
        // watermark shifted the colours of the whole video. The frame says what the pipeline assumes.
        if let colors, !Self.isRGB(value.pointee.format) {
            if value.pointee.colorspace == AVCOL_SPC_UNSPECIFIED { value.pointee.colorspace = colors.matrix }
            if value.pointee.color_range == AVCOL_RANGE_UNSPECIFIED { value.pointee.color_range = colors.range }
            if value.pointee.color_primaries == AVCOL_PRI_UNSPECIFIED { value.pointee.color_primaries = colors.primaries }
            if value.pointee.color_trc == AVCOL_TRC_UNSPECIFIED { value.pointee.color_trc = colors.transfer }
        }
        // A picture that states no sample aspect has the stream's, said before the filters: a filter that scales it
        // (the tone mapping's fixed-size prescale) scales a stated aspect with it, but leaves none as none, and a 4:3
        // part of an HDR broadcast came out stretched to 16:9 instead of pillarboxed.
        if !FFmpeg.isValid(value.pointee.sample_aspect_ratio) { value.pointee.sample_aspect_ratio = codecSampleAspect }
        let picture = value.pointee
        if let built = filterInput, built != (picture.width, picture.height, picture.format) {
            // The picture changed size or format mid-stream (a broadcast switching programmes): a graph is built for
            // one input shape, so flush this one and build the next.
            try finish()
            filters = nil
        }
        let graph: FilterGraph
        if let filters {
            graph = filters
        } else {
            graph = try FilterGraph(video: picture, timeBase: sourceTimeBase, chain: chain, image: watermark)
            filters = graph
            filterInput = (picture.width, picture.height, picture.format)
        }
        try graph.push(frame)
        try graph.drain { (filtered) throws(MediaError) in try emit(filtered, graph.outputTimeBase) }
    }

    /// Whether pictures of `format` are RGB (a palette's included).
    static func isRGB(_ format: Int32) -> Bool {
        guard let descriptor = av_pix_fmt_desc_get(AVPixelFormat(rawValue: format)) else { return false }
        return descriptor.pointee.flags & UInt64(AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL) != 0
    }

    /// Whether `format` holds grey levels alone (`gray`, `gray16`, 1-bit `monob`, with alpha or not): an image's
    /// levels, as RGB's are, not a Y'CbCr picture's luma.
    static func isGray(_ format: Int32) -> Bool {
        guard let descriptor = av_pix_fmt_desc_get(AVPixelFormat(rawValue: format)) else { return false }
        let alpha = descriptor.pointee.flags & UInt64(AV_PIX_FMT_FLAG_ALPHA) != 0 ? 1 : 0
        return Int(descriptor.pointee.nb_components) - alpha == 1
    }

    /// The conversion of RGB pictures into the Y'CbCr the encode side takes the source's for (`colors`).
    private static func toYUV(_ colors: ColorTags) -> String {
        let matrix = switch colors.matrix {
        case AVCOL_SPC_BT470BG, AVCOL_SPC_SMPTE170M: "bt601"
        case AVCOL_SPC_SMPTE240M: "smpte240m"
        case AVCOL_SPC_FCC: "fcc"
        case AVCOL_SPC_BT2020_NCL: "bt2020"
        default: "bt709"
        }
        return "scale=out_color_matrix=\(matrix):out_range=\(colors.range == AVCOL_RANGE_JPEG ? "pc" : "tv"),format=yuv444p"
    }

    /// Flushes the filters at the end of the input.
    func finish() throws(MediaError) {
        guard let filters else { return }
        try filters.finish { (filtered) throws(MediaError) in try emit(filtered, filters.outputTimeBase) }
    }
}
