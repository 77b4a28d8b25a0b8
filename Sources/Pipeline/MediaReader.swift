import Foundation
import CFFmpeg

/// Reads a media file's samples, in the manner of `AVAssetReader`: open a file, look at its tracks, add an output
/// for each track you want (decoded frames, or passthrough packets), then pull samples in decoding order.
///
/// Not thread-safe: use one reader from one thread.
public final class MediaReader {
    /// A sample pulled from the reader; valid until the next call to `nextSample()`.
    public enum Sample {
        /// A decoded video frame or block of audio samples.
        case frame(Frame, track: Int)
        /// A compressed packet from a passthrough output.
        case packet(Packet, track: Int)
    }

    /// All tracks of the file, in container order.
    public let tracks: [Track]
    /// FFmpeg's name for the container, e.g. `mov,mp4,m4a,3gp,3g2,mj2`.
    public let formatName: String
    /// The file, as opened.
    let path: String
    /// What stops the reader's blocking reads, if anything.
    let cancellation: CancellationToken?

    let container: InputContainer
    private var decoders: [Int: StreamDecoder] = [:]
    private var passthrough: Set<Int> = []
    private var readEnd: [Int: Double] = [:]
    /// The earliest time read of each stream (seconds, the file's clock).
    private var readStart: [Int: Double] = [:]
    private let packet = Packet()
    private let frame = Frame()
    private var draining: StreamDecoder?
    private var mustResend = false
    private var reachedEnd = false
    /// The input ended and was checked complete; the decoders are freed.
    private var decodersReleased = false
    private var flushOrder: [StreamDecoder] = []
    /// Stitches jumps of formats whose clock may restart; refuses streams going back in the others.
    private var continuity: TimestampContinuity
    /// In a format whose clock may restart: the tracks whose jumps the stitching follows whether this reader reads
    /// them or not (`followClocks`).
    private var timelineStreams: Set<Int> = []
    /// What `carriesPackets` found, by track.
    private(set) var packetsFound: [Int: Bool] = [:]

    /// Opens a local file: only the `file` protocol and the whitelisted demuxers are allowed. With `cancellation`,
    /// blocking reads give up once it fires.
    public init(path: String, cancellation: CancellationToken? = nil) throws(MediaError) {
        self.path = path
        self.cancellation = cancellation
        container = try InputContainer(path: path, cancellation: cancellation)
        formatName = container.formatName
        var declared = [("starts", container.startTime), ("ends", container.declaredEnd ?? 0)]
        for index in 0..<container.streamCount {
            declared.append(("starts", container.declaredStart(ofStream: index)))
            if let end = container.declaredEnd(ofStream: index) { declared.append(("ends", end)) }
        }
        for (what, seconds) in declared where !seconds.isFinite || abs(seconds) > Timeline.limitSeconds {
            throw MediaError(code: "timestamps_invalid",
                             message: "The input says it \(what) at \(String(format: "%.0f", seconds)) s, past what any media holds: "
                                + "its timestamps are broken. Export the file again from its source.")
        }
        tracks = (0..<container.streamCount).map(container.track)
        continuity = TimestampContinuity(allowsDiscontinuities: container.allowsTimestampJumps,
                                         declaredEnd: container.durationIsDeclared ? container.declaredEnd : nil)
    }

    /// Has the stitching of a format whose clock may restart follow `tracks` (those a transcode keeps), read by this
    /// reader or not; before the first sample. A checkpointed transcode reads its audio with a reader of its own:
    /// following only what it read, that reader closed up an audio hole the video's reader kept, and the audio ran
    /// early from there on.
    func followClocks(of tracks: [Int]) {
        if container.allowsTimestampJumps { timelineStreams = Set(tracks) }
    }

    /// How long the media lasts as the file declares, in seconds (from its first timestamp), when it does.
    public var duration: Double? { container.duration }

    /// Where the media ends on the file's clock as declared, in seconds, when it is.
    public var declaredEnd: Double? { container.declaredEnd }

    /// Earliest presentation time in the file, in seconds.
    public var startTime: Double { container.startTime }

    /// The video track a transcode takes: a real picture sequence (cover art is skipped), the first marked default,
    /// else the first.
    public var mainVideoTrack: Track? { mainVideoTrack(copying: false) }

    /// The audio track a transcode takes: the first marked default, else the first (a commentary or a second
    /// language that comes first in the file is not what a player would play).
    public var mainAudioTrack: Track? { mainAudioTrack(copying: false) }

    /// The video track, to be decoded or (`copying`) copied as it is.
    public func mainVideoTrack(copying: Bool) -> Track? {
        mainTrack(of: .video, copying: copying) { $0.coverArt != true }
    }

    /// The audio track, to be decoded or (`copying`) copied as it is.
    public func mainAudioTrack(copying: Bool) -> Track? { mainTrack(of: .audio, copying: copying) }

    /// The first track of `type` (among those `eligible`) whose disposition says default, else the first; to be
    /// decoded, among those this FFmpeg can decode when there are any (a default track in a codec it does not know,
    /// AC-4 or MPEG-H, failed the job though a track it knows came next); copied, among those whose header gives
    /// their shape when there are any.
    /// An audio track the container says lasts no time is passed over (`declaresNoDuration`); one the probe found
    /// no channels for is taken only if it carries a packet (`carriesPackets`, asked only then; a video track without
    /// a size likewise): an MPEG-TS programme declares an audio stream that never comes (a recording whose sound was never
    /// sent), and taking it failed the job for want of decodable audio though the video was whole. (`ffmpeg` leaves
    /// out every audio track its probe found no channels for, which loses sound that merely starts late.)
    private func mainTrack(of type: Track.MediaType, copying: Bool, eligible: (Track) -> Bool = { _ in true }) -> Track? {
        var all = tracks.filter { $0.mediaType == type && eligible($0) }
        var preferred = all.filter { track in
            let parameters = container.stream(track.index).pointee.codecpar.pointee
            return copying ? hasShape(parameters) : isDecodable(parameters)
        }
        while true {
            let candidates = preferred.isEmpty ? all : preferred
            guard let chosen = candidates.first(where: { container.stream($0.index).pointee.disposition & AV_DISPOSITION_DEFAULT != 0 })
                    ?? candidates.first else { return nil }
            let stream = container.stream(chosen.index).pointee
            let parameters = stream.codecpar.pointee
            let passedOver = switch type {
            case .audio: Self.declaresNoDuration(stream) || (parameters.ch_layout.nb_channels == 0 && !carriesPackets(chosen.index))
            // A picture size the probe never learnt, or a Matroska track said to last no time, and no packet: a
            // programme's video that never comes (a radio recording in MPEG-TS). Taken, it failed the job ("has no
            // picture size") though the sound was whole.
            case .video: (parameters.width == 0 || parameters.height == 0 || Self.declaresNoDuration(stream)) && !carriesPackets(chosen.index)
            default: false
            }
            guard passedOver else { return chosen }
            all.removeAll { $0.index == chosen.index }
            preferred.removeAll { $0.index == chosen.index }
        }
    }

    /// Whether the container says the stream lasts no time at all: its duration 0 (an MP4 track of priming
    /// packets only), or its Matroska `DURATION` tag all zeros (a track muxed without one frame). Taken for its
    /// sound, such a track gave none, and the job failed with `no_decodable_audio` though its video was whole;
    /// `ffmpeg` writes the video alone.
    private static func declaresNoDuration(_ stream: AVStream) -> Bool {
        // A few packets at most: a demuxer that says 0 where it means "not known" would not have counted many.
        if stream.duration == 0, stream.nb_frames < 16 { return true }
        guard let tag = av_dict_get(stream.metadata, "DURATION", nil, 0), let value = tag.pointee.value else { return false }
        let text = String(cString: value)
        return text.contains(where: \.isNumber) && text.allSatisfy { $0 == "0" || $0 == ":" || $0 == "." }
    }

    /// Whether track `index` has a packet in the file: read from the start by a container of its own, every other
    /// stream discarded, for at most `scanLimit` bytes (past them it is taken to have some, as before the scan: a
    /// track without any then fails the job as it did). True when the file cannot be opened again (the transcode
    /// then says why). Asked only of the track chosen when the probe found no channels or size for it.
    private func carriesPackets(_ index: Int) -> Bool {
        if let known = packetsFound[index] { return known }
        var found = true
        if let scan = try? InputContainer(path: path, cancellation: cancellation) {
            for other in 0..<scan.streamCount where other != index { scan.stream(other).pointee.discard = AVDISCARD_ALL }
            let packet = Packet()
            found = false
            while !found, scan.read(into: packet) {
                found = packet.streamIndex == index || scan.bytesRead > Self.scanLimit
                packet.unref()
            }
        }
        packetsFound[index] = found
        return found
    }

    /// Bytes `carriesPackets` reads at most (seconds of disk time, once per reader of such a file).
    static let scanLimit: Int64 = 1 << 30

    /// Whether a decoder exists for the track and its header says enough to open it.
    private func isDecodable(_ parameters: AVCodecParameters) -> Bool {
        avcodec_find_decoder(parameters.codec_id) != nil && hasShape(parameters)
    }

    /// Whether the track's header gives its picture size, or its channels and rate.
    private func hasShape(_ parameters: AVCodecParameters) -> Bool {
        switch parameters.codec_type {
        case AVMEDIA_TYPE_VIDEO: return parameters.width > 0 && parameters.height > 0
        case AVMEDIA_TYPE_AUDIO: return parameters.ch_layout.nb_channels > 0 && parameters.sample_rate > 0
        default: return true
        }
    }

    /// Asks for decoded frames of track `index`; the decoder refuses pictures of more than `maxPixels` pixels
    /// (a stream that changes its size mid-way cannot get past the limits checked on its header).
    public func addDecodedOutput(track index: Int, maxPixels: Int = 8192 * 8192) throws(MediaError) {
        decoders[index] = try StreamDecoder(container: container, streamIndex: index, maxPixels: maxPixels)
    }

    /// Asks for the compressed packets of track `index`, untouched.
    public func addPassthroughOutput(track index: Int) {
        passthrough.insert(index)
    }

    func timeBase(of track: Int) -> AVRational { container.stream(track).pointee.time_base }

    func stream(_ track: Int) -> UnsafeMutablePointer<AVStream> { container.stream(track) }


    /// Whether `seek` may be used: not in formats whose clock may jump (MPEG-TS and the like), where timestamps read
    /// after a seek would miss the stitching of the jumps before it, and whose seeking does not look for key frames.
    var seeksReliably: Bool { !container.allowsTimestampJumps }

    /// Moves the reading position to the key frame of `track` at or before `seconds` (on the file's clock), before
    /// anything is read. False when the file cannot seek (it is then read from the start; callers skip by time).
    public func seek(track index: Int, toSeconds seconds: Double) -> Bool {
        let timeBase = timeBase(of: index)
        let target = av_rescale_q(Int64((seconds * 1_000_000).rounded(.down)), AVRational(num: 1, den: 1_000_000), timeBase)
        return av_seek_frame(container.context, Int32(index), target, AVSEEK_FLAG_BACKWARD) >= 0
    }

    /// The next sample of any output, or nil at the end of the file.
    ///
    /// At the end it drains every decoder, then checks that the file held as much media as it declared:
    /// a file cut short fails with `input_truncated` rather than coming out as a shorter success.
    public func nextSample() throws(MediaError) -> Sample? {
        while true {
            if let decoder = draining {
                switch try decoder.receive(into: frame) {
                case .frame:
                    return .frame(frame, track: decoder.streamIndex)
                case .needsInput:
                    if mustResend {
                        mustResend = try !decoder.send(packet)
                        continue
                    }
                    draining = nil
                case .endOfStream:
                    draining = nil
                }
            }
            if reachedEnd {
                guard let decoder = flushOrder.popLast() else {
                    if !decodersReleased {
                        try checkComplete()
                        // Every decoder is drained and the input checked: the decoders and their pictures go now,
                        // for the owner may hold the reader through a long finish (the output muxed and rewritten).
                        decoders.removeAll()
                        frame.unref()
                        decodersReleased = true
                    }
                    return nil
                }
                try decoder.sendEndOfStream()
                draining = decoder
                continue
            }
            packet.unref()
            guard container.read(into: packet) else {
                // A read the token interrupted is no end of the input: taken for one, a canceled pass went on to
                // finish its output as if the file had ended there.
                if cancellation?.isCanceled == true { throw MediaError.canceled }
                // Nor is a read the memory limit refused: taken for the end, the job failed as a file cut short
                // ("upload the complete file"), not as short of memory. The demuxer gives the same answer for a
                // sample its index says is larger than the file (a damaged MP4 `stsz`), whatever the memory: that
                // file is damaged, and its job was told to raise its memory limit.
                if container.readFailure == tc_averror(ENOMEM) {
                    if let damage = damagedIndex { throw damage }
                    throw MediaError(code: "out_of_memory", message: "Reading the input failed: \(FFmpeg.errorText(container.readFailure)).")
                }
                reachedEnd = true
                flushOrder = decoders.keys.sorted(by: >).compactMap { decoders[$0] }
                continue
            }
            let index = packet.streamIndex
            try checkTimes(of: packet, index: index)
            // On the file's own clock, before a splice is closed up (`continuity`), and after: a transport stream's
            // declared end is on its own clock (one whose clock leapt a minute ahead declares the minute, and read on
            // the closed-up clock only, it was refused as cut short), an FLV header's on the clock that runs on.
            // A stream not read counts too: a file is complete when its longest stream is.
            noteEnd(of: packet)
            let read = decoders[index] != nil || passthrough.contains(index)
            if !read && !timelineStreams.contains(index) { continue }
            try continuity.apply(to: packet.pointer, timeBase: timeBase(of: index),
                                 stream: "\(tracks[index].mediaType.rawValue) track (stream \(index))", origin: container.startTime)
            if !read { continue }
            noteEnd(of: packet)
            if passthrough.contains(index) { return .packet(packet, track: index) }
            let decoder = decoders[index]!
            mustResend = try !decoder.send(packet)
            draining = decoder
        }
    }

    /// Throws `timestamps_invalid` for a packet whose times or duration, in microseconds, do not fit within
    /// `Timeline.limit` (or overflow on the way there).
    private func checkTimes(of packet: Packet, index: Int) throws(MediaError) {
        let value = packet.pointer.pointee
        let timeBase = timeBase(of: index)
        for (stamp, isDuration) in [(value.pts, false), (value.dts, false), (value.duration, true)] where stamp != FFmpeg.noPTS {
            let microseconds = Timeline.rescale(stamp, from: timeBase, to: FFmpeg.timeBaseQ)
            guard microseconds == Int64.min || abs(microseconds) > Timeline.limit else { continue }
            let seconds = String(format: "%.0f", FFmpeg.seconds(stamp, timeBase))
            // A stream may appear after the file was opened (MPEG-TS, MPEG-PS): it has no track here.
            let kind = index < tracks.count ? tracks[index].mediaType.rawValue : "late"
            throw MediaError(code: "timestamps_invalid", message:
                "The input's \(kind) track (stream \(index)) gives a packet a \(isDuration ? "duration" : "time") "
                + "of \(seconds) s, past what any media holds: its timestamps are broken. Export the file again from its source.")
        }
    }

    private func noteEnd(of packet: Packet) {
        let value = packet.pointer.pointee
        let time = value.pts != FFmpeg.noPTS ? value.pts : value.dts
        guard time != FFmpeg.noPTS else { return }
        // Added as seconds: in a fine time base (nanoseconds) two times within `Timeline.limit` can overflow.
        let end = FFmpeg.seconds(time, timeBase(of: value.stream_index.asInt))
            + FFmpeg.seconds(max(value.duration, 0), timeBase(of: value.stream_index.asInt))
        readEnd[value.stream_index.asInt] = max(readEnd[value.stream_index.asInt] ?? -.infinity, end)
        let start = FFmpeg.seconds(time, timeBase(of: value.stream_index.asInt))
        readStart[value.stream_index.asInt] = min(readStart[value.stream_index.asInt] ?? .infinity, start)
    }

    /// Seconds that the media read may fall short of the declared duration before we call the file truncated.
    static func truncationTolerance(declared: Double) -> Double { max(0.5, declared * 0.02) }

    /// Compares what was read with what the file declares: each stream that declares its own duration must reach
    /// its end, and the longest stream must reach the file's declared end (streams without their own duration may
    /// end earlier: audio shorter than the video is not a cut). A stream whose timing is the file's and whose data
    /// starts later than that (or never) was given the file's timing by FFmpeg, which saw none of it while probing:
    /// it says nothing of its own end (audio from 8 s to 13 s of a 30 s Matroska or MPEG-TS file failed as cut
    /// short at 13 s). An MP4's tracks declare their own, often the file's: they keep their own check.
    private func checkComplete() throws(MediaError) {
        guard container.durationIsDeclared else { return }
        var fileLevel = false
        for index in Set(decoders.keys).union(passthrough).sorted() {
            let stream = container.stream(index).pointee
            let start = stream.start_time != FFmpeg.noPTS ? stream.start_time : 0
            let declaredStart = FFmpeg.seconds(start, stream.time_base)
            let borrowed = stream.start_time != FFmpeg.noPTS && container.hasFileTiming(index)
                && readStart[index].map { $0 - declaredStart > Self.truncationTolerance(declared: 0) } ?? true
            guard let end = container.declaredEnd(ofStream: index), !borrowed else {
                fileLevel = true
                continue
            }
            try checkReached(end, read: readEnd[index])
        }
        if fileLevel, let end = container.declaredEnd {
            try checkReached(end, read: readEnd.values.max())
        }
    }

    /// The failure of a file whose index states a sample larger than the whole file (a damaged MP4 `stsz` entry):
    /// the demuxer cannot hold it (ENOMEM), or reads past the end and stops as if the file were cut short. Nil for an
    /// index that holds.
    private var damagedIndex: MediaError? {
        guard let (bytes, fileBytes) = container.impossibleSample else { return nil }
        return MediaError(code: "unreadable_input",
                          message: "The file's index states a sample of \(bytes) bytes, more than the whole file (\(fileBytes) bytes): the file is damaged.")
    }

    /// Throws `input_truncated` when media read up to `read` (seconds, the file's clock) falls short of `declaredEnd`
    /// (`unreadable_input` when the file's index is damaged: not a file to upload again).
    private func checkReached(_ declaredEnd: Double, read: Double?) throws(MediaError) {
        let read = read ?? container.startTime
        let declared = declaredEnd - container.startTime
        guard declaredEnd - read > Self.truncationTolerance(declared: declared) else { return }
        if let damage = damagedIndex { throw damage }
        let have = max(0, read - container.startTime)
        throw MediaError(
            code: "input_truncated",
            message: String(
                format: "The input declares %.2f s of media but its data ends at %.2f s: the file was cut short. Upload the complete file.",
                declared, have))
    }
}

extension MediaReader {
    /// The first picture of an image file (PNG, JPEG), decoded, for a watermark.
    static func firstPicture(path: String) throws(MediaError) -> Frame {
        let reader = try MediaReader(path: path)
        guard let track = reader.mainVideoTrack else {
            throw MediaError(code: "invalid_settings", message: "filters.video.watermark.upload: the upload is not an image.")
        }
        guard let picture = try reader.firstPicture(track: track.index, maxPixels: 4096 * 4096) else {
            throw MediaError(code: "invalid_settings", message: "filters.video.watermark.upload: the image has no picture.")
        }
        return picture
    }

    /// The first picture track `index` decodes to (a reference of its own), or nil if none comes out of its first
    /// `packets` packets. Reads from where the reader stands, which must have no outputs, and reads nothing else
    /// (the other streams are discarded): a hostile file costs at most that many packets.
    func firstPicture(track index: Int, maxPixels: Int, withinPackets packets: Int = 600) throws(MediaError) -> Frame? {
        precondition(decoders.isEmpty && passthrough.isEmpty, "a first picture is read by a reader of its own")
        for other in tracks.indices where other != index { container.stream(other).pointee.discard = AVDISCARD_ALL }
        let decoder = try StreamDecoder(container: container, streamIndex: index, maxPixels: maxPixels)
        func picture() throws(MediaError) -> Frame {
            let copy = Frame()
            try FFmpeg.check(av_frame_ref(copy.pointer, frame.pointer), "Keeping the first picture")
            return copy
        }
        var sent = 0
        reading: while sent < packets {
            packet.unref()
            guard container.read(into: packet) else { break }
            guard packet.streamIndex == index else { continue }
            sent += 1
            var accepted = try decoder.send(packet)
            while true {
                switch try decoder.receive(into: frame) {
                case .frame: return try picture()
                case .endOfStream: return nil
                case .needsInput:
                    if accepted { continue reading }
                    // It was full and gave nothing after all: it takes the packet now (or passes over it).
                    accepted = true
                    _ = try decoder.send(packet)
                }
            }
        }
        packet.unref()
        try decoder.sendEndOfStream()
        for _ in 0...packets {
            switch try decoder.receive(into: frame) {
            case .frame: return try picture()
            case .endOfStream: return nil
            case .needsInput: continue
            }
        }
        return nil
    }
}

extension Int32 {
    var asInt: Int { Int(self) }
}
