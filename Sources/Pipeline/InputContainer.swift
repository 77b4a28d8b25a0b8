import CFFmpeg
import Glibc

/// Owns an input `AVFormatContext` opened for reading; closed with `avformat_close_input`.
///
/// Untrusted media is opened with FFmpeg restricted to the `file` protocol and to a whitelist of demuxers,
/// so a playlist (HLS, concat, DASH) or a file naming URLs can never make FFmpeg open anything else.
final class InputContainer {
    /// Demuxers an upload may use; playlists (`hls`, `concat`, `dash`) are absent on purpose.
    static let allowedDemuxers = [
        "mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska", "webm", "avi", "mpegts", "flv", "mpeg", "wav",
        "mp3", "aac", "ogg", "flac", "png_pipe", "jpeg_pipe",
    ]

    private(set) var context: UnsafeMutablePointer<AVFormatContext>?
    let path: String
    /// Kept alive as long as the context, whose interrupt callback asks it.
    private let cancellation: CancellationToken?

    /// Opens `path`. With a `cancellation` token, FFmpeg's blocking calls (opening, probing, reading) ask it through
    /// the interrupt callback and give up once it fires.
    init(path: String, cancellation: CancellationToken? = nil) throws(MediaError) {
        self.path = path
        self.cancellation = cancellation
        let options = OptionDictionary([
            ("protocol_whitelist", "file"),
            ("format_whitelist", Self.allowedDemuxers.joined(separator: ",")),
        ])
        var context: UnsafeMutablePointer<AVFormatContext>? = avformat_alloc_context()
        guard context != nil else { throw MediaError(code: "out_of_memory", message: "Allocating the input failed.") }
        if let cancellation {
            context?.pointee.interrupt_callback.opaque = Unmanaged.passUnretained(cancellation).toOpaque()
            context?.pointee.interrupt_callback.callback = { opaque in
                guard let opaque else { return 0 }
                return Unmanaged<CancellationToken>.fromOpaque(opaque).takeUnretainedValue().isCanceled ? 1 : 0
            }
        }
        // "file:" keeps a name such as "a:b.mp4" from being taken as a protocol.
        let result = avformat_open_input(&context, "file:" + path, nil, &options.pointer)
        if result < 0, cancellation?.isCanceled == true { throw MediaError.canceled }
        if result < 0 {
            // avformat_open_input frees the context on failure.
            if result == tc_averror(ENOENT) {
                throw MediaError(code: "input_not_found", message: "The input file \(path) does not exist.", averror: result)
            }
            // Not the file's content: told apart from "not media", which would send its owner looking at the file.
            if result == tc_averror(EACCES) || result == tc_averror(EPERM) || result == tc_averror(EISDIR) {
                let reason = result == tc_averror(EISDIR) ? "is a folder, not a file" : "cannot be read (\(FFmpeg.errorText(result)))"
                throw MediaError(code: "input_unreadable", message: "The input \(path) \(reason).", averror: result)
            }
            // A format FFmpeg knows but the list leaves out (MXF, ASF, AIFF, …) is refused by name: "not a media
            // file" sent its owner looking for a broken file.
            if result == tc_averror(EINVAL), let format = Self.probedFormat(of: path) {
                throw MediaError(code: "unsupported_format",
                                 message: "The input is \(format), which is not an accepted container; accepted: MP4, QuickTime, 3GP, "
                                     + "Matroska, WebM, AVI, MPEG-TS, MPEG-PS, FLV, Ogg, WAV, MP3, AAC, FLAC, PNG and JPEG.",
                                 averror: result)
            }
            throw MediaError(
                code: "unsupported_format",
                message: "The input is not a media file we can read (\(FFmpeg.errorText(result))).",
                averror: result)
        }
        self.context = context
        guard let name = context?.pointee.iformat?.pointee.name.map({ String(cString: $0) }),
              name.split(separator: ",").contains(where: { Self.allowedDemuxers.contains(String($0)) })
        else {
            close()
            throw MediaError(code: "unsupported_format", message: "The input's container format is not accepted.")
        }
        let info = avformat_find_stream_info(context, nil)
        if info < 0 {
            close()
            if cancellation?.isCanceled == true { throw MediaError.canceled }
            throw MediaError.ffmpeg(info, "Reading the input's stream information", code: "unreadable_input")
        }
    }

    /// The format FFmpeg sees in the file's first MiB ("MXF (Material eXchange Format)"), nil when it sees none: the
    /// bytes are only compared with each format's signature, no demuxer opens them. A regular file only: a named
    /// pipe opened again would wait for a writer for ever, or give the bytes after those FFmpeg read.
    private static func probedFormat(of path: String) -> String? {
        var status = stat()
        guard stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        let size = 1 << 20, padding = Int(AVPROBE_PADDING_SIZE)
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: size + padding)
        defer { buffer.deallocate() }
        buffer.initialize(repeating: 0, count: size + padding)
        let count = fread(buffer, 1, size, file)
        guard count > 0 else { return nil }
        return "".withCString { name -> String? in
            var probe = AVProbeData()
            probe.buf = buffer
            probe.buf_size = Int32(count)
            probe.filename = name
            var score: Int32 = 0
            guard let format = av_probe_input_format3(&probe, 1, &score), score >= AVPROBE_SCORE_MAX / 4,
                  let short = format.pointee.name else { return nil }
            let long = format.pointee.long_name.map { String(cString: $0) }
            return long.map { "\($0) (\(String(cString: short)))" } ?? String(cString: short)
        }
    }

    var formatName: String {
        context?.pointee.iformat?.pointee.name.map { String(cString: $0) } ?? "unknown"
    }

    /// Whether the format's clock may jump (MPEG-TS, MPEG-PS, FLV: `AVFMT_TS_DISCONT`).
    var allowsTimestampJumps: Bool {
        guard let flags = context?.pointee.iformat?.pointee.flags else { return false }
        return flags & AVFMT_TS_DISCONT != 0
    }

    /// Whether the declared duration is a guess from the first and last timestamps of a clock that may jump
    /// (MPEG-TS, MPEG-PS, FLV) that the file's size cannot hold: a jump back of minutes (recordings joined, a
    /// broadcast's clock reset) reads as a wrap of 2^33 ticks, 26 hours, a jump forward as its length. Fewer than 16
    /// kb a second with video, 2 kb without (below any real stream), is taken for such a guess: not a length a limit
    /// can judge. A real long file is judged as any other.
    var durationIsImplausible: Bool {
        guard allowsTimestampJumps, let context, context.pointee.duration_estimation_method == AVFMT_DURATION_FROM_PTS,
              let duration, duration > 0, let pb = context.pointee.pb else { return false }
        let bytes = avio_size(pb)
        guard bytes > 0 else { return false }
        let hasVideo = (0..<streamCount).contains { stream($0).pointee.codecpar.pointee.codec_type == AVMEDIA_TYPE_VIDEO }
        return Double(bytes) * 8 / duration < (hasVideo ? 16_000 : 2_000)
    }

    /// Whether the declared duration is FFmpeg's estimate from the file's size and the bit rate of its first few
    /// seconds (raw ADTS AAC, an MP3 without a Xing header): a quiet start makes it hours long (a 570 s AAC whose
    /// first 30 s were silent "lasted 26670 s"), a loud one too short. Not a length a limit can judge, nor one to
    /// report for a file this process wrote (it knows how long that is).
    var durationIsEstimatedFromBitRate: Bool {
        context?.pointee.duration_estimation_method == AVFMT_DURATION_FROM_BITRATE
    }

    var streamCount: Int { Int(context?.pointee.nb_streams ?? 0) }

    func stream(_ index: Int) -> UnsafeMutablePointer<AVStream> {
        precondition(index >= 0 && index < streamCount, "stream index out of range")
        return context!.pointee.streams[index]!
    }

    /// Where the file's media ends on its own clock, in seconds, as its header, index or timestamps declare; nil when
    /// unknown.
    ///
    /// FFmpeg's container duration means one of two things. Estimated from the first and last timestamps (MPEG-TS,
    /// MPEG-PS: a clock that starts anywhere), it is the length from the first timestamp. Read from a header (MP4's
    /// movie duration, Matroska's segment duration), it is the end of a timeline that starts at zero: a Matroska file
    /// whose timestamps start at 9,000,000,000 s and last 8 s declares 9,000,000,008 s, and an MP4 starting at 5 s
    /// with an empty edit declares 13. A header duration shorter than the start cannot be such an end, and is taken
    /// as a length.
    var declaredEnd: Double? {
        guard let context, context.pointee.duration > 0 else { return nil }
        let duration = FFmpeg.seconds(context.pointee.duration, FFmpeg.timeBaseQ)
        if context.pointee.duration_estimation_method == AVFMT_DURATION_FROM_PTS || duration < startTime {
            return startTime + duration
        }
        return duration
    }

    /// How long the media lasts as declared, in seconds: from the first timestamp to `declaredEnd`; nil when unknown.
    var duration: Double? { declaredEnd.map { max(0, $0 - startTime) } }

    /// Where stream `index` ends on the file's clock as it declares, in seconds, never past `declaredEnd`; nil when
    /// it declares no duration. A fragmented MP4's stream "duration" is where its last fragment ends on the file's
    /// clock, not a length: added to a start of 12 s (an init segment joined with segments from the middle, as stream
    /// downloaders save them) it declared twice the end, and the file was refused as cut short; on a live
    /// recording's clock (decode times from 1970) it declared 54 years.
    func declaredEnd(ofStream index: Int) -> Double? {
        let stream = stream(index).pointee
        guard stream.duration > 0 else { return nil }
        let start = declaredStart(ofStream: index)
        let end = start + FFmpeg.seconds(stream.duration, stream.time_base)
        return declaredEnd.map { min(end, max($0, start)) } ?? end
    }

    /// Where stream `index` starts on the file's clock, in seconds: its own start, else the file's.
    func declaredStart(ofStream index: Int) -> Double {
        let stream = stream(index).pointee
        return stream.start_time != FFmpeg.noPTS ? FFmpeg.seconds(stream.start_time, stream.time_base) : startTime
    }

    /// Whether stream `index`'s start and duration are the file's, which FFmpeg gives a stream it saw no packet of
    /// while probing (one that starts late, or carries none): they say nothing of the stream itself.
    func hasFileTiming(_ index: Int) -> Bool {
        guard let context, context.pointee.duration > 0, context.pointee.start_time != FFmpeg.noPTS else { return false }
        let stream = self.stream(index).pointee
        let tick = FFmpeg.seconds(1, stream.time_base)
        return abs(FFmpeg.seconds(stream.start_time, stream.time_base) - startTime) <= tick
            && abs(FFmpeg.seconds(stream.duration, stream.time_base) - FFmpeg.seconds(context.pointee.duration, FFmpeg.timeBaseQ)) <= tick
    }

    /// Container start time in seconds (0 when unknown).
    var startTime: Double {
        guard let context, context.pointee.start_time != FFmpeg.noPTS else { return 0 }
        return FFmpeg.seconds(context.pointee.start_time, FFmpeg.timeBaseQ)
    }

    /// Whether the duration comes from an index or timestamps rather than a guess from the bit rate.
    var durationIsDeclared: Bool {
        guard let context else { return false }
        return context.pointee.duration_estimation_method != AVFMT_DURATION_FROM_BITRATE
    }

    /// Reads the next packet into `packet`; false at the end of the input.
    ///
    /// A read error other than end of file also ends the input: what was read is kept, and the caller compares it
    /// with the declared duration to tell a cut-short file from a complete one. The error is kept in `readFailure`.
    func read(into packet: Packet) -> Bool {
        while true {
            let result = av_read_frame(context, packet.pointer)
            if result == FFmpeg.again { continue }
            if result < 0 { readFailure = result }
            return result >= 0
        }
    }

    /// The error that ended reading (FFmpeg's), or 0.
    private(set) var readFailure: Int32 = 0

    /// The largest sample any stream's index states, in bytes, when it is larger than the whole file: an index
    /// damaged so (an MP4 `stsz` entry of a gigabyte) has the demuxer ask for that much memory, and fail.
    var impossibleSample: (bytes: Int64, fileBytes: Int64)? {
        guard let context, let pb = context.pointee.pb else { return nil }
        let fileBytes = avio_size(pb)
        guard fileBytes > 0 else { return nil }
        var largest: Int64 = 0
        for index in 0..<streamCount {
            let stream = self.stream(index)
            for entry in 0..<avformat_index_get_entries_count(stream) {
                // A 30-bit field, signed in C: a size past 2^29 reads negative; its 30 bits are the size.
                if let item = avformat_index_get_entry(stream, entry) { largest = max(largest, Int64(item.pointee.size) & 0x3FFF_FFFF) }
            }
        }
        return largest > fileBytes ? (largest, fileBytes) : nil
    }

    /// How far into the file reading has got, in bytes.
    var bytesRead: Int64 {
        guard let pb = context?.pointee.pb else { return 0 }
        return avio_tell(pb)
    }

    func close() {
        avformat_close_input(&context)
    }

    deinit { close() }
}

extension InputContainer {
    /// Describes stream `index` as a `Track`.
    func track(_ index: Int) -> Track {
        let stream = stream(index)
        let parameters = stream.pointee.codecpar!.pointee
        let mediaType: Track.MediaType
        switch parameters.codec_type {
        case AVMEDIA_TYPE_VIDEO: mediaType = .video
        case AVMEDIA_TYPE_AUDIO: mediaType = .audio
        case AVMEDIA_TYPE_SUBTITLE: mediaType = .subtitle
        case AVMEDIA_TYPE_DATA: mediaType = .data
        case AVMEDIA_TYPE_ATTACHMENT: mediaType = .attachment
        default: mediaType = .unknown
        }
        var track = Track(index: index, mediaType: mediaType, codec: String(cString: avcodec_get_name(parameters.codec_id)))
        if let profile = avcodec_profile_name(parameters.codec_id, parameters.profile) {
            track.profile = String(cString: profile)
        }
        if let end = declaredEnd(ofStream: index) {
            track.duration = end - declaredStart(ofStream: index)
        } else {
            track.duration = duration
        }
        if parameters.bit_rate > 0 { track.bitRate = Int(parameters.bit_rate) }
        switch mediaType {
        case .video:
            track.width = Int(parameters.width)
            track.height = Int(parameters.height)
            let sar = av_guess_sample_aspect_ratio(context, stream, nil)
            track.sampleAspectRatio = FFmpeg.isValid(sar) ? "\(sar.num):\(sar.den)" : "1:1"
            let display = Self.displayTransform(stream)
            track.rotation = display.rotation
            if display.mirrored { track.mirrored = true }
            if stream.pointee.disposition & AV_DISPOSITION_ATTACHED_PIC != 0 {
                track.coverArt = true // one picture: its "frame rate" is the container's clock
            } else {
                let rate = av_guess_frame_rate(context, stream, nil)
                if FFmpeg.isValid(rate) { track.frameRate = av_q2d(rate) }
            }
            track.hdr = ColorTags.videoRange(parameters.color_trc)
            track.dolbyVisionProfile = DolbyVision(stream: stream)?.profile
            if let name = av_get_pix_fmt_name(AVPixelFormat(rawValue: parameters.format)) {
                track.pixelFormat = String(cString: name)
            }
        case .audio:
            track.sampleRate = Int(parameters.sample_rate)
            track.channels = Int(parameters.ch_layout.nb_channels)
            var layout = parameters.ch_layout
            var buffer = [CChar](repeating: 0, count: 64)
            if av_channel_layout_describe(&layout, &buffer, buffer.count) > 0 {
                track.channelLayout = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            }
        default:
            break
        }
        return track
    }

    /// The display matrix's rotation as a clockwise multiple of 90 degrees, and whether the picture is mirrored
    /// left to right before it. A matrix that turns by anything else (45°) is not turned at all (ffmpeg warns of an
    /// "odd rotation angle" and turns the picture within its own frame, keeping its size): snapped to the nearest
    /// quarter turn, a 4:3 picture came out standing on its side.
    static func displayTransform(_ stream: UnsafeMutablePointer<AVStream>) -> (rotation: Int, mirrored: Bool) {
        var mirrored: Int32 = 0
        let counterClockwise = tc_stream_display_transform(stream, &mirrored)
        let turns = -counterClockwise / 90
        guard turns.isFinite, abs(turns - turns.rounded()) * 90 <= 1 else { return (0, mirrored != 0) }
        let quarterTurns = Int(turns.rounded())
        return (((quarterTurns % 4) + 4) % 4 * 90, mirrored != 0)
    }
}
