import CFFmpeg

/// One video output's end of the pipeline: frames from the decode side → onto the output timeline → converter
/// (crop, scale, colour, rotation) → H.264 input. Runs on its own thread behind a `FrameQueue` (`EncodeWorker`).
///
/// The frames it gets are shared with the other outputs: only its own `AVFrame` (timestamps, picture type,
/// cropping) is changed, never the pixels.
final class VideoEncodeSide: FrameConsumer {
    let encoding: VideoEncoding
    let input: EncodingWriterInput
    private let converter: VideoConverter
    private let timeline: Timeline
    private let frameTicks: Int64
    /// The last output time handed to the encoder.
    private var lastTimestamp: Int64?
    /// The picture chosen so far for the latest output time, held until a frame for a later time comes: of the
    /// pictures that land on one output time (a lower frame rate), the nearest to it is kept (ffmpeg's `fps` keeps
    /// the last, which at a halved rate is the same one). `offset` is its distance from that time, in microseconds.
    private var held: (frame: Frame, timestamp: Int64, offset: Int64)?
    /// The picture chosen for the output time before `held`'s, with the captions it carries: encoded when `held`
    /// moves on, or at the end, where `held` may be left out (past the source's end) and its captions go with this.
    private var ready: (frame: Frame, timestamp: Int64, captions: [Caption])?
    /// The output-timeline time (microseconds) of the latest source frame with a time, the gap before it and its own
    /// duration when its packet had one: the source ends the longer of the two after its last frame (a recording's
    /// last picture may stay for seconds after a short gap).
    private var sourceLast: Int64?
    private var sourceGap: Int64?
    private var sourceLastDuration: Int64?
    /// Closed captions (A/53 cc_data triplets) of the pictures come since the last one encoded, in the order they
    /// came, not yet carried: the next picture encoded carries them, those of the pictures a lower frame rate leaves
    /// out with its own, as FFmpeg's `ccrepack` puts them. Dropped with their pictures, a halved rate lost every
    /// other picture's captions, and they came out garbled.
    private var pendingCaptions: [Caption] = []
    /// One A/53 cc_data triplet.
    typealias Caption = (UInt8, UInt8, UInt8)
    /// Triplets one picture's A/53 data can carry (`cc_count` has 5 bits).
    static let captionTripletsLimit = 31
    private var keyFrames: KeyFrameGrid?
    /// On a resume: the latest time the first frame may have (one frame after the resume point); a later one
    /// means the input's seek skipped frames that must be encoded.
    private var firstFrameLimit: Int64?
    /// Whether the first picture, when it comes after the output's zero (video that starts after its sound), is
    /// shown from zero (`TranscodeOutput.tracksStartAtZero`); for the output's start, not a resumed attempt's.
    private var holdsFromZero: Bool

    /// Thrown when a resumed encode's first frame comes after the frames it must start with.
    static let seekMissed = MediaError(code: "resume_seek_missed", message: "The input's seek went past the checkpoint.")

    /// - Parameter resumeAfter: a checkpoint's last presentation time (encoder time base): frames up to it were
    ///   encoded by an earlier attempt and are skipped; the first one after it starts a segment, with an IDR.
    init(encoding: VideoEncoding, sourceColors: ColorTags, input: EncodingWriterInput, timeline: Timeline,
         keyFrames: KeyFrameGrid?, resumeAfter: Int64? = nil, holdsFirstPictureFromZero: Bool = false) {
        self.encoding = encoding
        self.input = input
        self.timeline = timeline
        self.keyFrames = keyFrames
        converter = VideoConverter(encoding: encoding, sourceColors: sourceColors)
        let ticks = max(1, av_rescale_q(1, av_inv_q(encoding.frameRate), encoding.timeBase))
        frameTicks = ticks
        lastTimestamp = resumeAfter
        firstFrameLimit = resumeAfter.map { $0 + ticks }
        holdsFromZero = holdsFirstPictureFromZero && resumeAfter == nil
    }

    /// For an input read from its start: its first frame comes where the video starts, which may be after the
    /// warm-up's start (a checkpoint of the first seconds, a video that starts late) with nothing skipped. Before
    /// the first frame.
    func acceptAnyFirstFrame() {
        firstFrameLimit = nil
    }

    func consume(_ item: FrameQueue.Item) throws(MediaError) {
        let frame = item.frame
        let source = frame.pointer.pointee.pts
        var timestamp: Int64
        let offset: Int64
        if source == FFmpeg.noPTS {
            timestamp = (held?.timestamp ?? lastTimestamp ?? -frameTicks) + frameTicks
            offset = 0
            // A frame of its own (an MPEG-PS's last comes without a time): the source ends a gap later.
            if let last = sourceLast, let gap = sourceGap {
                sourceLast = last + gap
                sourceLastDuration = nil
            }
        } else {
            timestamp = timeline.convert(source, from: item.timeBase, to: input.encoder.timeBase)
            let exact = timeline.convert(source, from: item.timeBase, to: FFmpeg.timeBaseQ)
            offset = abs(exact - Timeline.rescale(timestamp, from: input.encoder.timeBase, to: FFmpeg.timeBaseQ))
            if let last = sourceLast, exact > last { sourceGap = exact - last }
            if exact >= sourceLast ?? exact {
                sourceLast = exact
                // In the stream's time base, which the filters keep (or make finer: then too short, and the gap wins).
                let duration = frame.pointer.pointee.pkt_duration
                sourceLastDuration = duration > 0 ? Timeline.rescale(duration, from: item.timeBase, to: FFmpeg.timeBaseQ) : nil
            }
        }
        if let limit = firstFrameLimit {
            firstFrameLimit = nil
            if timestamp > limit { throw Self.seekMissed }
        }
        if holdsFromZero {
            holdsFromZero = false
            if timestamp > 0, lastTimestamp == nil, held == nil { timestamp = 0 }
        }
        // Frames that do not move time forward (non-monotonic sources) are dropped; of two on one output time (a
        // lower output frame rate), the nearer stays (the later when as near: a halved rate keeps frame 2n, on the
        // time, not 2n − 1, half a source frame early).
        if let last = lastTimestamp, timestamp <= last { return keepCaptions(of: frame) }
        if let current = held {
            if timestamp < current.timestamp { return keepCaptions(of: frame) }
            if timestamp == current.timestamp {
                keepCaptions(of: frame)
                if offset <= current.offset { held = (frame, timestamp, offset) }
                return
            }
            try choose(current.frame, at: current.timestamp)
        }
        keepCaptions(of: frame)
        held = (frame, timestamp, offset)
    }

    /// Keeps the captions of `frame` for the next picture encoded: its valid triplets (padding is dropped), as many
    /// as one picture can carry (more than a much lower rate's pictures can take are dropped, CEA-708's oldest first,
    /// then CEA-608's, rather than put off ever later).
    private func keepCaptions(of frame: Frame) {
        guard let captions = av_frame_get_side_data(frame.pointer, AV_FRAME_DATA_A53_CC) else { return }
        let bytes = UnsafeBufferPointer(start: captions.pointee.data, count: Int(captions.pointee.size))
        for start in stride(from: 0, to: bytes.count - 2, by: 3) where bytes[start] & 0x04 != 0 {
            pendingCaptions.append((bytes[start], bytes[start + 1], bytes[start + 2]))
        }
        Self.limit(&pendingCaptions)
    }

    /// Drops what one picture cannot carry: CEA-708's oldest first, then CEA-608's.
    private static func limit(_ captions: inout [Caption]) {
        while captions.count > captionTripletsLimit {
            captions.remove(at: captions.firstIndex { !isCEA608($0.0) } ?? 0)
        }
    }

    /// Whether a triplet (by its first byte, cc_type in the low two bits) is a CEA-608 field's pair, not CEA-708.
    private static func isCEA608(_ marker: UInt8) -> Bool { marker & 0x03 < 2 }

    /// Gives `frame` (about to be encoded) `captions` in place of its own (which are among them): CEA-608's pairs
    /// first, then CEA-708's, each in the order they came (CTA-708's order within a picture, as FFmpeg's caption
    /// queue writes them).
    private func carry(_ captions: [Caption], to frame: Frame) {
        av_frame_remove_side_data(frame.pointer, AV_FRAME_DATA_A53_CC)
        guard !captions.isEmpty,
              let side = av_frame_new_side_data(frame.pointer, AV_FRAME_DATA_A53_CC, captions.count * 3) else { return }
        let ordered = captions.filter { Self.isCEA608($0.0) } + captions.filter { !Self.isCEA608($0.0) }
        for (index, triplet) in ordered.enumerated() {
            side.pointee.data[index * 3] = triplet.0
            side.pointee.data[index * 3 + 1] = triplet.1
            side.pointee.data[index * 3 + 2] = triplet.2
        }
    }

    /// `frame` is the picture for `timestamp`, with the captions kept so far; the one chosen before is encoded.
    private func choose(_ frame: Frame, at timestamp: Int64) throws(MediaError) {
        if let ready {
            self.ready = nil
            try encode(ready.frame, at: ready.timestamp, captions: ready.captions)
        }
        ready = (frame, timestamp, pendingCaptions)
        pendingCaptions.removeAll(keepingCapacity: true)
    }

    private func encode(_ frame: Frame, at timestamp: Int64, captions: [Caption]) throws(MediaError) {
        let converted = try converter.convert(frame)
        carry(captions, to: converted)
        converted.pointer.pointee.pts = timestamp
        converted.pointer.pointee.pict_type = AV_PICTURE_TYPE_NONE
        if keyFrames?.isKeyFrame(at: FFmpeg.seconds(timestamp, input.encoder.timeBase)) == true {
            converted.pointer.pointee.pict_type = AV_PICTURE_TYPE_I
        }
        lastTimestamp = timestamp
        try input.append(converted)
    }

    func finish() throws(MediaError) {
        if let current = held {
            held = nil
            if (lastTimestamp == nil && ready == nil) || !isAtOrPastSourceEnd(current.timestamp) {
                try choose(current.frame, at: current.timestamp)
            } else if ready != nil {
                // Left out, its captions go with the last picture shown.
                ready!.captions += pendingCaptions
                Self.limit(&ready!.captions)
            }
        }
        if let ready {
            self.ready = nil
            try encode(ready.frame, at: ready.timestamp, captions: ready.captions)
        }
        try input.markAsFinished()
    }

    /// Whether an output time is at or past the source's end (its last frame's time plus the longer of the gap
    /// before it and its own duration), on the output's ticks, as ffmpeg's `fps` filter has it: a lower frame rate
    /// rounds the last frames' times up (a 60 fps clip's last frame, at 1.983 s, lands on 2.000 at 30), and that
    /// picture added a frame after the source's end (61 of a 2 s clip at 30 fps, 4 s of video from 3 s at 1 fps).
    private func isAtOrPastSourceEnd(_ timestamp: Int64) -> Bool {
        guard let last = sourceLast, let gap = sourceGap else { return false }
        let end = last + max(gap, sourceLastDuration ?? 0)
        return timestamp >= Timeline.rescale(end, from: FFmpeg.timeBaseQ, to: input.encoder.timeBase)
    }
}
