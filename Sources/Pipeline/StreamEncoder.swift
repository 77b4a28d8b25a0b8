import CFFmpeg

/// Owns an encoding `AVCodecContext` (libx264 or FFmpeg's AAC encoder).
final class StreamEncoder {
    private(set) var context: UnsafeMutablePointer<AVCodecContext>?
    let name: String
    /// What the output stream states besides the encoder's parameters: a kept HDR source's metadata.
    private(set) var hdrMetadata: HDRMetadata?
    private var flushed = false

    /// Opens libx264 with the resolved video settings; `globalHeader` when the container wants SPS/PPS out of band.
    init(video settings: VideoEncoding, globalHeader: Bool) throws(MediaError) {
        name = "H.264"
        hdrMetadata = settings.hdrMetadata
        guard let codec = avcodec_find_encoder_by_name("libx264") else {
            throw MediaError(code: "encoder_unavailable", message: "libx264 is not available in this FFmpeg build.")
        }
        try allocate(codec)
        let context = context!
        context.pointee.width = Int32(settings.width)
        context.pointee.height = Int32(settings.height)
        context.pointee.pix_fmt = AV_PIX_FMT_YUV420P
        context.pointee.sample_aspect_ratio = AVRational(num: 1, den: 1)
        context.pointee.time_base = settings.timeBase
        context.pointee.framerate = settings.frameRate
        context.pointee.bit_rate = Int64(settings.averageBitRate)
        if settings.maxBitRate > 0 {
            context.pointee.rc_max_rate = Int64(settings.maxBitRate)
            context.pointee.rc_buffer_size = Int32(settings.bufferSize)
        }
        context.pointee.gop_size = Int32(settings.maxKeyFrameInterval)
        context.pointee.level = Int32(settings.level)
        // x264 takes 1.5 threads a core; the encoders of a ladder share them.
        context.pointee.thread_count = settings.threads > 0 ? settings.threads : FFmpeg.threadCount(perCore: 1.5)
        if globalHeader { context.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER }
        settings.colors.apply(to: context)
        try FFmpeg.setOption(context.pointee.priv_data, "preset", settings.preset)
        try FFmpeg.setOption(context.pointee.priv_data, "profile", settings.profile)
        if settings.keyFramesForcedOnly {
            // Key frames only where the caller marks a picture I: each one an IDR, no scene cuts, closed GOPs, and
            // no interval of x264's own in between (`gop_size` far beyond any the caller uses).
            context.pointee.gop_size = Self.unboundedKeyFrameInterval
            try FFmpeg.setOption(context.pointee.priv_data, "forced-idr", "1")
            try FFmpeg.setOption(context.pointee.priv_data, "x264-params", "scenecut=0:open-gop=0")
        } else if settings.forcedKeyFramesAreIDR {
            try FFmpeg.setOption(context.pointee.priv_data, "forced-idr", "1")
        }
        try open(codec)
    }

    /// Opens FFmpeg's AAC encoder (LC) with the resolved audio settings.
    init(audio settings: AudioEncoding, globalHeader: Bool) throws(MediaError) {
        name = "AAC"
        guard let codec = avcodec_find_encoder(AV_CODEC_ID_AAC) else {
            throw MediaError(code: "encoder_unavailable", message: "The AAC encoder is not available in this FFmpeg build.")
        }
        try allocate(codec)
        let context = context!
        context.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
        context.pointee.sample_rate = Int32(settings.sampleRate)
        FFmpeg.defaultChannelLayout(&context.pointee.ch_layout, channels: Int32(settings.channels))
        context.pointee.bit_rate = Int64(settings.bitRate)
        context.pointee.time_base = AVRational(num: 1, den: Int32(settings.sampleRate))
        if globalHeader { context.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER }
        try open(codec)
    }

    private func allocate(_ codec: UnsafePointer<AVCodec>) throws(MediaError) {
        context = avcodec_alloc_context3(codec)
        guard context != nil else { throw MediaError(code: "out_of_memory", message: "Allocating the \(name) encoder failed.") }
    }

    private func open(_ codec: UnsafePointer<AVCodec>) throws(MediaError) {
        try FFmpeg.check(avcodec_open2(context, codec, nil), "Opening the \(name) encoder", code: "encoder_failed")
        let context = context!.pointee
        let startDelay: Double
        if context.codec_type == AVMEDIA_TYPE_VIDEO {
            let rate = FFmpeg.isValid(context.framerate) ? av_q2d(context.framerate) : 1
            startDelay = Double(context.has_b_frames + 1) / rate
        } else {
            startDelay = Double(context.initial_padding + context.frame_size) / Double(max(context.sample_rate, 1))
        }
        opened = (context.time_base, startDelay, Int(context.frame_size))
    }

    /// Frames between x264's own key frames when the caller forces them all: in effect never.
    static let unboundedKeyFrameInterval: Int32 = 1 << 20

    /// What the open encoder settled, kept past `release()`.
    private var opened = (timeBase: AVRational(num: 1, den: 1), startDelay: 0.0, frameSize: 0)

    var timeBase: AVRational { opened.timeBase }

    /// Seconds by which the first packet's decoding time may come before the first frame's presentation time: the
    /// B-frame delay of a video encoder (one frame more, for uneven frame times), the priming of an audio one.
    var startDelay: Double { opened.startDelay }

    /// Samples per channel in every audio frame but the last.
    var frameSize: Int { opened.frameSize }

    /// Frees the codec context (x264's lookahead and reference pictures: tens to hundreds of MiB at 1080p) once the
    /// encoder handed out its last packet, so a long finish (moving an MP4's index) does not hold it.
    func release() {
        avcodec_free_context(&context)
    }

    /// Sends a frame; returns false when the encoder is full and packets must be received first.
    func send(_ frame: Frame) throws(MediaError) -> Bool {
        guard context != nil else { throw MediaError(code: "encode_failed", message: "The \(name) encoder has already ended.") }
        let result = avcodec_send_frame(context, frame.pointer)
        if result == FFmpeg.again { return false }
        try FFmpeg.check(result, "Encoding \(name)", code: "encode_failed")
        return true
    }

    /// Tells the encoder no more frames come, so it hands out what it holds.
    func sendEndOfStream() throws(MediaError) {
        guard !flushed, context != nil else { return }
        flushed = true
        let result = avcodec_send_frame(context, nil)
        if result < 0 && result != FFmpeg.eof { try FFmpeg.check(result, "Flushing the \(name) encoder", code: "encode_failed") }
    }

    /// Receives the next packet; false when the encoder needs more input or has ended.
    func receive(into packet: Packet) throws(MediaError) -> Bool {
        packet.unref()
        guard context != nil else { return false }
        let result = avcodec_receive_packet(context, packet.pointer)
        if result == FFmpeg.again || result == FFmpeg.eof { return false }
        try FFmpeg.check(result, "Encoding \(name)", code: "encode_failed")
        return true
    }

    deinit { avcodec_free_context(&context) }
}
