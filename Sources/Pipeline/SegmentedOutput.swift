import CFFmpeg
import Foundation

/// One track of a ladder written as CMAF: `<folder>/init.mp4` (ftyp + moov) and `<folder>/segment_00001.m4s`, ...
/// (moof + mdat), cut where the segment grid says; video gets one fragment per key frame, so an I-frame playlist can
/// point at each IDR with a byte range.
///
/// The MP4 muxer keeps a fragment's samples in memory until it is flushed (`frag_custom`), and writes it to whatever
/// file is open then: the init segment is the header's file, each media segment a file of its own. Owns its
/// `AVFormatContext`; used by one thread at a time.
final class SegmentedOutput: PacketSink {
    /// A key frame's bytes in a segment: its fragment's moof and the frame itself.
    struct KeyFrame: Equatable, Codable {
        /// Presentation time, in seconds on the output timeline.
        var time: Double
        var offset: Int
        var length: Int
    }

    /// A finished media segment.
    struct Segment: Equatable, Codable {
        var number: Int
        /// Path from the output directory, e.g. `720p/segment_00001.m4s`.
        var path: String
        /// Presentation time of its first sample and its length, in the track's timescale.
        var start: Int64
        var duration: Int64
        var bytes: Int
        var keyFrames: [KeyFrame]
        /// Its samples (absent in checkpoints written before they were counted).
        var packets: Int? = nil
        /// SHA-256 of its file, read back once it was durable, when a checkpoint records it (absent in checkpoints
        /// written before: their segments are checked by size alone).
        var sha256: String? = nil
    }

    /// Folder of the track in the output directory (`720p`, `audio`).
    let folder: String
    let isVideo: Bool
    /// Seconds between segment boundaries.
    let segmentDuration: Double
    private(set) var segments: [Segment] = []
    /// Units per second of the track's timestamps in the files (the MP4 track timescale).
    private(set) var timescale: Int32 = 0
    /// Seconds added to every timestamp in the files, so that no decoding time is negative (an encoder's B-frame
    /// delay, AAC's priming): a fragment's decode time cannot be. Every track of a ladder gets the same one; set it
    /// before `start()`. Playlists need nothing; the DASH manifest states it (`presentationTimeOffset`).
    var offsetSeconds = 0.0
    /// `offsetSeconds` in `timescale` units.
    private(set) var offset: Int64 = 0
    /// The encoder's extradata (SPS and PPS, or the AudioSpecificConfig): what the CODECS attribute is read from.
    let extradata: [UInt8]

    private let root: String
    private var context: UnsafeMutablePointer<AVFormatContext>?
    private var open = false
    /// The segment being written: its number, its cell of the segment grid, its first presentation time (stream
    /// units), and where each of its fragments starts (byte offset, presentation time in seconds).
    private var current: (number: Int, cell: Int, start: Int64, fragments: [(offset: Int, time: Double)])?
    /// Where the latest sample ends (stream units).
    private var end: Int64 = 0
    /// A checkpointed track: told of each segment once it is on disk, with the segment's latest presentation time
    /// in the encoder's time base; a failure it returns stops the track.
    var journal: ((Segment, Int64) -> MediaError?)?
    /// A resumed track: packets presented up to here (encoder time base) are an encoder's warm-up, already in the
    /// segments an earlier attempt made; the first key frame after it starts the next segment.
    private var skipThrough: Int64?
    /// Fragments the earlier attempt wrote (the next moof continues their sequence numbers).
    private var fragmentsBefore = 0
    /// The latest presentation time of the segment being written, in the encoder's time base.
    private var currentLast: Int64 = .min
    /// Packets of the segment being written.
    private var currentPackets = 0
    private var lastDecodingTime: Int64?
    /// A frame's length in stream units, for packets that do not say (x264's): 0 for audio.
    private var frameDuration: Int64 = 0
    /// The latest packet, held until the next one says how long it lasts (`holding`).
    private let held = Packet()
    private var holding = false

    static let initName = "init.mp4"

    /// A track in `root/folder` for the packets of `encoder`; nothing is written before `start()`.
    init(root: String, folder: String, encoder: StreamEncoder, segmentDuration: Double) throws(MediaError) {
        self.root = root
        self.folder = folder
        self.segmentDuration = segmentDuration
        let codecContext = encoder.context!
        isVideo = codecContext.pointee.codec_type == AVMEDIA_TYPE_VIDEO
        extradata = codecContext.pointee.extradata_size > 0
            ? Array(UnsafeBufferPointer(start: codecContext.pointee.extradata, count: Int(codecContext.pointee.extradata_size)))
            : []
        try FFmpeg.check(avformat_alloc_output_context2(&context, nil, "mp4", nil), "Creating the \(folder) segments")
        guard let stream = avformat_new_stream(context, nil) else {
            throw MediaError(code: "out_of_memory", message: "Adding the \(folder) stream failed.")
        }
        try FFmpeg.check(avcodec_parameters_from_context(stream.pointee.codecpar, codecContext), "Describing the \(folder) stream")
        stream.pointee.time_base = encoder.timeBase
        if isVideo {
            stream.pointee.sample_aspect_ratio = codecContext.pointee.sample_aspect_ratio
            stream.pointee.avg_frame_rate = codecContext.pointee.framerate
        }
        try encoder.hdrMetadata?.attach(to: stream)
        do {
            try FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
        } catch {
            throw MediaError(code: "output_failed", message: "Creating the folder \(folder) of the output failed: \(error.localizedDescription)")
        }
    }

    /// Continues a track an earlier attempt wrote: its finished `segments` stay, numbering and fragment sequence
    /// go on, and packets up to `skipThrough` are dropped. Call before `start()`.
    func resume(segments: [Segment], skipThrough: Int64?) {
        self.segments = segments
        self.skipThrough = skipThrough
        fragmentsBefore = segments.reduce(0) { $0 + (isVideo ? max(1, $1.keyFrames.count) : 1) }
    }

    /// Writes the init segment and opens the first media segment.
    func start() throws(MediaError) {
        try openFile(folder + "/" + Self.initName)
        // An empty moov (the sample tables live in the fragments), fragments flushed when asked, their offsets from
        // their own moof, no sidx or mfra: a CMAF track file set.
        let options = OptionDictionary([
            // frag_discont: decode times are written as they are (with the offset), not moved to start each track at 0.
            // No edit list (segment players ignore it): presentation times are what the fragments say, B-frames
            // written with negative composition offsets (cmaf), so a track's first frame is presented at its tfdt.
            ("movflags", "+frag_custom+empty_moov+default_base_moof+cmaf+skip_sidx+skip_trailer+frag_discont"),
            ("use_editlist", "0"),
        ] + (fragmentsBefore > 0 ? [("fragment_index", String(fragmentsBefore + 1))] : []))
        try FFmpeg.check(avformat_write_header(context, &options.pointer), "Writing the \(folder) init segment")
        let stream = context!.pointee.streams[0]!
        timescale = stream.pointee.time_base.den
        offset = Int64((offsetSeconds * Double(timescale)).rounded(.up))
        let rate = stream.pointee.avg_frame_rate
        if isVideo && FFmpeg.isValid(rate) { frameDuration = av_rescale_q(1, av_inv_q(rate), stream.pointee.time_base) }
        try closeFile()
        if journal != nil {
            // Before any segment is recorded, file and name: a track recorded complete is not written again, and
            // its segments are nothing without it.
            let path = root + "/" + folder + "/" + Self.initName
            try FileDurability.syncFile(atPath: path)
            try FileDurability.syncDirectory(containing: path)
        }
    }

    func write(_ packet: Packet, timeBase: AVRational) throws(MediaError) {
        let original = packet.pointer.pointee.pts != FFmpeg.noPTS ? packet.pointer.pointee.pts : packet.pointer.pointee.dts
        if let skip = skipThrough {
            // Closed GOPs: everything before the resumed segment's IDR (in decoding order) is presented before it.
            guard packet.isKeyFrame && original > skip else { return }
            skipThrough = nil
        }
        let stream = context!.pointee.streams[0]!
        packet.pointer.pointee.stream_index = 0
        av_packet_rescale_ts(packet.pointer, timeBase, stream.pointee.time_base)
        if packet.pointer.pointee.pts != FFmpeg.noPTS { packet.pointer.pointee.pts += offset }
        if packet.pointer.pointee.dts != FFmpeg.noPTS { packet.pointer.pointee.dts += offset }
        // The offset covers the usual start delay (B-frames at the frame rate); x264 derives its first decoding
        // times from the real gaps between the first pictures, so a variable-rate source that starts slowly (a
        // screen recording, a slideshow) decodes earlier still. Those first times are moved up to zero (then kept
        // rising below): only when the pictures are decoded changes, never when they are shown.
        if packet.pointer.pointee.dts != FFmpeg.noPTS && packet.pointer.pointee.dts < 0 { packet.pointer.pointee.dts = 0 }
        let value = packet.pointer.pointee
        if let last = lastDecodingTime, value.dts != FFmpeg.noPTS, value.dts <= last {
            packet.pointer.pointee.dts = last + 1
            if value.pts != FFmpeg.noPTS && value.pts < last + 1 { packet.pointer.pointee.pts = last + 1 }
        }
        if packet.pointer.pointee.dts != FFmpeg.noPTS { lastDecodingTime = packet.pointer.pointee.dts }
        // The packet before this one lasts until this one is decoded: x264's packets say no length, and the muxer
        // then gives each one frame of the average rate and starts every fragment where those lengths add up to,
        // not at its first sample's decoding time; a variable-rate source (a pause, dropped frames) had the key
        // frame after a gap shown at the gap's start, or before the frames it precedes.
        try writeHeld(until: packet.pointer.pointee.dts)
        let pts = packet.pointer.pointee.pts != FFmpeg.noPTS ? packet.pointer.pointee.pts : (lastDecodingTime ?? end)
        // Where the sample is on the output timeline (the grid's clock), without the files' offset.
        let time = FFmpeg.seconds(pts - offset, stream.pointee.time_base)
        if !isVideo || packet.isKeyFrame {
            let cell = KeyFrameGrid.segment(at: time, duration: segmentDuration)
            if let segment = current {
                if cell > segment.cell {
                    try finishSegment()
                    try begin(number: segment.number + 1, cell: cell, start: pts, time: time)
                } else if isVideo {
                    // A key frame inside the segment starts a fragment of its own.
                    try FFmpeg.check(av_write_frame(context, nil), "Writing the \(folder) segments")
                    current!.fragments.append((Int(avio_tell(context!.pointee.pb)), time))
                }
            } else {
                try begin(number: (segments.last?.number ?? 0) + 1, cell: cell, start: pts, time: time)
            }
        }
        currentLast = max(currentLast, original)
        currentPackets += 1
        let length = packet.pointer.pointee.duration > 0 ? packet.pointer.pointee.duration : frameDuration
        end = max(end, pts + length)
        try FFmpeg.check(av_packet_ref(held.pointer, packet.pointer), "Keeping a \(folder) packet")
        holding = true
    }

    /// Writes the held packet, lasting until `nextDecodingTime` when that comes after it (else as long as it says,
    /// or a frame).
    private func writeHeld(until nextDecodingTime: Int64?) throws(MediaError) {
        guard holding else { return }
        defer {
            held.unref()
            holding = false
        }
        let dts = held.pointer.pointee.dts
        if let next = nextDecodingTime, next != FFmpeg.noPTS, dts != FFmpeg.noPTS, next > dts {
            held.pointer.pointee.duration = next - dts
        } else if held.pointer.pointee.duration <= 0 {
            held.pointer.pointee.duration = frameDuration
        }
        try FFmpeg.check(av_write_frame(context, held.pointer), "Writing the \(folder) segments")
    }

    /// Writes the last segment and ends the track.
    func finish() throws(MediaError) {
        try writeHeld(until: nil)
        if current != nil { try finishSegment() }
        // Nothing is pending; the trailer only frees the muxer's state (no mfra: skip_trailer).
        try openFile(folder + "/.trailer")
        try FFmpeg.check(av_write_trailer(context), "Finishing the \(folder) segments")
        try closeFile()
        unlink(root + "/" + folder + "/.trailer")
    }

    private func begin(number: Int, cell: Int, start: Int64, time: Double) throws(MediaError) {
        // The previous segment lasts until this one starts.
        if let last = segments.indices.last { segments[last].duration = start - segments[last].start }
        current = (number, cell, start, [(0, time)])
        try openFile(Self.segmentPath(folder: folder, number: number))
    }

    private func finishSegment() throws(MediaError) {
        guard let segment = current else { return }
        try FFmpeg.check(av_write_frame(context, nil), "Writing the \(folder) segments")
        let bytes = Int(avio_tell(context!.pointee.pb))
        try closeFile()
        let path = Self.segmentPath(folder: folder, number: segment.number)
        var keyFrames: [KeyFrame] = []
        if isVideo {
            // Each fragment starts with its key frame: the range is its moof, the mdat header and that first sample.
            let fragments = try FragmentIndex.read(path: root + "/" + path)
            guard fragments.map(\.offset) == segment.fragments.map(\.offset) else {
                throw MediaError(code: "output_failed", message: "The fragments of \(path) are not where they were written.")
            }
            keyFrames = zip(fragments, segment.fragments).map { fragment, written in
                KeyFrame(time: written.time, offset: fragment.offset, length: fragment.firstSampleEnd - fragment.offset)
            }
        }
        segments.append(Segment(number: segment.number, path: path, start: segment.start, duration: end - segment.start,
                                bytes: bytes, keyFrames: keyFrames, packets: currentPackets))
        current = nil
        currentPackets = 0
        if let journal {
            try FileDurability.syncFile(atPath: root + "/" + path)
            // Read back (from the page cache) for a later attempt to take it only as it was written: checked by
            // size alone, a segment damaged in place was published.
            segments[segments.count - 1].sha256 = SHA256Hasher.file(atPath: root + "/" + path)
            if let failure = journal(segments[segments.count - 1], currentLast) { throw failure }
        }
        currentLast = .min
    }

    static func segmentPath(folder: String, number: Int) -> String {
        folder + "/" + String(format: "segment_%05d.m4s", number)
    }

    private func openFile(_ relativePath: String) throws(MediaError) {
        // A new file, never the one an earlier attempt left under this name: a writer of the job that lost its
        // lease while paused may still hold that one open, and what it writes when it wakes would land in this
        // attempt's recorded segment (and the output, which links to it).
        unlink(root + "/" + relativePath)
        let ioOptions = OptionDictionary([("protocol_whitelist", "file")])
        try FFmpeg.check(
            avio_open2(&context!.pointee.pb, "file:" + root + "/" + relativePath, AVIO_FLAG_WRITE, nil, &ioOptions.pointer),
            "Creating \(relativePath)", code: "output_failed")
        open = true
    }

    /// Writes what the file's buffer still holds and closes it; a write that failed (a full disk, a file-size limit,
    /// a network file system's error) fails the track. Unchecked, the last 32 KiB of a segment were lost unseen: an
    /// audio segment, which nothing reads back, was recorded and published cut short, and the job succeeded.
    private func closeFile() throws(MediaError) {
        guard open, let io = context?.pointee.pb else { return }
        open = false
        avio_flush(io)
        let written = io.pointee.error
        let closed = avio_closep(&context!.pointee.pb)
        let result = written < 0 ? written : closed
        if result < 0 {
            throw MediaError.ffmpeg(result, "Writing the \(folder) segments", code: result == FFmpeg.noSpace ? nil : "output_failed")
        }
    }

    deinit {
        try? closeFile()
        avformat_free_context(context)
    }
}
