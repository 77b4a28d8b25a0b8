import CFFmpeg

/// Owns an `AVFilterGraph` with one buffer source and one buffer sink: frames go in, filtered frames come out.
/// The chain between them is built by `FilterSettings` from validated numbers only.
final class FilterGraph {
    private var graph: UnsafeMutablePointer<AVFilterGraph>?
    private var source: UnsafeMutablePointer<AVFilterContext>?
    private var sink: UnsafeMutablePointer<AVFilterContext>?
    /// Second input, named `wm`, fed once with a still image (a watermark).
    private var imageSource: UnsafeMutablePointer<AVFilterContext>?
    private let output = Frame()

    /// A video graph for frames like `frame`, whose timestamps are in `timeBase`; `image`, if given, feeds the
    /// chain's `[wm]` input once.
    convenience init(video frame: AVFrame, timeBase: AVRational, chain: String, image: Frame? = nil) throws(MediaError) {
        try self.init(source: "buffer", sink: "buffersink", arguments: Self.videoArguments(frame, timeBase: timeBase),
                      chain: chain, image: image)
    }

    private static func videoArguments(_ frame: AVFrame, timeBase: AVRational) -> String {
        let aspect = FFmpeg.isValid(frame.sample_aspect_ratio) ? frame.sample_aspect_ratio : AVRational(num: 1, den: 1)
        return "video_size=\(frame.width)x\(frame.height):pix_fmt=\(frame.format)"
            + ":time_base=\(timeBase.num)/\(timeBase.den):pixel_aspect=\(aspect.num)/\(aspect.den)"
    }

    /// An audio graph for frames like `frame` (timestamps in 1/sample rate).
    convenience init(audio frame: AVFrame, chain: String) throws(MediaError) {
        var chain = chain
        var sinkArguments: String?
        let formatName = av_get_sample_fmt_name(AVSampleFormat(rawValue: frame.format)).map { String(cString: $0) } ?? "fltp"
        var arguments = "time_base=1/\(frame.sample_rate):sample_rate=\(frame.sample_rate):sample_fmt=\(formatName)"
        var layout = frame.ch_layout
        if layout.order == AV_CHANNEL_ORDER_UNSPEC && layout.nb_channels > 8 {
            // Past 7.1, unlabelled channels are a recorder's tracks: they stay unlabelled through the graph, for the
            // converter to mix them all (`AudioConverter`). Labelled with FFmpeg's default layout, 9 to 12 failed the
            // graph, and 16 or 24 came out as speakers whose top and wide channels the mix left silent.
            arguments += ":channels=\(layout.nb_channels)"
            if chain.contains("asetrate") {
                // FFmpeg's rate change, which the pitch filter is made of, takes speakers only.
                throw MediaError(code: "filter_failed", message: "filters.audio.pitch: FFmpeg cannot change the pitch of more than 8 unlabelled "
                                 + "channels, and this audio has \(layout.nb_channels) (a recorder's tracks); leave the pitch out.")
            }
            // Pinned after each filter that may change the layout (`aresample`) and at the end: FFmpeg does not
            // choose an unlabelled layout between two filters that take any.
            // The sink too takes unlabelled channels only when told (`all_channel_counts`).
            let pin = "aformat=channel_layouts=\(layout.nb_channels)C"
            sinkArguments = "all_channel_counts=1"
            chain = chain.split(separator: ",").flatMap { filter in
                filter.hasPrefix("aresample") ? [String(filter), pin] : [String(filter)]
            }.joined(separator: ",") + "," + pin
        } else {
            if layout.order == AV_CHANNEL_ORDER_UNSPEC { FFmpeg.defaultChannelLayout(&layout, channels: frame.ch_layout.nb_channels) }
            var buffer = [CChar](repeating: 0, count: 128)
            _ = av_channel_layout_describe(&layout, &buffer, buffer.count)
            arguments += ":channel_layout=" + buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        }
        try self.init(source: "abuffer", sink: "abuffersink", arguments: arguments, sinkArguments: sinkArguments, chain: chain)
    }

    private init(source sourceName: String, sink sinkName: String, arguments: String, sinkArguments: String? = nil, chain: String,
                 image: Frame? = nil) throws(MediaError) {
        graph = avfilter_graph_alloc()
        guard graph != nil else { throw MediaError(code: "out_of_memory", message: "Allocating a filter graph failed.") }
        try FFmpeg.check(avfilter_graph_create_filter(&source, avfilter_get_by_name(sourceName), "in", arguments, nil, graph),
                         "Creating the filter input", code: "filter_failed")
        try FFmpeg.check(avfilter_graph_create_filter(&sink, avfilter_get_by_name(sinkName), "out", sinkArguments, nil, graph),
                         "Creating the filter output", code: "filter_failed")
        var outputs = avfilter_inout_alloc()
        var inputs = avfilter_inout_alloc()
        defer {
            avfilter_inout_free(&outputs)
            avfilter_inout_free(&inputs)
        }
        outputs?.pointee.name = av_strdup("in")
        outputs?.pointee.filter_ctx = source
        inputs?.pointee.name = av_strdup("out")
        inputs?.pointee.filter_ctx = sink
        if let image {
            let timeBase = AVRational(num: 1, den: 1000)
            try FFmpeg.check(avfilter_graph_create_filter(&imageSource, avfilter_get_by_name("buffer"), "wm",
                                                          Self.videoArguments(image.pointer.pointee, timeBase: timeBase), nil, graph),
                             "Creating the watermark input", code: "filter_failed")
            let second = avfilter_inout_alloc()
            second?.pointee.name = av_strdup("wm")
            second?.pointee.filter_ctx = imageSource
            outputs?.pointee.next = second
        }
        try FFmpeg.check(avfilter_graph_parse_ptr(graph, chain, &inputs, &outputs, nil), "Building the filters", code: "filter_failed")
        try FFmpeg.check(avfilter_graph_config(graph, nil), "Configuring the filters", code: "filter_failed")
        if let image {
            // One frame, then the end: overlay keeps showing the last image for the rest of the video. Dated long
            // before any picture (49 days: overlay leaves pictures earlier than the image bare), as pictures may come
            // before zero on the source's clock (a transport stream starting just before its clock wraps).
            image.pointer.pointee.pts = -(1 << 32)
            try FFmpeg.check(av_buffersrc_add_frame_flags(imageSource, image.pointer, Int32(AV_BUFFERSRC_FLAG_KEEP_REF)),
                             "Adding the watermark", code: "filter_failed")
            try FFmpeg.check(av_buffersrc_add_frame_flags(imageSource, nil, 0), "Adding the watermark", code: "filter_failed")
        }
    }

    /// Time base of the frames that come out.
    var outputTimeBase: AVRational { av_buffersink_get_time_base(sink) }

    /// Sends a frame in; nil says the input has ended.
    func push(_ frame: Frame?) throws(MediaError) {
        let result = av_buffersrc_add_frame_flags(source, frame?.pointer, Int32(AV_BUFFERSRC_FLAG_KEEP_REF))
        if result < 0 && result != FFmpeg.eof { try FFmpeg.check(result, "Filtering", code: "filter_failed") }
    }

    /// The next filtered frame (valid until the next call), or nil when the graph needs more input or has ended.
    func pull() throws(MediaError) -> Frame? {
        output.unref()
        let result = av_buffersink_get_frame(sink, output.pointer)
        if result == FFmpeg.again || result == FFmpeg.eof { return nil }
        try FFmpeg.check(result, "Filtering", code: "filter_failed")
        return output
    }

    /// Hands every frame the graph has ready to `body` (each valid until the next).
    func drain(_ body: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        while let frame = try pull() { try body(frame) }
    }

    /// Ends the input and hands the graph's last frames to `body`.
    func finish(_ body: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        try push(nil)
        try drain(body)
    }

    deinit { avfilter_graph_free(&graph) }
}
