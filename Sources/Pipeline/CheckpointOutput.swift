import CFFmpeg

/// The output of one pass of a checkpointed transcode: the video pass encodes into checkpoint segments, the audio
/// pass into the checkpoint's audio file. Nothing here is the job's output yet: `CheckpointAssembler` muxes the
/// pieces into it once both passes are complete.
final class CheckpointOutput: TranscodeOutput {
    private let checkpoint: Checkpoint
    private let globalHeader: Bool
    private(set) var timeline = Timeline(startSeconds: 0)
    private var video: (input: EncodingWriterInput, sink: CheckpointVideoSink)?
    private var audio: (input: EncodingWriterInput, sink: CheckpointAudioSink)?

    /// - Parameter globalHeader: whether the final container wants the encoders' headers out of band.
    init(checkpoint: Checkpoint, globalHeader: Bool) {
        self.checkpoint = checkpoint
        self.globalHeader = globalHeader
    }

    func startSession(atSourceTime seconds: Double) {
        timeline = Timeline(startSeconds: seconds)
    }

    /// The video encoder; a checkpoint whose segments another encoder set-up made is started over.
    func addInput(video encoding: VideoEncoding, name: String) throws(MediaError) -> EncodingWriterInput {
        let encoder = try StreamEncoder(video: encoding, globalHeader: globalHeader)
        let parameters = try StreamParameters(encoder: encoder)
        if let stored = checkpoint.manifest.video, stored != parameters { try checkpoint.resetVideo() }
        try checkpoint.update { $0.video = parameters }
        let sink = CheckpointVideoSink(checkpoint: checkpoint,
                                       frameTicks: max(1, av_rescale_q(1, av_inv_q(encoding.frameRate), encoder.timeBase)))
        let input = EncodingWriterInput(encoder: encoder, sink: sink)
        video = (input, sink)
        return input
    }

    func addInput(audio encoding: AudioEncoding) throws(MediaError) -> EncodingWriterInput {
        let encoder = try StreamEncoder(audio: encoding, globalHeader: globalHeader)
        let sink = try CheckpointAudioSink(checkpoint: checkpoint, parameters: try StreamParameters(encoder: encoder))
        let input = EncodingWriterInput(encoder: encoder, sink: sink)
        audio = (input, sink)
        return input
    }

    func addPassthroughInput(copying stream: UnsafeMutablePointer<AVStream>, key: String) throws(MediaError) -> PassthroughWriterInput {
        throw MediaError(code: "copy_not_supported", message: "\(key): a checkpointed transcode encodes every track it keeps.")
    }

    func startWriting() throws(MediaError) {}

    /// Ends the checkpoint's last pieces (the file itself is muxed later, by `CheckpointAssembler`).
    func finishWriting(step: () -> Void, cancellation: CancellationToken?) throws(MediaError) {
        if let video {
            try video.input.markAsFinished()
            try video.sink.finish()
        }
        if let audio {
            try audio.input.markAsFinished()
            try audio.sink.finish()
        }
    }

    func cancelWriting() {
        video?.sink.discard()
        audio?.sink.discard()
    }

    /// Seconds a resumed video encoder runs before the checkpoint's end, its packets dropped: x264's rate control
    /// and lookahead then come to the first new segment in about the state they had in the interrupted run, so the
    /// quality does not jump at the seam (started cold, an average-bit-rate encode was off by up to 2.6 dB for
    /// seconds after it; warmed up for 1 s, by up to 0.6 dB; for 2 s, by at most about 0.4 dB).
    static let warmUpSeconds = 2.0

    /// Where a resumed encoder starts: `warmUpSeconds` before `last`, the checkpoint's last presentation time, both
    /// in the encoder's `timeBase`.
    static func warmUpStart(before last: Int64, timeBase: AVRational) -> Int64 {
        last - av_rescale_q(Int64(warmUpSeconds * 1000), AVRational(num: 1, den: 1000), timeBase)
    }

    /// Moves a resumed video pass's reader to just before the encoder's warm-up (`resumeSeconds` of output, less
    /// the warm-up, half a second early: a key frame right there still comes before it), or before the earliest
    /// picture `thumbnailer` still has to take, if that is earlier. Not for a tempo filter (source time is then not
    /// output time plus the start) nor for inputs that do not seek reliably: those are read from the start, frames
    /// skipped by time.
    /// Returns whether no seek was tried, so the reader stands at the input's start: also when the place is at the
    /// video's start or before (a checkpoint of its first seconds), where the first picture may come after the
    /// warm-up's start without a frame missed. A seek tried and refused returns false: FFmpeg may have moved the
    /// reader all the same.
    static func seekToWarmUp(_ reader: MediaReader, timeline: Timeline, resumeSeconds: Double, tempo: Double,
                             thumbnailer: Thumbnailer?) -> Bool {
        guard tempo == 1, reader.seeksReliably, let track = reader.mainVideoTrack else { return true }
        let needed = thumbnailer?.earliestNeeded
        let target = min(resumeSeconds - warmUpSeconds, needed ?? .infinity)
        let source = Double(timeline.start) / 1_000_000 + target - 0.5
        let stream = reader.stream(track.index).pointee
        let videoStart = stream.start_time == FFmpeg.noPTS ? reader.startTime : FFmpeg.seconds(stream.start_time, stream.time_base)
        guard source > videoStart else { return true }
        if reader.seek(track: track.index, toSeconds: source), let needed { thumbnailer?.expectFirstPicture(by: needed) }
        return false
    }

    /// Where the video encode starts again: `warmUpSeconds` before the checkpoint's end; the sink drops packets up
    /// to the checkpoint's last presentation time.
    func resumeVideo() -> Int64? {
        guard let video, let last = checkpoint.manifest.resumePoint?.lastPresentation else { return nil }
        video.sink.skipThrough = last
        return Self.warmUpStart(before: last, timeBase: video.input.encoder.timeBase)
    }

    var writtenSeconds: Double { video?.input.progress.seconds ?? audio?.input.progress.seconds ?? 0 }
}
