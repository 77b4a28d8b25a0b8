import CFFmpeg

/// Owns a decoding `AVCodecContext` for one input stream; keeps its container alive.
final class StreamDecoder {
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let container: InputContainer
    let streamIndex: Int
    let timeBase: AVRational
    private var flushed = false
    /// Pictures (or blocks of sound) in a row the decoder failed on with an error other than invalid data.
    private var failuresInARow = 0
    /// Failures of any kind while the decoder is drained.
    private var drainFailures = 0

    /// Failures in a row, other than invalid data, after which the stream counts as undecodable (not a broken
    /// picture or two, which are skipped as players skip them: a zlib error in one PNG frame of a screen capture).
    /// A memory limit's refusals, which libraries report as generic errors, fail on every picture and reach it.
    static let maxFailuresInARow = 16

    init(container: InputContainer, streamIndex: Int, maxPixels: Int) throws(MediaError) {
        self.container = container
        self.streamIndex = streamIndex
        let stream = container.stream(streamIndex)
        timeBase = stream.pointee.time_base
        let parameters = stream.pointee.codecpar!
        let name = String(cString: avcodec_get_name(parameters.pointee.codec_id))
        guard let codec = avcodec_find_decoder(parameters.pointee.codec_id) else {
            let kind = parameters.pointee.codec_type == AVMEDIA_TYPE_VIDEO ? "video" : "audio"
            let what = parameters.pointee.codec_id == AV_CODEC_ID_NONE ? "\(kind) track in a codec FFmpeg does not know" : "\(name) track"
            throw MediaError(code: "unsupported_codec", message: "No decoder is available for the input's \(what).")
        }
        context = avcodec_alloc_context3(codec)
        guard context != nil else { throw MediaError(code: "out_of_memory", message: "Allocating a \(name) decoder failed.") }
        try FFmpeg.check(avcodec_parameters_to_context(context, parameters), "Configuring the \(name) decoder")
        context!.pointee.pkt_timebase = timeBase
        context!.pointee.thread_count = FFmpeg.threadCount(perCore: 1)
        context!.pointee.max_pixels = Int64(maxPixels)
        try FFmpeg.check(avcodec_open2(context, codec, nil), "Opening the \(name) decoder", code: "unsupported_codec")
    }

    /// Sends a packet; returns false when the decoder is full and frames must be received first.
    func send(_ packet: Packet) throws(MediaError) -> Bool {
        let result = avcodec_send_packet(context, packet.pointer)
        if result == FFmpeg.again { return false }
        // A packet the decoder refuses as invalid is skipped; decoding goes on past it, as players do.
        try skipOrThrow(result)
        return true
    }

    /// Passes over a failure to decode one packet or picture (`result`, when it is one): invalid data always, other
    /// errors up to `maxFailuresInARow` in a row. Running out of memory, or more failures, throws `decode_failed`.
    private func skipOrThrow(_ result: Int32) throws(MediaError) {
        guard result < 0, result != FFmpeg.invalidData else { return }
        failuresInARow += 1
        guard result == FFmpeg.noMemory || failuresInARow > Self.maxFailuresInARow else { return }
        try FFmpeg.check(result, "Decoding the input", code: "decode_failed")
    }

    /// Tells the decoder the input has ended, so it hands out the frames it still holds.
    func sendEndOfStream() throws(MediaError) {
        guard !flushed else { return }
        flushed = true
        // With frame threads, a picture still being decoded may report its failure here: the decoder is draining
        // all the same, and the pictures after it are received as usual.
        let result = avcodec_send_packet(context, nil)
        if result != FFmpeg.eof { try skipOrThrow(result) }
    }

    enum Output { case frame, needsInput, endOfStream }

    /// Receives the next decoded frame into `frame`. A picture that failed is passed over (`skipOrThrow`); while
    /// the decoder is drained at the end, the ones it still holds after it are received (with frame threads, a
    /// failure shows up there, and the last pictures were lost).
    func receive(into frame: Frame) throws(MediaError) -> Output {
        while true {
            frame.unref()
            let result = avcodec_receive_frame(context, frame.pointer)
            if result == FFmpeg.again { return .needsInput }
            if result == FFmpeg.eof { return .endOfStream }
            if result >= 0 {
                failuresInARow = 0
                return .frame
            }
            try skipOrThrow(result)
            if !flushed { return .needsInput }
            // FFmpeg stops a drain that keeps failing (after about 20 failures) for its own decoders, not for every
            // library's: a drain is given up after as many failures as a stream may have in a row.
            drainFailures += 1
            if drainFailures > Self.maxFailuresInARow { return .endOfStream }
        }
    }

    deinit { avcodec_free_context(&context) }
}
