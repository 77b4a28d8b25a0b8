import CFFmpeg

/// Owns a decoding `AVCodecContext` for one input stream; keeps its container alive.
final class StreamDecoder {
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let container: InputContainer
    let streamIndex: Int
    let timeBase: AVRational
    private var flushed = false

    init(container: InputContainer, streamIndex: Int, maxPixels: Int) throws(MediaError) {
        self.container = container
        self.streamIndex = streamIndex
        let stream = container.stream(streamIndex)
        timeBase = stream.pointee.time_base
        let parameters = stream.pointee.codecpar!
        let name = String(cString: avcodec_get_name(parameters.pointee.codec_id))
        guard let codec = avcodec_find_decoder(parameters.pointee.codec_id) else {
            throw MediaError(code: "unsupported_codec", message: "No decoder is available for the input's \(name) track.")
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
        if result == FFmpeg.invalidData { return true }
        try FFmpeg.check(result, "Decoding the input", code: "decode_failed")
        return true
    }

    /// Tells the decoder the input has ended, so it hands out the frames it still holds.
    func sendEndOfStream() throws(MediaError) {
        guard !flushed else { return }
        flushed = true
        let result = avcodec_send_packet(context, nil)
        if result < 0 && result != FFmpeg.eof { try FFmpeg.check(result, "Flushing the decoder", code: "decode_failed") }
    }

    enum Output { case frame, needsInput, endOfStream }

    /// Receives the next decoded frame into `frame`.
    func receive(into frame: Frame) throws(MediaError) -> Output {
        frame.unref()
        let result = avcodec_receive_frame(context, frame.pointer)
        if result == FFmpeg.again { return .needsInput }
        if result == FFmpeg.eof { return .endOfStream }
        if result == FFmpeg.invalidData { return .needsInput }
        try FFmpeg.check(result, "Decoding the input", code: "decode_failed")
        return .frame
    }

    deinit { avcodec_free_context(&context) }
}
