import CFFmpeg
import Foundation
import Locks

/// Owns an output `AVFormatContext` and its file; written under a temporary name and renamed on success, or in
/// place when the whole folder it is in is temporary (`inPlace`).
///
/// Freed differently from an input (`avio_closep` + `avformat_free_context`), hence a type of its own. Packets may
/// come from two threads (the audio on the decoding thread, the video from its encode thread): `write` and
/// `lastPresentationTime` hold a lock; the rest is called by one thread before and after them.
final class OutputContainer {
    private var context: UnsafeMutablePointer<AVFormatContext>?
    let path: String
    let temporaryPath: String
    private var opened = false
    private var finished = false
    private let lock = LockedValue(0.0)
    /// Per output stream, the last decoding time written, in the stream's time base (under `lock`).
    private var lastDecodingTime: [Int: Int64] = [:]
    /// What the file's interrupt callback reports to; kept alive as long as the context that points at it.
    private let activity = FinishActivity()

    /// FFmpeg asks its interrupt callback before each read and write of the file. While `finish` runs (alone: every
    /// writer is done), each ask is a step of the trailer's work, told to `finish`'s caller, and a cancellation
    /// stops it; before, the callback answers "go on" and nothing else, whichever thread writes.
    private final class FinishActivity {
        var step: (() -> Void)?
        var cancellation: CancellationToken?

        static let callback: @convention(c) (UnsafeMutableRawPointer?) -> Int32 = { opaque in
            guard let opaque else { return 0 }
            let activity = Unmanaged<FinishActivity>.fromOpaque(opaque).takeUnretainedValue()
            guard let step = activity.step else { return 0 }
            if activity.cancellation?.isCanceled == true { return 1 }
            step()
            return 0
        }
    }

    init(path: String, fileType: FileType, inPlace: Bool = false) throws(MediaError) {
        self.path = path
        let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        temporaryPath = inPlace ? path : path + ".\(suffix).partial"
        let result = avformat_alloc_output_context2(&context, nil, fileType.muxerName, "file:" + temporaryPath)
        try FFmpeg.check(result, "Creating the \(fileType.rawValue) output")
        // The context's callback serves the files the muxer opens itself (moving the index to the front reads the
        // file back through a second handle); `open` gives the same to the file it writes.
        context!.pointee.interrupt_callback = AVIOInterruptCB(callback: FinishActivity.callback,
                                                             opaque: Unmanaged.passUnretained(activity).toOpaque())
    }

    /// Whether encoders must put their headers (SPS/PPS, AudioSpecificConfig) in extradata.
    var wantsGlobalHeader: Bool { context!.pointee.oformat.pointee.flags & AVFMT_GLOBALHEADER != 0 }

    /// Whether the container can hold `codec` (for stream copy). Not what FFmpeg's own answer lets through and its
    /// muxer then refuses as it writes the header ("Experimental feature", "Invalid argument": the job failed as an
    /// FFmpeg error, not as a copy to encode instead): FLAC and TrueHD in MP4 (experimental), and VP9, AV1, FLAC, Opus,
    /// TrueHD and MPEG-H 3D Audio in QuickTime (MP4 only). Nor Vorbis in MP4, which FFmpeg writes but nothing plays.
    func accepts(_ codec: AVCodecID) -> Bool {
        let format = context!.pointee.oformat
        guard avformat_query_codec(format, codec, FF_COMPLIANCE_NORMAL) == 1 else { return false }
        switch String(cString: format!.pointee.name) {
        // Vorbis in MP4 has only FFmpeg's own object type, which no browser or Apple player plays.
        case "mp4": return ![AV_CODEC_ID_FLAC, AV_CODEC_ID_TRUEHD, AV_CODEC_ID_VORBIS].contains(codec)
        case "mov": return ![AV_CODEC_ID_VP9, AV_CODEC_ID_AV1, AV_CODEC_ID_FLAC, AV_CODEC_ID_OPUS, AV_CODEC_ID_TRUEHD,
                             AV_CODEC_ID_MPEGH_3D_AUDIO].contains(codec)
        default: return true
        }
    }

    /// Adds a stream described by an opened encoder.
    func addStream(encoder: StreamEncoder) throws(MediaError) -> Int {
        let stream = try newStream()
        try FFmpeg.check(avcodec_parameters_from_context(stream.pointee.codecpar, encoder.context), "Describing the output stream")
        stream.pointee.time_base = encoder.timeBase
        if let encoderContext = encoder.context, encoderContext.pointee.codec_type == AVMEDIA_TYPE_VIDEO {
            stream.pointee.sample_aspect_ratio = encoderContext.pointee.sample_aspect_ratio
            stream.pointee.avg_frame_rate = encoderContext.pointee.framerate
        }
        try encoder.hdrMetadata?.attach(to: stream)
        return Int(stream.pointee.index)
    }

    /// Adds a stream described by parameters an encoder had (a checkpoint's).
    func addStream(parameters: StreamParameters) throws(MediaError) -> Int {
        let stream = try newStream()
        try parameters.apply(to: stream)
        return Int(stream.pointee.index)
    }

    /// The tag a copied stream gets: `hvc1` for HEVC where the container takes it (MP4, QuickTime), the only one
    /// Apple's players play, whatever the source said (the muxer's own choice, and many files', is `hev1`); none for
    /// anything else, for the muxer to choose (a source container's tag may mean nothing in ours: AVI's `XVID`).
    private func copiedTag(of source: AVCodecParameters) -> UInt32 {
        guard source.codec_id == AV_CODEC_ID_HEVC, let tags = context?.pointee.oformat.pointee.codec_tag else { return 0 }
        let hvc1 = UInt32(UInt8(ascii: "h")) | UInt32(UInt8(ascii: "v")) << 8 | UInt32(UInt8(ascii: "c")) << 16
            | UInt32(UInt8(ascii: "1")) << 24
        return av_codec_get_id(tags, hvc1) == AV_CODEC_ID_HEVC ? hvc1 : 0
    }

    /// Adds a stream that copies `source`'s packets.
    func addStream(copying source: UnsafeMutablePointer<AVStream>) throws(MediaError) -> Int {
        let stream = try newStream()
        try FFmpeg.check(avcodec_parameters_copy(stream.pointee.codecpar, source.pointee.codecpar), "Copying stream parameters")
        stream.pointee.codecpar.pointee.codec_tag = copiedTag(of: source.pointee.codecpar.pointee)
        stream.pointee.time_base = source.pointee.time_base
        stream.pointee.sample_aspect_ratio = source.pointee.sample_aspect_ratio
        stream.pointee.avg_frame_rate = source.pointee.avg_frame_rate
        // What the picture's display needs besides its parameters: the rotation, HDR's light levels (MP4's `clli`,
        // `mdcv`) and a Dolby Vision configuration (`dvcC`, which FFmpeg writes only when told unofficial boxes
        // are welcome; without it a Dolby Vision profile 5 stream is shown in the wrong colours).
        for type in [AV_PKT_DATA_DISPLAYMATRIX, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, AV_PKT_DATA_MASTERING_DISPLAY_METADATA,
                     AV_PKT_DATA_DOVI_CONF] {
            var size = 0
            if let data = av_stream_get_side_data(source, type, &size), size > 0,
               let copy = av_stream_new_side_data(stream, type, size) {
                copy.update(from: data, count: size)
                if type == AV_PKT_DATA_DOVI_CONF { context?.pointee.strict_std_compliance = FF_COMPLIANCE_UNOFFICIAL }
            }
        }
        return Int(stream.pointee.index)
    }

    private func newStream() throws(MediaError) -> UnsafeMutablePointer<AVStream> {
        guard let stream = avformat_new_stream(context, nil) else {
            throw MediaError(code: "out_of_memory", message: "Adding an output stream failed.")
        }
        return stream
    }

    func timeBase(of stream: Int) -> AVRational { context!.pointee.streams[stream]!.pointee.time_base }

    /// Opens the temporary file and writes the header; MP4-family files get their index (moov) first.
    func open() throws(MediaError) {
        let ioOptions = OptionDictionary([("protocol_whitelist", "file")])
        try FFmpeg.check(
            avio_open2(&context!.pointee.pb, "file:" + temporaryPath, AVIO_FLAG_WRITE, &context!.pointee.interrupt_callback,
                       &ioOptions.pointer),
            "Creating the output file \(path)", code: nil)
        opened = true
        let options = OptionDictionary([("movflags", "+faststart")])
        try FFmpeg.check(avformat_write_header(context, &options.pointer), "Writing the output header")
    }

    /// End of the latest sample written, in seconds on the output's timeline.
    var lastPresentationTime: Double { lock.withLock { $0 } }

    /// Writes one packet whose timestamps are in `timeBase` units; the muxer interleaves the streams.
    func write(_ packet: Packet, stream: Int, timeBase: AVRational) throws(MediaError) {
        try lock.withLock { time throws(MediaError) in
            try write(packet, stream: stream, timeBase: timeBase, lastPresentationTime: &time)
        }
    }

    private func write(_ packet: Packet, stream: Int, timeBase: AVRational, lastPresentationTime: inout Double) throws(MediaError) {
        packet.pointer.pointee.stream_index = Int32(stream)
        let target = self.timeBase(of: stream)
        av_packet_rescale_ts(packet.pointer, timeBase, target)
        // The muxer refuses a decoding time that does not move forward, which packets copied across a stitched
        // splice (or rounded into a coarser time base) can do by a tick: nudge it past the last, as the ffmpeg CLI
        // does, keeping pts ≥ dts.
        let dts = packet.pointer.pointee.dts
        if dts != FFmpeg.noPTS {
            if let last = lastDecodingTime[stream], dts <= last {
                packet.pointer.pointee.dts = last + 1
                let pts = packet.pointer.pointee.pts
                if pts != FFmpeg.noPTS && pts < last + 1 { packet.pointer.pointee.pts = last + 1 }
            }
            lastDecodingTime[stream] = packet.pointer.pointee.dts
        }
        let value = packet.pointer.pointee
        if value.pts != FFmpeg.noPTS {
            let end = FFmpeg.seconds(value.pts + max(value.duration, 0), target)
            lastPresentationTime = max(lastPresentationTime, end)
        }
        try FFmpeg.check(av_interleaved_write_frame(context, packet.pointer), "Writing the output")
    }

    /// Writes the trailer (and moves the index to the front), closes the file, flushes it to disk and renames it
    /// into place durably: once this returns, a crash cannot leave a partial or missing output under `path`.
    ///
    /// Moving the index rewrites the whole file: `step` is called on this thread as that work advances (before each
    /// read and write FFmpeg makes), and `cancellation` stops it.
    func finish(step: () -> Void = {}, cancellation: CancellationToken? = nil) throws(MediaError) {
        let trailer: Int32 = withoutActuallyEscaping(step) { step in
            activity.step = step
            activity.cancellation = cancellation
            defer {
                activity.step = nil
                activity.cancellation = nil
            }
            return av_write_trailer(context)
        }
        if trailer < 0, cancellation?.isCanceled == true { throw MediaError.canceled }
        try FFmpeg.check(trailer, "Finishing the output")
        let closed = avio_closep(&context!.pointee.pb)
        opened = false
        try FFmpeg.check(closed, "Closing the output file")
        try FileDurability.syncFile(atPath: temporaryPath)
        guard temporaryPath != path else {
            // In place: the folder it is in is renamed (and flushed) by its owner.
            finished = true
            return
        }
        guard rename(temporaryPath, path) == 0 else {
            let reason = String(cString: strerror(errno))
            throw MediaError(code: "output_failed", message: "Moving the output into place at \(path) failed: \(reason).")
        }
        finished = true
        try FileDurability.syncDirectory(containing: path)
    }

    /// Closes and deletes the temporary file; nothing is left behind.
    func discard() {
        if opened {
            avio_closep(&context!.pointee.pb)
            opened = false
        }
        if !finished { unlink(temporaryPath) }
    }

    deinit {
        discard()
        avformat_free_context(context)
    }
}
