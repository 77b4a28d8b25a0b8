import CFFmpeg

/// Resamples decoded audio to the output's rate, layout and sample format (swresample), and cuts it into the
/// whole frames the AAC encoder takes through a FIFO.
final class AudioConverter {
    private let encoding: AudioEncoding
    private let frameSize: Int
    private var resampler: OpaquePointer?
    private var resamplerInput: (format: Int32, rate: Int32, channels: Int32) = (-1, 0, 0)
    private var fifo: OpaquePointer?
    private var outputLayout = AVChannelLayout()
    private let converted = Frame()
    /// Presentation time of the next sample leaving the FIFO, in 1/sampleRate units; set by the first push.
    private var nextTimestamp: Int64?

    init(encoding: AudioEncoding, frameSize: Int) throws(MediaError) {
        self.encoding = encoding
        self.frameSize = max(frameSize, 1)
        av_channel_layout_default(&outputLayout, Int32(encoding.channels))
        fifo = av_audio_fifo_alloc(AV_SAMPLE_FMT_FLTP, Int32(encoding.channels), Int32(self.frameSize) * 4)
        guard fifo != nil else { throw MediaError(code: "out_of_memory", message: "Allocating the audio FIFO failed.") }
    }

    /// Resamples `frame` into the FIFO. `timestamp` (1/sampleRate units, output timeline) places the first sample;
    /// later frames follow on without gaps.
    func push(_ frame: Frame, timestamp: Int64?) throws(MediaError) {
        if nextTimestamp == nil { nextTimestamp = max(0, timestamp ?? 0) }
        try configure(for: frame.pointer.pointee)
        let input = frame.pointer
        let inputSamples = input.pointee.nb_samples
        let raw = UnsafeMutableRawPointer(input.pointee.extended_data)
        try resample(input: raw?.assumingMemoryBound(to: UnsafePointer<UInt8>?.self), samples: inputSamples)
    }

    /// Takes what the resampler still holds into the FIFO; call once at the end of the input.
    func flush() throws(MediaError) {
        guard resampler != nil else { return }
        try resample(input: nil, samples: 0)
    }

    /// The next frame for the encoder: exactly `frameSize` samples, or with `final` whatever is left (the last frame).
    func nextFrame(final: Bool) throws(MediaError) -> Frame? {
        let available = Int(av_audio_fifo_size(fifo))
        guard available >= frameSize || (final && available > 0) else { return nil }
        let count = min(available, frameSize)
        let frame = Frame()
        let pointer = frame.pointer
        pointer.pointee.nb_samples = Int32(count)
        pointer.pointee.format = AV_SAMPLE_FMT_FLTP.rawValue
        pointer.pointee.sample_rate = Int32(encoding.sampleRate)
        try FFmpeg.check(av_channel_layout_copy(&pointer.pointee.ch_layout, &outputLayout), "Preparing audio")
        try FFmpeg.check(av_frame_get_buffer(pointer, 0), "Allocating audio", code: "out_of_memory")
        try FFmpeg.check(av_audio_fifo_read(fifo, tc_frame_extended_data(pointer), Int32(count)), "Reading the audio FIFO")
        pointer.pointee.pts = nextTimestamp ?? 0
        nextTimestamp = pointer.pointee.pts + Int64(count)
        return frame
    }

    private func configure(for input: AVFrame) throws(MediaError) {
        let key = (input.format, input.sample_rate, input.ch_layout.nb_channels)
        if resampler != nil && resamplerInput == key { return }
        if resampler != nil { try flush() }
        swr_free(&resampler)
        var inputLayout = AVChannelLayout()
        if input.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC || input.ch_layout.nb_channels == 0 {
            guard input.ch_layout.nb_channels > 0 else {
                throw MediaError(code: "unsupported_audio", message: "The input's audio has no channels.")
            }
            av_channel_layout_default(&inputLayout, input.ch_layout.nb_channels)
        } else {
            var source = input.ch_layout
            try FFmpeg.check(av_channel_layout_copy(&inputLayout, &source), "Reading the audio layout")
        }
        defer { av_channel_layout_uninit(&inputLayout) }
        let result = swr_alloc_set_opts2(
            &resampler, &outputLayout, AV_SAMPLE_FMT_FLTP, Int32(encoding.sampleRate),
            &inputLayout, AVSampleFormat(rawValue: input.format), input.sample_rate, 0, nil)
        try FFmpeg.check(result, "Configuring the audio resampler", code: "unsupported_audio")
        try FFmpeg.check(swr_init(resampler), "Starting the audio resampler", code: "unsupported_audio")
        resamplerInput = key
    }

    private func resample(input: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, samples: Int32) throws(MediaError) {
        let capacity = swr_get_out_samples(resampler, samples)
        guard capacity > 0 else { return }
        converted.unref()
        let pointer = converted.pointer
        pointer.pointee.nb_samples = capacity
        pointer.pointee.format = AV_SAMPLE_FMT_FLTP.rawValue
        try FFmpeg.check(av_channel_layout_copy(&pointer.pointee.ch_layout, &outputLayout), "Preparing audio")
        try FFmpeg.check(av_frame_get_buffer(pointer, 0), "Allocating audio", code: "out_of_memory")
        let produced = swr_convert(resampler, pointer.pointee.extended_data, capacity, input, samples)
        try FFmpeg.check(produced, "Resampling audio")
        guard produced > 0 else { return }
        try FFmpeg.check(av_audio_fifo_write(fifo, tc_frame_extended_data(pointer), produced), "Filling the audio FIFO")
    }

    deinit {
        swr_free(&resampler)
        av_audio_fifo_free(fifo)
        av_channel_layout_uninit(&outputLayout)
    }
}
