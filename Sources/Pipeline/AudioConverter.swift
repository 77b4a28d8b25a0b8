import CFFmpeg

/// Resamples decoded audio to the output's rate, layout and sample format (swresample), keeps it on the source's
/// timeline, and cuts it into the whole frames the AAC encoder takes through a FIFO.
///
/// A frame given with a timestamp is placed there, as the ffmpeg CLI's `aresample=async` does: where the source's
/// audio has a hole (a dropped capture, a splice, a paused microphone) silence fills it; where it overlaps what came
/// before, the overlap is dropped; a small, steady difference (an audio clock running fast or slow against the
/// video) is absorbed by stretching or squeezing the audio a little (`swr_set_compensation`). So audio and video
/// stay within about one AAC frame of each other from start to end. A frame without a timestamp follows on.
final class AudioConverter {
    /// How closely the audio follows its timestamps; the same numbers drive `aresample` in a filter graph.
    enum Sync {
        /// Differences below this are left alone, seconds: timestamp rounding, and jitter (a capture's wall clock,
        /// Vorbis stamping a frame 10 ms late at each switch of block size). It must be more than the overshoot of
        /// a stretch, which is not taken back when the next frame is in place (`maximumStretch` of the second it is
        /// spread over: 10 ms): at 1 ms, each late frame set a stretch going that overshot and was turned round
        /// again, and a steady tone wobbled by up to 1 % (swresample's own `aresample` in a filter graph the same).
        static let tolerance = 0.02
        /// Largest stretch or squeeze, as a fraction of the audio's length (1 %: a pitch change of under 18 cents).
        static let maximumStretch = 0.01

        /// An `aresample` filter that keeps timestamped audio in sync the same way, for a graph fed such frames;
        /// differences over `hardLimit` seconds are filled with silence or dropped.
        static func filter(hardLimit: Double) -> String {
            "aresample=min_comp=\(tolerance):min_hard_comp=\(hardLimit):max_soft_comp=\(maximumStretch)"
        }
    }

    private let encoding: AudioEncoding
    private let frameSize: Int
    private var resampler: OpaquePointer?
    private var resamplerInput: (format: Int32, rate: Int32, channels: Int32) = (-1, 0, 0)
    private var inputLayout = AVChannelLayout()
    /// The layout of the frames the resampler was made for, as they came (`inputLayout` is what it was told).
    private var sourceLayout: ChannelLayout?
    private var fifo: OpaquePointer?
    private var outputLayout = AVChannelLayout()
    private let converted = Frame()
    /// Presentation time of the next sample leaving the FIFO, in 1/sampleRate units; set by the first push.
    private var nextTimestamp: Int64?
    /// Samples of output still to drop (an overlap larger than one frame of the input).
    private var pendingDrop = 0

    /// Whether audio that starts after zero gets silence before it (`TranscodeOutput.tracksStartAtZero`).
    private let fillsFromZero: Bool

    init(encoding: AudioEncoding, frameSize: Int, fillsFromZero: Bool = false) throws(MediaError) {
        self.encoding = encoding
        self.frameSize = max(frameSize, 1)
        self.fillsFromZero = fillsFromZero
        FFmpeg.defaultChannelLayout(&outputLayout, channels: Int32(encoding.channels))
        fifo = av_audio_fifo_alloc(AV_SAMPLE_FMT_FLTP, Int32(encoding.channels), Int32(self.frameSize) * 4)
        guard fifo != nil else { throw MediaError(code: "out_of_memory", message: "Allocating the audio FIFO failed.") }
    }

    /// Differences larger than this are filled with silence or dropped rather than stretched, seconds: 50 ms, or one
    /// encoder frame where that is longer. At one AAC frame (21 ms at 48 kHz, 11 at 96), the jitter of audio stamped
    /// by a wall clock (a capture's, a screen recorder's) was taken for holes and overlaps: silence next to dropped
    /// samples, a click each, ten in ten seconds of ±15 ms. (ffmpeg's `aresample=async` takes 100 ms; an overlap
    /// that a muxer wrote as frames of 100 ms stamped alike is then only stretched, and stays off for seconds.)
    var hardLimit: Double { max(0.05, Double(frameSize) / Double(encoding.sampleRate)) }

    /// Resamples `frame` and hands every whole encoder frame that is ready to `emit`. `timestamp` (1/sampleRate
    /// units, output timeline) is where the frame's first sample belongs; nil places it right after the previous one.
    func push(_ frame: Frame, at timestamp: Int64?, emit: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        try configure(for: frame.pointer.pointee)
        if let timestamp {
            try align(to: timestamp, emit: emit)
        } else if nextTimestamp == nil {
            nextTimestamp = 0
        }
        // A second of input at a time: one frame may hold minutes (an AVI's single chunk of 8-bit audio, a file at
        // a few hertz), and converted whole it took an output buffer and a FIFO as long, gigabytes, and failed the
        // job as out of memory.
        let input = frame.pointer.pointee
        guard let data = input.extended_data else { return }
        let format = AVSampleFormat(rawValue: input.format)
        let planar = av_sample_fmt_is_planar(format) != 0
        let planes = planar ? Int(resamplerInput.channels) : 1
        let stride = Int(av_get_bytes_per_sample(format)) * (planar ? 1 : Int(resamplerInput.channels))
        let total = Int(input.nb_samples), slice = max(1, Int(resamplerInput.rate))
        let pointers = UnsafeMutablePointer<UnsafePointer<UInt8>?>.allocate(capacity: max(planes, 1))
        defer { pointers.deallocate() }
        var offset = 0
        while offset < total {
            let count = min(slice, total - offset)
            for plane in 0..<planes { pointers[plane] = data[plane].map { UnsafePointer($0 + offset * stride) } }
            try resample(input: pointers, samples: Int32(count))
            try drain(final: false, emit: emit)
            offset += count
        }
    }

    /// Takes what the resampler still holds, and hands out every sample left (the last frame may be short); call once
    /// at the end of the input.
    func finish(emit: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        if resampler != nil { try resample(input: nil, samples: 0) }
        try drain(final: true, emit: emit)
    }

    /// Compares where the frame belongs with where the audio so far ends, and fills, drops or stretches.
    private func align(to timestamp: Int64, emit: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        guard let start = nextTimestamp else {
            // The first frame fixes the start; a start before the output's zero is cut, and one after it is filled
            // with silence where the output asks.
            nextTimestamp = fillsFromZero ? 0 : max(0, timestamp)
            pendingDrop = Int(max(0, -timestamp))
            if fillsFromZero, timestamp > 0 { try insertSilence(samples: timestamp, emit: emit) }
            return
        }
        let rate = Double(encoding.sampleRate)
        let delay = swr_get_delay(resampler, Int64(encoding.sampleRate))
        let expected = start + Int64(av_audio_fifo_size(fifo)) + delay - Int64(pendingDrop)
        let delta = Double(timestamp - expected)
        if abs(delta) <= Sync.tolerance * rate { return }
        if delta > hardLimit * rate {
            try insertSilence(samples: Int64(delta), emit: emit)
        } else if delta < -hardLimit * rate {
            pendingDrop += Int(-delta)
        } else {
            // Spread the difference over the next second of output, at most `maximumStretch` of it.
            let bound = Sync.maximumStretch * rate
            let samples = Int32(min(bound, max(-bound, delta)).rounded())
            try FFmpeg.check(swr_set_compensation(resampler, samples, Int32(encoding.sampleRate)),
                             "Adjusting the audio to its timestamps", code: "unsupported_audio")
        }
    }

    /// Fills a hole of `samples` output samples with silence, given to the resampler in the input's format (so it
    /// lands after what the resampler still holds), a second at a time, emitting as it goes.
    private func insertSilence(samples: Int64, emit: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        let inputRate = Int64(resamplerInput.rate)
        var remaining = av_rescale(samples, inputRate, Int64(encoding.sampleRate))
        let chunk = Int32(max(1, min(inputRate, remaining)))
        let silence = Frame()
        let pointer = silence.pointer
        pointer.pointee.nb_samples = chunk
        pointer.pointee.format = resamplerInput.format
        pointer.pointee.sample_rate = resamplerInput.rate
        try FFmpeg.check(av_channel_layout_copy(&pointer.pointee.ch_layout, &inputLayout), "Preparing silence")
        try FFmpeg.check(av_frame_get_buffer(pointer, 0), "Allocating silence", code: "out_of_memory")
        try FFmpeg.check(av_samples_set_silence(pointer.pointee.extended_data, 0, chunk, resamplerInput.channels,
                                                AVSampleFormat(rawValue: resamplerInput.format)), "Preparing silence")
        let raw = UnsafeMutableRawPointer(pointer.pointee.extended_data)
        while remaining > 0 {
            let count = Int32(min(Int64(chunk), remaining))
            try resample(input: raw?.assumingMemoryBound(to: UnsafePointer<UInt8>?.self), samples: count)
            try drain(final: false, emit: emit)
            remaining -= Int64(count)
        }
    }

    /// Hands out frames of exactly `frameSize` samples, and with `final` whatever is left (the last frame).
    private func drain(final: Bool, emit: (Frame) throws(MediaError) -> Void) throws(MediaError) {
        while let frame = try nextFrame(final: final) { try emit(frame) }
    }

    private func nextFrame(final: Bool) throws(MediaError) -> Frame? {
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
        if resampler != nil && resamplerInput == key && sourceLayout?.matches(input.ch_layout) == true { return }
        try MediaLimits.check(sampleRate: Int(input.sample_rate))
        if resampler != nil { try resample(input: nil, samples: 0) }
        swr_free(&resampler)
        av_channel_layout_uninit(&inputLayout)
        var ambisonic: [Double]?
        /// The mix for more unlabelled channels than 7.1 has (`sideMatrix`).
        var tracks: [Double]?
        if input.ch_layout.order == AV_CHANNEL_ORDER_AMBISONIC, input.ch_layout.nb_channels > 0 {
            // Sound-field channels (a 360° video's) are no speakers: swresample refuses the layout. They are
            // decoded to speakers here, and the resampler is told N channels with the matrix to apply.
            var layout = input.ch_layout
            ambisonic = Self.ambisonicMatrix(&layout, outputs: encoding.channels)
            inputLayout.order = AV_CHANNEL_ORDER_UNSPEC
            inputLayout.nb_channels = input.ch_layout.nb_channels
        } else if input.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC || input.ch_layout.nb_channels == 0 {
            guard input.ch_layout.nb_channels > 0 else {
                throw MediaError(code: "unsupported_audio", message: "The input's audio has no channels.")
            }
            if input.ch_layout.nb_channels <= 8 {
                FFmpeg.defaultChannelLayout(&inputLayout, channels: input.ch_layout.nb_channels)
            } else {
                // Past 7.1, unlabelled channels are a recorder's tracks, not speakers (a newer FFmpeg would call ten
                // of them 5.1.4 and leave the fourth out as low-frequency effects): mixed by `sideMatrix`, always.
                // Left to swresample, 16 or 24 got a default layout of its own (hexadecagonal, 22.2) whose top and
                // wide channels it left out of the mix: half the tracks or more were silent.
                inputLayout.order = AV_CHANNEL_ORDER_UNSPEC
                inputLayout.nb_channels = input.ch_layout.nb_channels
                var layout = inputLayout
                tracks = Self.sideMatrix(&layout, outputs: encoding.channels)
            }
        } else {
            var source = input.ch_layout
            try FFmpeg.check(av_channel_layout_copy(&inputLayout, &source), "Reading the audio layout")
        }
        /// A resampler from `inputLayout`, mixing by `matrix` (`doing` names it in an error) or by swresample's own
        /// rules; what `swr_init` said.
        func start(mixing matrix: [Double]?, doing: String) throws(MediaError) -> Int32 {
            let result = swr_alloc_set_opts2(
                &resampler, &outputLayout, AV_SAMPLE_FMT_FLTP, Int32(encoding.sampleRate),
                &inputLayout, AVSampleFormat(rawValue: input.format), input.sample_rate, 0, nil)
            try FFmpeg.check(result, "Configuring the audio resampler", code: "unsupported_audio")
            if let matrix {
                try FFmpeg.check(swr_set_matrix(resampler, matrix, inputLayout.nb_channels), doing, code: "unsupported_audio")
            } else if av_channel_layout_compare(&inputLayout, &outputLayout) != 0 {
                // Mixing adds channels together (5.1 to stereo: L + 0.707 C + 0.707 Ls; quad to 4.0 both backs into
                // its one back channel): loud sound would go past full scale and clip in every player. The mix is
                // scaled so that no output can (a mix that adds nothing is left as it is).
                try FFmpeg.setOption(UnsafeMutableRawPointer(resampler), "rematrix_maxval", "1.0")
            }
            return swr_init(resampler)
        }
        var started = try start(mixing: ambisonic ?? tracks, doing: ambisonic != nil ? "Setting the ambisonic decode" : "Setting the audio mix")
        if started < 0, ambisonic == nil, tracks == nil {
            // swresample mixes only layouts it knows how to: not more unlabelled channels than a default layout has
            // (a field recorder's ten tracks, a WAV without a channel mask), nor speakers on one side only (BL+BR, a
            // front pair without its right). The job failed, its video with it. Such a layout is mixed here by the
            // side each channel is on (unlabelled ones alternating left and right), told as N plain channels.
            var layout = inputLayout
            let matrix = Self.sideMatrix(&layout, outputs: encoding.channels)
            let channels = inputLayout.nb_channels
            swr_free(&resampler)
            av_channel_layout_uninit(&inputLayout)
            inputLayout.order = AV_CHANNEL_ORDER_UNSPEC
            inputLayout.nb_channels = channels
            started = try start(mixing: matrix, doing: "Setting the audio mix")
        }
        try FFmpeg.check(started, "Starting the audio resampler", code: "unsupported_audio")
        resamplerInput = key
        sourceLayout = try ChannelLayout(copying: input.ch_layout)
    }

    /// The mix for a layout swresample will not mix (see `configure`): each channel to the side it is on, a centre
    /// (or one on no side) to both at 0.707, the low-frequency ones left out (as a downmix leaves them); unlabelled
    /// channels alternate left and right. Each side scaled so it cannot clip.
    static func sideMatrix(_ layout: inout AVChannelLayout, outputs: Int) -> [Double] {
        let inputs = Int(layout.nb_channels)
        var left = [Double](repeating: 0, count: inputs), right = left
        let lefts = Set([AV_CHAN_FRONT_LEFT, AV_CHAN_BACK_LEFT, AV_CHAN_FRONT_LEFT_OF_CENTER, AV_CHAN_SIDE_LEFT,
                                  AV_CHAN_TOP_FRONT_LEFT, AV_CHAN_TOP_BACK_LEFT, AV_CHAN_STEREO_LEFT, AV_CHAN_WIDE_LEFT,
                                  AV_CHAN_SURROUND_DIRECT_LEFT, AV_CHAN_TOP_SIDE_LEFT, AV_CHAN_BOTTOM_FRONT_LEFT].map(\.rawValue))
        let rights = Set([AV_CHAN_FRONT_RIGHT, AV_CHAN_BACK_RIGHT, AV_CHAN_FRONT_RIGHT_OF_CENTER, AV_CHAN_SIDE_RIGHT,
                                   AV_CHAN_TOP_FRONT_RIGHT, AV_CHAN_TOP_BACK_RIGHT, AV_CHAN_STEREO_RIGHT, AV_CHAN_WIDE_RIGHT,
                                   AV_CHAN_SURROUND_DIRECT_RIGHT, AV_CHAN_TOP_SIDE_RIGHT, AV_CHAN_BOTTOM_FRONT_RIGHT].map(\.rawValue))
        let lows = Set([AV_CHAN_LOW_FREQUENCY.rawValue, AV_CHAN_LOW_FREQUENCY_2.rawValue])
        for index in 0..<inputs {
            guard layout.order != AV_CHANNEL_ORDER_UNSPEC else {
                if index % 2 == 0 { left[index] = 1 } else { right[index] = 1 }
                continue
            }
            let channel = av_channel_layout_channel_from_index(&layout, UInt32(index)).rawValue
            if lefts.contains(channel) {
                left[index] = 1
            } else if rights.contains(channel) {
                right[index] = 1
            } else if !lows.contains(channel) {
                (left[index], right[index]) = (0.707, 0.707)
            }
        }
        return mix(left: left, right: right, outputs: outputs)
    }

    /// A matrix (one row per output channel, a weight per input channel) from a left and a right mix, scaled alike
    /// so that neither side's weights add up past full scale (a custom matrix has none of the resampler's own guard
    /// against clipping, `rematrix_maxval`; each side scaled on its own moved a centre towards the side with fewer
    /// channels: FL+FC came out 5 dB louder on the right). A mono output takes both sides' average; outputs past the
    /// first two (a 5.1's centre and surrounds) stay silent.
    private static func mix(left: [Double], right: [Double], outputs: Int) -> [Double] {
        let total = max(left.reduce(0) { $0 + abs($1) }, right.reduce(0) { $0 + abs($1) })
        let scale = total > 1 ? 1 / total : 1
        let (left, right) = (left.map { $0 * scale }, right.map { $0 * scale })
        let inputs = left.count
        var matrix = [Double](repeating: 0, count: inputs * outputs)
        for index in 0..<inputs {
            if outputs == 1 {
                matrix[index] = (left[index] + right[index]) / 2
            } else {
                matrix[index] = left[index]
                matrix[inputs + index] = right[index]
            }
        }
        return matrix
    }

    /// The mix (one row per output channel, a weight per input channel) that decodes an ambisonic layout (ACN order,
    /// SN3D, as YouTube's spatial audio and Opus's family 2 carry it) to speakers: two cardioids facing left and
    /// right, `(W ± Y) / 2`, a source straight ahead at half level in each. Head-locked channels after the sound
    /// field (stereo beside it) are added to their own side, the side scaled down so it cannot clip (`mix`).
    static func ambisonicMatrix(_ layout: inout AVChannelLayout, outputs: Int) -> [Double] {
        let inputs = Int(layout.nb_channels)
        var left = [Double](repeating: 0, count: inputs), right = left
        for index in 0..<inputs {
            let channel = av_channel_layout_channel_from_index(&layout, UInt32(index)).rawValue
            let base = AV_CHAN_AMBISONIC_BASE.rawValue
            switch channel {
            case base: (left[index], right[index]) = (0.5, 0.5) // W, everywhere
            case base + 1: (left[index], right[index]) = (0.5, -0.5) // Y, left minus right
            case AV_CHAN_FRONT_LEFT.rawValue: left[index] = 1
            case AV_CHAN_FRONT_RIGHT.rawValue: right[index] = 1
            case AV_CHAN_FRONT_CENTER.rawValue: (left[index], right[index]) = (0.707, 0.707)
            default: break // Z and X (up, ahead), higher orders: no part of a left-right picture
            }
        }
        // Each side scaled so that its weights cannot add up past full scale (head-locked stereo beside the sound
        // field).
        return mix(left: left, right: right, outputs: outputs)
    }

    /// Converts `samples` input samples (nil: flush the resampler) into the FIFO, less any output still to drop.
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
        let dropped = min(Int(produced), pendingDrop)
        pendingDrop -= dropped
        let kept = Int(produced) - dropped
        guard kept > 0 else { return }
        // FLTP: one float plane per channel; the kept samples start `dropped` floats into each.
        var planes = (0..<encoding.channels).map { channel -> UnsafeMutableRawPointer? in
            UnsafeMutableRawPointer(pointer.pointee.extended_data[channel]).map { $0 + dropped * MemoryLayout<Float>.size }
        }
        let written = planes.withUnsafeMutableBufferPointer { buffer in
            av_audio_fifo_write(fifo, buffer.baseAddress, Int32(kept))
        }
        try FFmpeg.check(written, "Filling the audio FIFO")
    }

    deinit {
        swr_free(&resampler)
        av_audio_fifo_free(fifo)
        av_channel_layout_uninit(&outputLayout)
        av_channel_layout_uninit(&inputLayout)
    }
}
