import CFFmpeg
import Foundation

/// The per-track work of a transcode, decided from the source's tracks and the settings: which tracks are
/// encoded, copied or dropped, and the stages that carry each one.
///
/// Decoding, the video filters and the audio run on the session's thread; each video output (the one encode of a
/// file, or every rendition of a ladder) and the thumbnail maker run on a thread of their own behind a bounded
/// `FrameQueue`, all fed the same decoded pictures.
final class TranscodePlan {
    private var video: VideoSource?
    private var workers: [EncodeWorker] = []
    private var encodeSides: [VideoEncodeSide] = []
    private var audio: AudioPath?
    private var copies: [Int: PassthroughWriterInput] = [:]
    /// The still-picture maker, when thumbnails or a poster are asked for (read its storyboard after `finish`).
    private(set) var thumbnailer: Thumbnailer?
    /// Seconds of output expected from the source's declared durations (0 when unknown).
    let expectedDuration: Double
    /// Whether the video continues a checkpoint (it may then have nothing left to encode).
    private var resuming = false

    /// The tracks one plan carries: all of them, or one pass of a checkpointed transcode.
    enum Pass: Equatable {
        case all
        /// The video only, into checkpoint segments of `segmentSeconds`: an IDR at each segment boundary.
        case video(segmentSeconds: Double)
        /// The audio only.
        case audio

        var includesVideo: Bool { self != .audio }
        var includesAudio: Bool { if case .video = self { false } else { true } }
    }

    /// - Parameter directory: the folder the output is written in (thumbnails go there: for a checkpointed video
    ///   pass, its checkpoint's stills); nil for a lone file.
    /// - Parameter pass: which tracks this plan carries; the timeline is the same for every pass (it starts with
    ///   the earliest of the tracks the settings keep).
    init(reader: MediaReader, output: any TranscodeOutput, settings: TranscodeSettings, limits: MediaLimits,
         directory: String?, pass: Pass = .all) throws(MediaError) {
        let videoTrack = settings.video == .drop ? nil : reader.mainVideoTrack(copying: settings.video == .copy)
        let audioTrack = settings.audio == .drop ? nil : reader.mainAudioTrack(copying: settings.audio == .copy)
        let container = settings.container
        do throws(SettingsError) {
            try settings.checkCopiedTrackFilters()
        } catch {
            throw MediaError(code: "invalid_settings", message: error.description)
        }
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
            if settings.audio != .drop, reader.tracks.contains(where: { $0.mediaType == .audio }) {
                // Its only sound is a declared stream without a packet (`MediaReader.mainAudioTrack`).
                throw MediaError(code: "no_decodable_audio", message: "The input's audio track carries no sound.")
            }
            let sourceHasTracks = reader.mainVideoTrack != nil || reader.mainAudioTrack != nil
            throw sourceHasTracks
                ? MediaError(code: "invalid_settings", message: "video, audio: the settings drop every track the input has.")
                : MediaError(code: "no_media_tracks", message: "The input has neither a video nor an audio track.")
        }
        if settings.thumbnails != nil, pass.includesVideo {
            guard directory != nil else {
                throw MediaError(code: "invalid_settings", message: "thumbnails: pictures are written into an output folder, not beside a lone file.")
            }
            guard videoTrack != nil, case .encode = settings.video else {
                throw MediaError(code: "invalid_settings",
                                 message: "thumbnails: they are taken from the encoded video, and the output has none (the input has no video, or it is copied or dropped).")
            }
        }
        // A duration guessed from a clock that may jump, which the file's size cannot hold (MPEG-TS joined from two
        // recordings: "lasts 95147 s" for 6 s), or estimated from the bit rate of the first seconds (raw AAC with a
        // quiet start: "lasts 26670 s" for 570), is left to `checkRead`, which holds the limit as the media is read.
        let judgesDuration = !reader.container.durationIsImplausible && !reader.container.durationIsEstimatedFromBitRate
        for track in [videoTrack, audioTrack].compactMap({ $0 }) {
            try limits.check(track, bytesPerPixel: Self.bytesPerPixel(reader.stream(track.index)), judgesDeclaredDuration: judgesDuration)
        }
        if judgesDuration, let duration = reader.duration { try limits.checkDeclared(duration: duration) }
        let selected = [videoTrack, audioTrack].compactMap { $0?.index }
        // Every pass follows the clocks of the same tracks, so that the passes of a checkpointed transcode agree.
        reader.followClocks(of: selected)
        let start = selected.map { reader.container.declaredStart(ofStream: $0) }.min() ?? 0
        let tempo = settings.filters?.tempo ?? 1
        expectedDuration = max(0, (selected.map { Self.endTime(of: reader.stream($0), reader: reader) }.max() ?? 0) - start) / tempo
        output.startSession(atSourceTime: start)

        if let track = videoTrack, pass.includesVideo {
            switch settings.video {
            case .encode(let videoSettings):
                if let vision = DolbyVision(stream: reader.stream(track.index)), !vision.decodesToViewablePictures {
                    throw vision.refusal
                }
                let maxPixels = limits.maxDimension * limits.maxDimension
                try reader.addDecodedOutput(track: track.index, maxPixels: maxPixels)
                try addVideo(track: track, reader: reader, maxPixels: maxPixels, settings: settings, base: videoSettings,
                             output: output, directory: directory, pass: pass)
            case .copy:
                // Only MP4 carries a Dolby Vision configuration here (FFmpeg writes `dvcC` in MP4 mode alone): copied
                // into another file, a stream shown right only with it (profile 5) came out in the wrong colours.
                if container != .mp4, let vision = DolbyVision(stream: reader.stream(track.index)), !vision.decodesToViewablePictures {
                    throw MediaError(code: "copy_not_supported",
                                     message: "video: \"copy\" of Dolby Vision profile \(vision.profile) keeps its configuration in MP4 only; "
                                         + "set \"container\": \"mp4\".")
                }
                reader.addPassthroughOutput(track: track.index)
                copies[track.index] = try output.addPassthroughInput(copying: reader.stream(track.index), key: "video")
            case .drop:
                break
            }
        }
        if let track = audioTrack, pass.includesAudio {
            switch settings.audio {
            case .encode(let audioSettings):
                try reader.addDecodedOutput(track: track.index)
                audio = try AudioPath(track: track, timeBase: reader.timeBase(of: track.index),
                                      encoding: audioSettings.resolved, filters: settings.filters, limits: limits, output: output)
            case .copy:
                reader.addPassthroughOutput(track: track.index)
                copies[track.index] = try output.addPassthroughInput(copying: reader.stream(track.index), key: "audio")
            case .drop:
                break
            }
        }
    }

    /// The video outputs (one, or a ladder's renditions), the thumbnail maker and the filters that feed them all.
    private func addVideo(track: Track, reader: MediaReader, maxPixels: Int, settings: TranscodeSettings,
                          base: VideoSettings, output: any TranscodeOutput, directory: String?, pass: Pass) throws(MediaError) {
        let stream = reader.stream(track.index)
        let crop = settings.filters?.video?.crop
        let parameters = stream.pointee.codecpar.pointee
        let sourceTags = ColorTags(source: parameters, assumingHeight: Int(parameters.height))
        // One decode feeds every output, so a ladder's renditions are tone-mapped alike (`Renditions` holds them to
        // the document's `video.color.hdr`).
        // From a reader of its own, from the file's start, whatever this one will read (a resumed transcode's seeks):
        // every attempt maps alike. A failure fails the transcode rather than map with another peak.
        let firstPicture = { () throws(MediaError) -> Frame? in
            try MediaReader(path: reader.path, cancellation: reader.cancellation).firstPicture(track: track.index, maxPixels: maxPixels)
        }
        var toneMapping = try ToneMapping(source: sourceTags, stream: stream, settings: base.color, firstPicture: firstPicture)
        let sourceColors = toneMapping == nil ? sourceTags : ToneMapping.output
        let toneMapped = toneMapping != nil
        var encodings: [VideoEncoding]
        var grid: KeyFrameGrid?
        if settings.container.isSegmented {
            let rungs = try Self.ladder(track: track, stream: stream, settings: settings, base: base, toneMapped: toneMapped)
            encodings = rungs.map(\.encoding)
            grid = KeyFrameGrid(interval: try Self.keyFrameSeconds(of: rungs),
                                segmentDuration: settings.segmentDuration ?? TranscodeSettings.defaultSegmentDuration)
            // Each rendition encodes on its own thread already: x264's frame threads for all of them together come
            // to what one encoder would take (1.5 a core), shared by picture size (the largest rung sets the pace),
            // at least one each. Fewer threads also hold fewer frames.
            let total = Double(ProcessInfo.processInfo.activeProcessorCount) * 1.5
            let pixels = encodings.map { Double($0.width * $0.height) }
            for index in encodings.indices {
                encodings[index].keyFramesForcedOnly = true
                let share = total * pixels[index] / max(1, pixels.reduce(0, +))
                encodings[index].threads = Int32(min(Double(FFmpeg.maxThreads), max(1, share.rounded())))
            }
        } else {
            encodings = [try VideoEncoding.resolve(track: track, stream: stream, settings: base, filters: settings.filters, toneMapped: toneMapped)]
            try encodings[0].checkFitsALevel()
            if case .video(let segmentSeconds) = pass {
                // Checkpoint segments start with an IDR on their grid; x264 places its other key frames as usual.
                grid = KeyFrameGrid(interval: segmentSeconds, segmentDuration: segmentSeconds)
                encodings[0].forcedKeyFramesAreIDR = true
            }
        }
        var names: [String] = []
        for encoding in encodings {
            var name = "\(encoding.height)p"
            var copy = 2
            while names.contains(name) {
                name = "\(encoding.height)p-\(copy)"
                copy += 1
            }
            names.append(name)
            let input = try output.addInput(video: encoding, name: name)
            let resumeAfter = output.resumeVideo()
            resuming = resumeAfter != nil
            let side = VideoEncodeSide(encoding: encoding, sourceColors: sourceColors, input: input,
                                       timeline: output.timeline, keyFrames: grid, resumeAfter: resumeAfter,
                                       holdsFirstPictureFromZero: output.tracksStartAtZero)
            encodeSides.append(side)
        }
        var pictures = encodings
        if let thumbnails = settings.thumbnails, let directory {
            // JPEG has no HDR: a source whose video keeps it (`hdr: keep`) has its still pictures tone-mapped on
            // their own, as a tone-mapped video's are; shown as SDR, PQ's values came out grey and flat.
            var stillMapping: ToneMapping?
            if toneMapping == nil {
                stillMapping = try ToneMapping(source: sourceTags, stream: stream, settings: nil, firstPicture: firstPicture)
            }
            var thumbnail: VideoEncoding
            do {
                thumbnail = try VideoEncoding.resolve(track: track, stream: stream, settings: thumbnails.picture, filters: settings.filters,
                                                      toneMapped: toneMapped || stillMapping != nil)
            } catch {
                throw thumbnails.refusal(error)
            }
            thumbnail.colors = Self.jpegColors(thumbnail.colors)
            var poster = encodings[0]
            poster.colors = Self.jpegColors(poster.colors)
            stillMapping?.prescale = ToneMapping.prescale(source: (Int(parameters.width), Int(parameters.height)),
                                                          pictures: [thumbnail, poster], filters: settings.filters)
            // The stills' pictures come after the user's filters (a crop included, which `prescale` then leaves
            // alone): an odd one loses its last line or column (not a black one added), and its values were cropped
            // before the mapping, which the video's own mapping avoids; nothing to see in a thumbnail.
            thumbnailer = try Thumbnailer(settings: thumbnails, root: directory, timeline: output.timeline,
                                          sourceColors: stillMapping == nil ? sourceColors : ToneMapping.output,
                                          toneMapping: stillMapping, thumbnail: thumbnail, poster: poster,
                                          expectedDuration: expectedDuration)
            pictures.append(thumbnail)
        }
        toneMapping?.prescale = ToneMapping.prescale(source: (Int(parameters.width), Int(parameters.height)), pictures: pictures,
                                                     filters: settings.filters)
        // A side of 1 is padded too: cropped to even it was 0, and the job failed (`filter_failed`).
        toneMapping?.padsToEven = (crop != nil && (parameters.width % 2 == 1 || parameters.height % 2 == 1))
            || parameters.width < 2 || parameters.height < 2
        workers = encodeSides.indices.map { EncodeWorker(name: "encode-\(names[$0])") }
        if thumbnailer != nil { workers.append(EncodeWorker(name: "thumbnails")) }
        let queues = workers.map(\.queue)
        let orientation = PictureOrientation(rotation: track.rotation ?? 0, mirrored: track.mirrored == true,
                                             sampleAspect: track.sampleAspectValue)
        // The watermark goes in a corner of what every output shows (the poster and thumbnails included).
        let kept = (x: pictures.map(\.keptShare.x).min() ?? 1, y: pictures.map(\.keptShare.y).min() ?? 1)
        video = try VideoSource(track: track.index, stream: stream, filters: settings.filters, timeline: output.timeline,
                                toneMapping: toneMapping, orientation: orientation, kept: kept, colors: sourceTags) { (frame, timeBase) throws(MediaError) in
            for queue in queues { try queue.push(frame, timeBase: timeBase) }
        }
    }

    /// JPEG's colours: BT.601 matrix in full range (JFIF), whatever the video is tagged.
    private static func jpegColors(_ tags: ColorTags) -> ColorTags {
        var colors = tags
        colors.matrix = AVCOL_SPC_BT470BG
        colors.range = AVCOL_RANGE_JPEG
        return colors
    }

    /// The encodings of a ladder's renditions, largest first as listed (or derived from the source for `auto`), each
    /// with its settings.
    private static func ladder(track: Track, stream: UnsafeMutablePointer<AVStream>, settings: TranscodeSettings,
                               base: VideoSettings, toneMapped: Bool) throws(MediaError) -> [(settings: VideoSettings, encoding: VideoEncoding)] {
        func resolve(_ rung: VideoSettings) throws(MediaError) -> VideoEncoding {
            let encoding = try VideoEncoding.resolve(track: track, stream: stream, settings: rung, filters: settings.filters, toneMapped: toneMapped)
            try encoding.checkFitsALevel()
            return encoding
        }
        var rungs: [VideoSettings]
        switch settings.renditions ?? .auto {
        case .list(let list):
            rungs = list
        case .auto:
            // The display size (cropped, upright, square pixels), within the box of the document's (or its
            // preset's) width and height, decides which of the table's rungs fit: "480p" with a ladder made one up
            // to 1080 lines, the box dropped.
            var measuring = base
            measuring.allowUpscaling = false
            measuring.scalingMode = .fit
            measuring.level = nil // the rungs are held to it, not the source's own size
            if base.width == nil && base.height == nil {
                // In the largest output's box: a source shown wider than it (2× anamorphic at 4608, 9216 on
                // screen) failed as too large a picture, though no rung is.
                (measuring.width, measuring.height) = (VideoSettings.maxDimension, VideoSettings.maxDimension)
            }
            let display = try VideoEncoding.resolve(track: track, stream: stream, settings: measuring, filters: settings.filters)
            let landscape = display.width >= display.height
            var unsized = base
            unsized.width = nil
            unsized.height = nil
            unsized.allowUpscaling = false
            func rendition(lines: Int) -> VideoSettings {
                var rendition = unsized
                if landscape { rendition.height = lines } else { rendition.width = lines }
                return rendition
            }
            var lines = min(display.width, display.height)
            if let level = base.level {
                // The table's rungs the level cannot hold are left out, as those larger than the source are: the
                // 1080-line rung of a 1080p source at level 3.1, which nobody asked for, failed the job. Below the
                // smallest, one rung a line smaller, which fails with the level's reason if it too is too large.
                for rung in Renditions.appleTable where rung.lines <= lines {
                    var free = rendition(lines: rung.lines)
                    free.level = nil
                    let encoding = try resolve(free)
                    if H264Level.problem(level: level, width: encoding.width, height: encoding.height,
                                         frameRate: av_q2d(encoding.frameRate)) == nil { break }
                    lines = rung.lines - 1
                }
            }
            rungs = Renditions.automatic(sourceLines: lines).map { rung in
                var settings = rendition(lines: rung.lines)
                settings.averageBitRate = rung.bitRate
                return settings
            }
        }
        var encodings: [(VideoSettings, VideoEncoding)] = []
        for (index, rung) in rungs.enumerated() {
            do throws(MediaError) {
                encodings.append((rung, try resolve(rung)))
            } catch where error.code == "invalid_settings" && error.message.hasPrefix("video.") {
                // The rung's key, as its settings are named: there is no `video.level` in a ladder of listed rungs.
                guard case .list = settings.renditions ?? .auto else { throw error }
                throw MediaError(code: error.code, message: "renditions[\(index)]." + error.message)
            }
        }
        return encodings
    }

    /// Seconds between a ladder's key frames, shared by every rendition (`KeyFrameGrid`): those the renditions that
    /// ask an interval ask, which must be the same instants, else the first rendition's default (two seconds of
    /// its pictures). A rendition that asks none takes the grid: a rung at 30 fps (60 pictures, 2.000 s) beside one
    /// at 59.94 (120 pictures, 2.002 s) failed the job for an interval nobody gave.
    private static func keyFrameSeconds(of rungs: [(settings: VideoSettings, encoding: VideoEncoding)]) throws(MediaError) -> Double {
        let asking = rungs.enumerated().filter { $0.element.settings.maxKeyFrameInterval != nil }
        guard let first = asking.first else { return rungs[0].encoding.keyFrameSeconds }
        let interval = first.element.encoding.keyFrameSeconds
        for (index, rung) in asking where abs(rung.encoding.keyFrameSeconds - interval) > 0.001 {
            throw MediaError(code: "invalid_settings", message: String(
                format: "renditions[%d].video.maxKeyFrameInterval: every rendition needs key frames at the same instants; %.3f s here, %.3f s in renditions[%d].",
                index, rung.encoding.keyFrameSeconds, interval, first.offset))
        }
        return interval
    }

    /// Bytes a decoded pixel of the stream's format takes (4 when the format is unknown, the worst common case).
    private static func bytesPerPixel(_ stream: UnsafeMutablePointer<AVStream>) -> Double {
        let format = AVPixelFormat(rawValue: stream.pointee.codecpar.pointee.format)
        guard let descriptor = av_pix_fmt_desc_get(format) else { return 4 }
        return Double(av_get_bits_per_pixel(descriptor)) / 8
    }

    /// Never past the file's declared end: a fragmented MP4's stream "duration" is an end on its clock
    /// (`InputContainer.declaredEnd(ofStream:)`), and added to a late start it sized the job twice as long, or on a
    /// live recording's clock 54 years (progress stood at 0, thumbnails by count were refused).
    private static func endTime(of stream: UnsafeMutablePointer<AVStream>, reader: MediaReader) -> Double {
        reader.container.declaredEnd(ofStream: Int(stream.pointee.index)) ?? reader.declaredEnd ?? reader.startTime
    }

    /// Starts the encode threads; call once the output has started writing.
    func start() {
        var consumers: [any FrameConsumer] = encodeSides
        if let thumbnailer { consumers.append(thumbnailer) }
        for (worker, consumer) in zip(workers, consumers) { worker.start(consumer) }
    }

    /// Video frames the (first) encoder has encoded so far; any thread may ask.
    var framesEncoded: Int { encodeSides.first?.input.framesEncoded ?? 0 }

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

    /// Says the input is read from its start (a resumed pass whose reader was not moved): nothing can have been
    /// skipped, so no encoder checks where its first frame comes. Before `run`.
    func readsFromTheStart() {
        for side in encodeSides { side.acceptAnyFirstFrame() }
    }

    /// Drains the filters and the audio at the end of the input, lets every encode thread drain and finish, and
    /// rethrows the first error one of them met.
    func finish() throws(MediaError) {
        do throws(MediaError) {
            try video?.finish()
        } catch {
            abandon()
            throw error
        }
        for worker in workers { worker.queue.close() }
        var failure: MediaError?
        for worker in workers {
            do throws(MediaError) { try worker.join() } catch { failure = failure ?? error }
        }
        if let failure { throw failure }
        try audio?.finish()
        if video != nil, framesEncoded == 0, !resuming {
            throw MediaError(code: "no_decodable_video", message: "The input's video track has no frame that could be decoded.")
        }
        if let audio, audio.samplesWritten == 0 {
            throw MediaError(code: "no_decodable_audio", message: "The input's audio track has no sample that could be decoded.")
        }
    }

    /// Feeds every sample of `reader` through the plan and drains it at the end; on any failure (or cancellation)
    /// the encode threads are stopped first. After each sample: the read limit is checked against what `output` has
    /// written (times `pace`, the seconds of input per second of output), progress is reported, and, every 64
    /// samples, `interruption` may end the run with its error (another part of the transcode failed).
    func run(reader: MediaReader, output: any TranscodeOutput, cancellation: CancellationToken, limits: MediaLimits,
             pace: Double, reporter: ProgressReporter, progress: (TranscodeProgress) -> Void,
             interruption: () -> MediaError? = { nil }) throws(MediaError) {
        start()
        do throws(MediaError) {
            var samples = 0
            while let sample = try reader.nextSample() {
                if cancellation.isCanceled { throw MediaError.canceled }
                try handle(sample)
                let written = output.writtenSeconds
                try limits.checkRead(seconds: written * pace)
                reporter.update(written, frames: framesEncoded, call: progress)
                samples += 1
                if samples % 64 == 0, let failure = interruption() { throw failure }
            }
            if cancellation.isCanceled { throw MediaError.canceled }
            try finish()
            // What the encoders' drain wrote: the time the finish starts from (throttled away, it is still kept).
            reporter.update(output.writtenSeconds, frames: framesEncoded, call: progress)
        } catch {
            abandon()
            throw error
        }
    }

    /// Stops the encode threads without finishing (an error or a cancellation) and waits for them.
    func abandon() {
        for worker in workers { worker.abandon() }
    }
}

/// Decoded audio → (filters) → resampler and FIFO → AAC input, on the source's timeline: holes in the source's
/// audio become silence, overlaps are dropped, drift is absorbed (see `AudioConverter`). Runs on the decoding thread.
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
    /// Sample rate, format and channel count the current graph was built for, and the channel layout.
    private var filterInput: (rate: Int32, format: Int32, channels: Int32)?
    private var filterLayout: ChannelLayout?
    /// The sample rate the stream was opened with, and the last frame's stamp (source time base) and length.
    private let declaredRate: Int32
    private var previous: (source: Int64, samples: Int32)?
    /// Whether the latest frame's stamp was taken for made up, and it followed on instead.
    private var followingOn = false
    /// Where the graph's output starts on the output timeline (1/sampleRate units); set by the first frame.
    private var filterStart: Int64?
    /// Whether the graph's first output has been placed at `filterStart`.
    private var filterOutputPlaced = false
    /// Loudness normalisation, after the mix, when asked: its chain (`FilterSettings.loudnessChain`) and a second
    /// converter that cuts what it gives into the encoder's frames again; its graph, made for the converter's first
    /// frame.
    private let normalisation: (chain: String, reframer: AudioConverter)?
    private var loudness: FilterGraph?
    /// Where the mixed audio starts on the output timeline (1/sampleRate units): the normalised audio's first frame
    /// is placed there, the rest follow on.
    private var loudnessStart: Int64?
    private var loudnessOutputPlaced = false

    init(track: Track, timeBase: AVRational, encoding: AudioEncoding, filters: FilterSettings?, limits: MediaLimits,
         output: any TranscodeOutput) throws(MediaError) {
        self.track = track.index
        declaredRate = Int32(clamping: track.sampleRate ?? 0)
        sourceTimeBase = timeBase
        timeline = output.timeline
        filterSettings = filters
        self.limits = limits
        input = try output.addInput(audio: encoding)
        converter = try AudioConverter(encoding: encoding, frameSize: input.encoder.frameSize, fillsFromZero: output.tracksStartAtZero)
        if let chain = filters?.loudnessChain {
            normalisation = (chain, try AudioConverter(encoding: encoding, frameSize: input.encoder.frameSize, fillsFromZero: output.tracksStartAtZero))
        } else {
            normalisation = nil
        }
    }
    func append(_ frame: Frame) throws(MediaError) {
        let value = frame.pointer.pointee
        var source = value.best_effort_timestamp != FFmpeg.noPTS ? value.best_effort_timestamp : value.pts
        if isGuessedAtAnotherRate(source, value) { source = FFmpeg.noPTS }
        let timestamp = source == FFmpeg.noPTS ? nil : timeline.convert(source, from: sourceTimeBase, to: input.encoder.timeBase)
        if let timestamp {
            // A clock that leaps far ahead would otherwise be filled with hours of silence.
            try limits.checkRead(seconds: Double(timestamp) / Double(input.encoder.timeBase.den) * Double(input.encoder.timeBase.num))
        }
        guard let chain = filterSettings?.audioChain(sampleRate: Int(value.sample_rate)) else {
            return try converter.push(frame, at: timestamp, emit: mixed)
        }
        let shape = (value.sample_rate, value.format, value.ch_layout.nb_channels)
        if let built = filterInput, built != shape || filterLayout?.matches(value.ch_layout) != true {
            // A graph takes one input format: drain this one and build the next.
            try finishFilters()
            filters = nil
        }
        if filters == nil {
            // Before a graph is built at the rate (the converter checks it for frames without filters).
            try MediaLimits.check(sampleRate: Int(value.sample_rate))
            // The graph's first filter keeps the audio on its timestamps (in 1/sample rate), as the converter would.
            let sync = AudioConverter.Sync.filter(hardLimit: converter.hardLimit)
            filters = try FilterGraph(audio: value, chain: sync + "," + chain)
            filterInput = shape
            filterLayout = try ChannelLayout(copying: value.ch_layout)
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
        try filters?.drain(place)
    }

    /// Whether `source`, the stamp of a frame at another rate than the stream declared, is one the demuxer made
    /// up: frames that carry no time of their own (all of raw AAC's, all but a transport stream packet's first) are
    /// stamped one after another by the rate the stream was opened with, so after a change of rate (recordings
    /// joined, a broadcast switching from 48 to 22.05 kHz) frames of 46 ms came 21 ms apart, taken for overlaps and
    /// cut every few frames, silence filled in behind. Such a frame follows on from the one before instead.
    /// Once stamps are taken for made up, so are those that go on from them at the opening rate again (raw AAC
    /// back at 48 kHz after a part at 22.05 kHz lags by all the second part's error, and its start was dropped):
    /// until a stamp of the frame's own breaks the chain.
    private func isGuessedAtAnotherRate(_ source: Int64, _ value: AVFrame) -> Bool {
        defer { previous = source == FFmpeg.noPTS ? nil : (source, value.nb_samples) }
        guard declaredRate > 0, source != FFmpeg.noPTS, let previous else {
            followingOn = false
            return false
        }
        let made = previous.source + av_rescale_q(Int64(previous.samples), AVRational(num: 1, den: declaredRate), sourceTimeBase)
        followingOn = abs(source - made) <= 1 && (followingOn || value.sample_rate != declaredRate)
        return followingOn
    }

    func finish() throws(MediaError) {
        try finishFilters()
        try converter.finish(emit: mixed)
        try loudness?.finish(placeNormalised)
        try normalisation?.reframer.finish(emit: encode)
    }

    private func finishFilters() throws(MediaError) {
        try filters?.finish(place)
    }

    /// Takes one frame out of the graph: only the first is placed; the rest follow on, as the graph's output has
    /// no holes.
    private func place(_ filtered: Frame) throws(MediaError) {
        let timestamp = filterOutputPlaced ? nil : filterStart
        filterOutputPlaced = true
        try converter.push(filtered, at: timestamp, emit: mixed)
    }

    /// Takes a frame of the mixed audio: to the encoder, or through the loudness normalisation first.
    private func mixed(_ frame: Frame) throws(MediaError) {
        guard let normalisation else { return try encode(frame) }
        if loudness == nil {
            loudness = try FilterGraph(audio: frame.pointer.pointee, chain: normalisation.chain)
            loudnessStart = frame.pointer.pointee.pts
        }
        try loudness?.push(frame)
        try loudness?.drain(placeNormalised)
    }

    /// Takes one frame of the normalised audio (at the normalisation's own rate): the first is placed where the
    /// mixed audio starts, the rest follow on, as the graph's output has no holes.
    private func placeNormalised(_ normalised: Frame) throws(MediaError) {
        guard let normalisation else { return }
        let timestamp = loudnessOutputPlaced ? nil : loudnessStart
        loudnessOutputPlaced = true
        try normalisation.reframer.push(normalised, at: timestamp, emit: encode)
    }

    private func encode(_ frame: Frame) throws(MediaError) {
        samplesWritten += frame.sampleCount
        try input.append(frame)
    }
}
