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
    private var lastTimestamp: Int64?
    private var keyFrames: KeyFrameGrid?
    /// On a resume: the latest time the first frame may have (one frame after the resume point); a later one
    /// means the input's seek skipped frames that must be encoded.
    private var firstFrameLimit: Int64?

    /// Thrown when a resumed encode's first frame comes after the frames it must start with.
    static let seekMissed = MediaError(code: "resume_seek_missed", message: "The input's seek went past the checkpoint.")

    /// - Parameter resumeAfter: a checkpoint's last presentation time (encoder time base): frames up to it were
    ///   encoded by an earlier attempt and are skipped; the first one after it starts a segment, with an IDR.
    init(encoding: VideoEncoding, sourceColors: ColorTags, input: EncodingWriterInput, timeline: Timeline,
         keyFrames: KeyFrameGrid?, resumeAfter: Int64? = nil) {
        self.encoding = encoding
        self.input = input
        self.timeline = timeline
        self.keyFrames = keyFrames
        converter = VideoConverter(encoding: encoding, sourceColors: sourceColors)
        let ticks = max(1, av_rescale_q(1, av_inv_q(encoding.frameRate), encoding.timeBase))
        frameTicks = ticks
        lastTimestamp = resumeAfter
        firstFrameLimit = resumeAfter.map { $0 + ticks }
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
        let timestamp: Int64
        if source == FFmpeg.noPTS {
            timestamp = (lastTimestamp ?? -frameTicks) + frameTicks
        } else {
            timestamp = timeline.convert(source, from: item.timeBase, to: input.encoder.timeBase)
        }
        if let limit = firstFrameLimit {
            firstFrameLimit = nil
            if timestamp > limit { throw Self.seekMissed }
        }
        // Frames that do not move time forward (non-monotonic sources, or a lower output frame rate) are dropped.
        if let last = lastTimestamp, timestamp <= last { return }
        let converted = try converter.convert(frame)
        converted.pointer.pointee.pts = timestamp
        converted.pointer.pointee.pict_type = AV_PICTURE_TYPE_NONE
        if keyFrames?.isKeyFrame(at: FFmpeg.seconds(timestamp, input.encoder.timeBase)) == true {
            converted.pointer.pointee.pict_type = AV_PICTURE_TYPE_I
        }
        lastTimestamp = timestamp
        try input.append(converted)
    }

    func finish() throws(MediaError) {
        try input.markAsFinished()
    }
}
