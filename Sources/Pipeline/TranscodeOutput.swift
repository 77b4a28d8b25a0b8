import CFFmpeg

/// What a transcode writes: one file (`MediaWriter`), or a ladder of segmented tracks with its playlists and
/// manifest (`LadderWriter`). The plan adds inputs to it; the session starts and finishes it.
protocol TranscodeOutput: AnyObject {
    /// Where source timestamps land on the output's timeline.
    var timeline: Timeline { get }
    /// Sets the source time (seconds) that becomes the output's zero; call before adding inputs.
    func startSession(atSourceTime seconds: Double)
    /// Adds an H.264 input; a ladder adds one rendition per call, in folder `name`.
    func addInput(video: VideoEncoding, name: String) throws(MediaError) -> EncodingWriterInput
    /// Adds the AAC input.
    func addInput(audio: AudioEncoding) throws(MediaError) -> EncodingWriterInput
    /// Adds an input that copies a source stream's packets (a single file only).
    func addPassthroughInput(copying stream: UnsafeMutablePointer<AVStream>, key: String) throws(MediaError) -> PassthroughWriterInput
    /// Creates the files and writes their headers.
    func startWriting() throws(MediaError)
    /// Completes every file once every input has finished (encoders drained by their own threads). `step` is
    /// called on this thread as long work after the last sample advances (see `OutputContainer.finish`), which
    /// `cancellation` stops.
    func finishWriting(step: () -> Void, cancellation: CancellationToken?) throws(MediaError)
    /// Stops writing and deletes what was written.
    func cancelWriting()
    /// Seconds of media written so far, for progress; any thread may ask.
    var writtenSeconds: Double { get }
    /// See the extension.
    func resumeVideo() -> Int64?
    /// See the extension.
    var tracksStartAtZero: Bool { get }
}

extension TranscodeOutput {
    /// Completes every file, with no one to tell how it goes.
    func finishWriting() throws(MediaError) {
        try finishWriting(step: {}, cancellation: nil)
    }

    /// Where a checkpointed video's encode starts again (encoder time base): called once, after the video input is
    /// added, and the output then drops what the checkpoint already holds. nil: the video starts at the beginning.
    func resumeVideo() -> Int64? { nil }

    /// Whether every encoded track starts at the output's zero: audio that starts later gets silence before it, and
    /// video its first picture held from zero. For segments, whose playlists place them by adding up lengths from
    /// zero (and whose first segments must start at the same time in every playlist). A file keeps a late start as
    /// it is (its edit list says where each track begins).
    var tracksStartAtZero: Bool { false }

    /// Seconds of output written, from the video's and the audio's: the video's (it lags the audio, encoded on
    /// threads of its own behind frame queues and x264's lookahead, a second or two), unless the audio is further
    /// ahead than any such lag: then the video has no pictures there (its track ended, as a still picture's single
    /// frame over a podcast, or has a gap), and the audio says how far the job is; a job whose progress stood still
    /// there would be failed as stalled.
    static func writtenSeconds(video: Double, audio: Double?) -> Double {
        guard let audio, audio - video > videoLag else { return video }
        return audio - videoLag
    }

    /// How far, in seconds, the audio may run ahead of video that is still coming.
    static var videoLag: Double { 5 }
}
