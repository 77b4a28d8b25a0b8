import CFFmpeg

/// Writes one output file, in the manner of `AVAssetWriter`: start a session at a source time, add inputs (encoding
/// ones configured with settings, or passthrough ones), start writing, append samples, then finish.
///
/// The file is written under a temporary name and renamed into place only by `finishWriting()`; a writer that is
/// cancelled, fails or goes away unfinished deletes what it wrote. Not thread-safe: one writer, one thread.
public final class MediaWriter {
    public let fileType: FileType
    let container: OutputContainer
    private(set) var timeline = Timeline(startSeconds: 0)
    private var encodingInputs: [EncodingWriterInput] = []
    private var sessionStarted = false
    private var writing = false

    /// Prepares a writer for `path`; nothing is created on disk until `startWriting()`.
    public init(path: String, fileType: FileType) throws(MediaError) {
        self.fileType = fileType
        container = try OutputContainer(path: path, fileType: fileType)
    }

    /// Sets the source time (seconds) that becomes the output's zero; call before adding inputs.
    public func startSession(atSourceTime seconds: Double) {
        precondition(encodingInputs.isEmpty && !writing, "startSession(atSourceTime:) comes before inputs are added")
        timeline = Timeline(startSeconds: seconds)
        sessionStarted = true
    }

    /// Adds an H.264 input.
    func addInput(video: VideoEncoding) throws(MediaError) -> EncodingWriterInput {
        try add(StreamEncoder(video: video, globalHeader: container.wantsGlobalHeader))
    }

    /// Adds an AAC input.
    func addInput(audio: AudioEncoding) throws(MediaError) -> EncodingWriterInput {
        try add(StreamEncoder(audio: audio, globalHeader: container.wantsGlobalHeader))
    }

    private func add(_ encoder: StreamEncoder) throws(MediaError) -> EncodingWriterInput {
        precondition(sessionStarted && !writing, "inputs are added after startSession and before startWriting")
        let input = try EncodingWriterInput(encoder: encoder, container: container)
        encodingInputs.append(input)
        return input
    }

    /// Adds an input that copies the packets of a source stream.
    func addPassthroughInput(copying stream: UnsafeMutablePointer<AVStream>) throws(MediaError) -> PassthroughWriterInput {
        precondition(sessionStarted && !writing, "inputs are added after startSession and before startWriting")
        return try PassthroughWriterInput(copying: stream, container: container, timeline: timeline)
    }

    /// Whether the container can carry `codec` as it is.
    func accepts(_ codec: AVCodecID) -> Bool { container.accepts(codec) }

    /// Creates the temporary file and writes the header.
    public func startWriting() throws(MediaError) {
        try container.open()
        writing = true
    }

    /// End of the last sample written, in seconds on the output timeline.
    public var lastPresentationTime: Double { container.lastPresentationTime }

    /// Marks every input finished (draining the encoders), completes the file and moves it into place.
    public func finishWriting() throws(MediaError) {
        for input in encodingInputs { try input.markAsFinished() }
        try container.finish()
        writing = false
    }

    /// Stops writing and deletes the partial file.
    public func cancelWriting() {
        container.discard()
        writing = false
    }
}
