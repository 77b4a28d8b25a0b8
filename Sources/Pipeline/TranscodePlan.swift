import CFFmpeg

/// The per-track work of a transcode, decided from the source's tracks and the settings: which tracks are
/// encoded, copied or dropped, and the converters and writer inputs that carry each one.
final class TranscodePlan {
    private var video: VideoPath?
    private var audio: AudioPath?
    private var copies: [Int: PassthroughWriterInput] = [:]
    /// Seconds of output expected from the source's declared durations (0 when unknown).
    let expectedDuration: Double

    init(reader: MediaReader, writer: MediaWriter, settings: TranscodeSettings, limits: MediaLimits) throws(MediaError) {
        let videoTrack = settings.video == .drop ? nil : reader.firstVideoTrack
        let audioTrack = settings.audio == .drop ? nil : reader.firstAudioTrack
        let container = settings.container
        if videoTrack != nil && !container.holdsVideo {
            throw MediaError(code: "invalid_settings",
                             message: "video: a \(container.rawValue) file holds audio only; set \"video\": null to drop the input's video.")
        }
        if audioTrack != nil && !container.holdsAudio {
            throw MediaError(code: "invalid_settings",
                             message: "audio: a raw \(container.rawValue) stream holds video only; set \"audio\": null to drop the input's audio.")
        }
        if videoTrack != nil && settings.video == .copy && container == .h264 {
            throw MediaError(code: "copy_not_supported",
                             message: "video: \"copy\" is not available for raw H.264 output; encode it instead.")
        }
        guard videoTrack != nil || audioTrack != nil else {
            let sourceHasTracks = reader.firstVideoTrack != nil || reader.firstAudioTrack != nil
            throw sourceHasTracks
                ? MediaError(code: "invalid_settings", message: "video, audio: the settings drop every track the input has.")
                : MediaError(code: "no_media_tracks", message: "The input has neither a video nor an audio track.")
        }
        for track in [videoTrack, audioTrack].compactMap({ $0 }) {
            try limits.check(track, bytesPerPixel: Self.bytesPerPixel(reader.stream(track.index)))
        }
        if let duration = reader.duration { try limits.checkDeclared(duration: duration) }
        let selected = [videoTrack, audioTrack].compactMap { $0?.index }
        let start = selected.map { Self.startTime(of: reader.stream($0), fallback: reader.startTime) }.min() ?? 0
        let tempo = settings.filters?.tempo ?? 1
        expectedDuration = max(0, (selected.map { Self.endTime(of: reader.stream($0), reader: reader) }.max() ?? 0) - start) / tempo
        writer.startSession(atSourceTime: start)

        if let track = videoTrack {
            switch settings.video {
            case .encode(let videoSettings):
                try reader.addDecodedOutput(track: track.index, maxPixels: limits.maxDimension * limits.maxDimension)
                video = try VideoPath(reader: reader, track: track, settings: videoSettings, filters: settings.filters, writer: writer)
            case .copy:
                copies[track.index] = try Self.copy(track, key: "video", reader: reader, writer: writer)
            case .drop:
                break
            }
        }
        if let track = audioTrack {
            switch settings.audio {
            case .encode(let audioSettings):
                try reader.addDecodedOutput(track: track.index)
                audio = try AudioPath(track: track, timeBase: reader.timeBase(of: track.index),
                                      encoding: audioSettings.resolved, filters: settings.filters, limits: limits, writer: writer)
            case .copy:
                copies[track.index] = try Self.copy(track, key: "audio", reader: reader, writer: writer)
            case .drop:
                break
            }
        }
    }

    private static func copy(_ track: Track, key: String, reader: MediaReader, writer: MediaWriter) throws(MediaError) -> PassthroughWriterInput {
        let stream = reader.stream(track.index)
        guard writer.accepts(stream.pointee.codecpar.pointee.codec_id) else {
            throw MediaError(code: "copy_not_supported",
                             message: "\(key): the input's \(track.codec) \(key) cannot be copied into \(writer.fileType.rawValue); encode it instead.")
        }
        reader.addPassthroughOutput(track: track.index)
        return try writer.addPassthroughInput(copying: stream)
    }

    /// Bytes a decoded pixel of the stream's format takes (4 when the format is unknown, the worst common case).
    private static func bytesPerPixel(_ stream: UnsafeMutablePointer<AVStream>) -> Double {
        let format = AVPixelFormat(rawValue: stream.pointee.codecpar.pointee.format)
        guard let descriptor = av_pix_fmt_desc_get(format) else { return 4 }
        return Double(av_get_bits_per_pixel(descriptor)) / 8
    }

    private static func startTime(of stream: UnsafeMutablePointer<AVStream>, fallback: Double) -> Double {
        stream.pointee.start_time == FFmpeg.noPTS ? fallback : FFmpeg.seconds(stream.pointee.start_time, stream.pointee.time_base)
    }

    private static func endTime(of stream: UnsafeMutablePointer<AVStream>, reader: MediaReader) -> Double {
        if stream.pointee.duration > 0 {
            return startTime(of: stream, fallback: reader.startTime) + FFmpeg.seconds(stream.pointee.duration, stream.pointee.time_base)
        }
        return reader.declaredEnd ?? reader.startTime
    }

    /// Video frames handed to the encoder so far.
    var framesEncoded: Int { video?.input.framesAppended ?? 0 }

    /// Sends one sample from the reader down its track's path.
    func handle(_ sample: MediaReader.Sample) throws(MediaError) {
        switch sample {
        case .frame(let frame, let track):
            if track == video?.track {
                try video?.append(frame)
            } else if track == audio?.track {
                try audio?.append(frame)
            }
        case .packet(let packet, let track):
            try copies[track]?.append(packet)
        }
    }

    /// Drains the converters at the end of the input; the writer drains the encoders.
    func finish() throws(MediaError) {
        try video?.finish()
        try audio?.finish()
        if let video, video.input.framesAppended == 0 {
            throw MediaError(code: "no_decodable_video", message: "The input's video track has no frame that could be decoded.")
        }
        if let audio, audio.samplesWritten == 0 {
            throw MediaError(code: "no_decodable_audio", message: "The input's audio track has no sample that could be decoded.")
        }
    }
}

/// Decoded video → converter → H.264 input, with timestamps moved onto the output timeline.
private final class VideoPath {
    let track: Int
    let input: EncodingWriterInput
    private let converter: VideoConverter
    private let sourceTimeBase: AVRational
    private let timeline: Timeline
    private let frameTicks: Int64
    private var lastTimestamp: Int64?
    private let filterSettings: FilterSettings?
    /// The container or the parser says the fields are interlaced (`field_order` tt, bb, tb or bt).
    private let sourceInterlaced: Bool
    /// Decided at the first frame, which also tells whether the source is interlaced; nil: frames go straight on.
    private var filterChain: String?
    private var chainDecided = false
    private var filters: FilterGraph?
    /// Size and pixel format the current graph was built for.
    private var filterInput: (width: Int32, height: Int32, format: Int32)?
    private let watermark: Frame?

    init(reader: MediaReader, track: Track, settings: VideoSettings, filters filterSettings: FilterSettings?,
         writer: MediaWriter) throws(MediaError) {
        self.track = track.index
        let stream = reader.stream(track.index)
        sourceTimeBase = stream.pointee.time_base
        timeline = writer.timeline
        self.filterSettings = filterSettings
        if let mark = filterSettings?.video?.watermark {
            guard let path = mark.imagePath else {
                throw MediaError(code: "invalid_settings", message: "filters.video.watermark.upload: the image was not found.")
            }
            watermark = try MediaReader.firstPicture(path: path)
        } else {
            watermark = nil
        }
        var sourceWidth = track.width ?? 0, sourceHeight = track.height ?? 0
        if let crop = filterSettings?.video?.crop {
            guard crop.x + crop.width <= sourceWidth, crop.y + crop.height <= sourceHeight else {
                throw MediaError(code: "invalid_settings",
                                 message: "filters.video.crop: the rectangle is outside the \(sourceWidth)×\(sourceHeight) picture.")
            }
            (sourceWidth, sourceHeight) = (crop.width, crop.height)
        }
        let geometry = try OutputGeometry.resolve(
            sourceWidth: sourceWidth, sourceHeight: sourceHeight, sampleAspect: track.sampleAspectValue,
            rotation: track.rotation ?? 0, settings: settings)
        let parameters = stream.pointee.codecpar.pointee
        sourceInterlaced = [AV_FIELD_TT, AV_FIELD_BB, AV_FIELD_TB, AV_FIELD_BT].contains(parameters.field_order)
        let sourceColors = ColorTags(source: parameters, assumingHeight: Int(parameters.height))
        var frameRate: AVRational
        var timeBase: AVRational
        if let rate = settings.frameRate {
            frameRate = Self.rational(rate)
            timeBase = av_inv_q(frameRate)
        } else {
            let guessed = av_guess_frame_rate(nil, stream, nil)
            frameRate = FFmpeg.isValid(guessed) && av_q2d(guessed) <= 1000 ? guessed : AVRational(num: 30, den: 1)
            timeBase = sourceTimeBase
            // A time base coarser than a frame, or absurdly fine, is replaced by MPEG's 90 kHz clock.
            if !FFmpeg.isValid(timeBase) || av_q2d(timeBase) > av_q2d(av_inv_q(frameRate)) || timeBase.den / max(timeBase.num, 1) > 10_000_000 {
                timeBase = AVRational(num: 1, den: 90_000)
            }
        }
        let encoding = VideoEncoding(
            width: geometry.width, height: geometry.height,
            scaledWidth: geometry.scaledWidth, scaledHeight: geometry.scaledHeight,
            cropX: geometry.cropX, cropY: geometry.cropY, cropWidth: geometry.cropWidth, cropHeight: geometry.cropHeight,
            rotation: geometry.rotation,
            // width × height × 4, but at least 64 kb/s: x264 counts in kb/s and refuses 0 (a 2×2 input gave 16 b/s).
            averageBitRate: settings.averageBitRate ?? max(geometry.width * geometry.height * 4, 64_000),
            maxKeyFrameInterval: settings.maxKeyFrameInterval ?? max(1, Int((2 * av_q2d(frameRate)).rounded())),
            profile: settings.profile ?? "high",
            level: settings.level.map { Int(((Double($0) ?? 0) * 10).rounded()) } ?? -99,
            preset: settings.preset ?? "veryfast",
            frameRate: frameRate, timeBase: timeBase,
            colors: ColorTags(source: parameters, assumingHeight: geometry.height).overridden(by: settings.color))
        converter = VideoConverter(encoding: encoding, sourceColors: sourceColors)
        input = try writer.addInput(video: encoding)
        frameTicks = max(1, av_rescale_q(1, av_inv_q(frameRate), timeBase))
    }

    /// NTSC rates as their exact 1001 fractions; others as close fractions.
    static func rational(_ rate: Double) -> AVRational {
        let ntsc = rate * 1001 / 1000
        if abs(ntsc - ntsc.rounded()) < 0.001 && abs(rate - rate.rounded()) > 0.001 {
            return AVRational(num: Int32(ntsc.rounded()) * 1000, den: 1001)
        }
        return av_d2q(rate, 100_000)
    }

    func append(_ frame: Frame) throws(MediaError) {
        if !chainDecided {
            // An interlaced source is deinterlaced: H.264 is written progressive, and scaling woven fields smears them.
            chainDecided = true
            let interlaced = sourceInterlaced || frame.pointer.pointee.interlaced_frame != 0
            filterChain = (filterSettings ?? FilterSettings()).videoChain(deinterlace: interlaced)
        }
        guard let chain = filterChain else { return try encode(frame, timeBase: sourceTimeBase, filtered: false) }
        let picture = frame.pointer.pointee
        if let built = filterInput, built != (picture.width, picture.height, picture.format) {
            // The picture changed size or format mid-stream (a broadcast switching programmes): a graph is built for
            // one input shape, so flush this one and build the next.
            try finish()
            filters = nil
        }
        if filters == nil {
            filters = try FilterGraph(video: picture, timeBase: sourceTimeBase, chain: chain, image: watermark)
            filterInput = (picture.width, picture.height, picture.format)
        }
        let value = frame.pointer
        if value.pointee.best_effort_timestamp != FFmpeg.noPTS { value.pointee.pts = value.pointee.best_effort_timestamp }
        try filters?.push(frame)
        try drainFilters()
    }

    /// Flushes the filters at the end of the input.
    func finish() throws(MediaError) {
        guard let filters else { return }
        try filters.push(nil)
        try drainFilters()
    }

    private func drainFilters() throws(MediaError) {
        guard let filters else { return }
        while let filtered = try filters.pull() {
            try encode(filtered, timeBase: filters.outputTimeBase, filtered: true)
        }
    }

    private func encode(_ frame: Frame, timeBase: AVRational, filtered: Bool) throws(MediaError) {
        let value = frame.pointer.pointee
        let source = !filtered && value.best_effort_timestamp != FFmpeg.noPTS ? value.best_effort_timestamp : value.pts
        let timestamp: Int64
        if source == FFmpeg.noPTS {
            timestamp = (lastTimestamp ?? -frameTicks) + frameTicks
        } else {
            timestamp = timeline.convert(source, from: timeBase, to: input.encoder.timeBase)
        }
        // Frames that do not move time forward (non-monotonic sources, or a lower output frame rate) are dropped.
        if let last = lastTimestamp, timestamp <= last { return }
        let converted = try converter.convert(frame)
        converted.pointer.pointee.pts = timestamp
        lastTimestamp = timestamp
        try input.append(converted)
    }
}

/// Decoded audio → (filters) → resampler and FIFO → AAC input, on the source's timeline: holes in the source's
/// audio become silence, overlaps are dropped, drift is absorbed (see `AudioConverter`).
private final class AudioPath {
    let track: Int
    private let input: EncodingWriterInput
    private let converter: AudioConverter
    private let sourceTimeBase: AVRational
    private let timeline: Timeline
    private let limits: MediaLimits
    private(set) var samplesWritten = 0
    private let filterSettings: FilterSettings?
    private var filters: FilterGraph?
    /// Sample rate, format and channel count the current graph was built for.
    private var filterInput: (rate: Int32, format: Int32, channels: Int32)?
    /// Where the graph's output starts on the output timeline (1/sampleRate units); set by the first frame.
    private var filterStart: Int64?
    /// Whether the graph's first output has been placed at `filterStart`.
    private var filterOutputPlaced = false

    init(track: Track, timeBase: AVRational, encoding: AudioEncoding, filters: FilterSettings?, limits: MediaLimits,
         writer: MediaWriter) throws(MediaError) {
        self.track = track.index
        sourceTimeBase = timeBase
        timeline = writer.timeline
        filterSettings = filters
        self.limits = limits
        input = try writer.addInput(audio: encoding)
        converter = try AudioConverter(encoding: encoding, frameSize: input.encoder.frameSize)
    }

    func append(_ frame: Frame) throws(MediaError) {
        let value = frame.pointer.pointee
        let source = value.best_effort_timestamp != FFmpeg.noPTS ? value.best_effort_timestamp : value.pts
        let timestamp = source == FFmpeg.noPTS ? nil : timeline.convert(source, from: sourceTimeBase, to: input.encoder.timeBase)
        if let timestamp {
            // A clock that leaps far ahead would otherwise be filled with hours of silence.
            try limits.checkRead(seconds: Double(timestamp) / Double(input.encoder.timeBase.den) * Double(input.encoder.timeBase.num))
        }
        guard let chain = filterSettings?.audioChain(sampleRate: Int(value.sample_rate)) else {
            return try converter.push(frame, at: timestamp, emit: encode)
        }
        let shape = (value.sample_rate, value.format, value.ch_layout.nb_channels)
        if let built = filterInput, built != shape {
            // A graph takes one input format: drain this one and build the next.
            try finishFilters()
            filters = nil
        }
        if filters == nil {
            // The graph's first filter keeps the audio on its timestamps (in 1/sample rate), as the converter would.
            let sync = AudioConverter.Sync.filter(hardLimit: converter.hardLimit)
            filters = try FilterGraph(audio: value, chain: sync + "," + chain)
            filterInput = shape
            // A graph's output is continuous from its first frame on; a tempo filter scales where it starts. A graph
            // built again (the format changed) starts where its first frame belongs, so a gap at the change stays.
            if let timestamp {
                filterStart = Int64(Double(timestamp) / (filterSettings?.tempo ?? 1))
                filterOutputPlaced = false
            } else if filterStart == nil {
                filterStart = 0
            }
        }
        frame.pointer.pointee.pts = source == FFmpeg.noPTS
            ? FFmpeg.noPTS : timeline.convert(source, from: sourceTimeBase, to: AVRational(num: 1, den: value.sample_rate))
        try filters?.push(frame)
        try drainFilters()
    }

    func finish() throws(MediaError) {
        try finishFilters()
        try converter.finish(emit: encode)
    }

    private func finishFilters() throws(MediaError) {
        guard let filters else { return }
        try filters.push(nil)
        try drainFilters()
    }

    private func drainFilters() throws(MediaError) {
        guard let filters else { return }
        while let filtered = try filters.pull() {
            // Only the first frame is placed; the rest follow on, as the graph's output has no holes.
            let timestamp = filterOutputPlaced ? nil : filterStart
            filterOutputPlaced = true
            try converter.push(filtered, at: timestamp, emit: encode)
        }
    }

    private func encode(_ frame: Frame) throws(MediaError) {
        samplesWritten += frame.sampleCount
        try input.append(frame)
    }
}
