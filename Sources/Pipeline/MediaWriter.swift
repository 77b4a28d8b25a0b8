import CFFmpeg

/// Writes one output file, in the manner of `AVAssetWriter`: start a session at a source time, add inputs (encoding
/// ones configured with settings, or passthrough ones), start writing, append samples, then finish.
///
/// The file is written under a temporary name and renamed into place only by `finishWriting()` (or in place, when
/// the folder it is in is itself temporary); a writer that is cancelled, fails or goes away unfinished deletes what
/// it wrote. One thread sets it up and finishes it; while it writes, each input may be fed from a thread of its own.
public final class MediaWriter: TranscodeOutput {
    public let fileType: FileType
    let container: OutputContainer
    private(set) var timeline = Timeline(startSeconds: 0)
    private var encodingInputs: [EncodingWriterInput] = []
    private var videoInput: EncodingWriterInput?
    private var audioInput: EncodingWriterInput?
    private var sessionStarted = false
    private var writing = false

    /// Prepares a writer for `path`; nothing is created on disk until `startWriting()`.
    public convenience init(path: String, fileType: FileType) throws(MediaError) {
        try self.init(path: path, fileType: fileType, inPlace: false)
    }

    init(path: String, fileType: FileType, inPlace: Bool) throws(MediaError) {
        self.fileType = fileType
        container = try OutputContainer(path: path, fileType: fileType, inPlace: inPlace)
    }

    /// Sets the source time (seconds) that becomes the output's zero; call before adding inputs.
    public func startSession(atSourceTime seconds: Double) {
        precondition(encodingInputs.isEmpty && !writing, "startSession(atSourceTime:) comes before inputs are added")
        timeline = Timeline(startSeconds: seconds)
        sessionStarted = true
    }

    /// Adds an H.264 input (`name` is for a ladder's folders; one file has one video track).
    func addInput(video: VideoEncoding, name: String) throws(MediaError) -> EncodingWriterInput {
        let input = try add(StreamEncoder(video: video, globalHeader: container.wantsGlobalHeader))
        videoInput = input
        return input
    }

    /// Adds an AAC input.
    func addInput(audio: AudioEncoding) throws(MediaError) -> EncodingWriterInput {
        let input = try add(StreamEncoder(audio: audio, globalHeader: container.wantsGlobalHeader))
        audioInput = input
        return input
    }

    private func add(_ encoder: StreamEncoder) throws(MediaError) -> EncodingWriterInput {
        precondition(sessionStarted && !writing, "inputs are added after startSession and before startWriting")
        let stream = try container.addStream(encoder: encoder)
        let input = EncodingWriterInput(encoder: encoder, sink: ContainerStream(container: container, index: stream))
        encodingInputs.append(input)
        return input
    }

    /// Adds an input that copies the packets of a source stream, if the container can carry its codec.
    func addPassthroughInput(copying stream: UnsafeMutablePointer<AVStream>, key: String) throws(MediaError) -> PassthroughWriterInput {
        precondition(sessionStarted && !writing, "inputs are added after startSession and before startWriting")
        let codec = stream.pointee.codecpar.pointee.codec_id
        guard container.accepts(codec) else {
            let name = String(cString: avcodec_get_name(codec))
            throw MediaError(code: "copy_not_supported",
                             message: "\(key): the input's \(name) \(key) cannot be copied into \(fileType.rawValue); encode it instead.")
        }
        return try PassthroughWriterInput(copying: stream, container: container, timeline: timeline)
    }

    /// Creates the temporary file and writes the header.
    public func startWriting() throws(MediaError) {
        try container.open()
        writing = true
    }

    /// End of the last sample written, in seconds on the output timeline.
    public var lastPresentationTime: Double { container.lastPresentationTime }

    /// Seconds of media written: the video's (the slower track, encoded on its own thread) or, past the video's
    /// end, the audio's (see `writtenSeconds(video:audio:)`); else every track's.
    var writtenSeconds: Double {
        guard let videoInput else { return container.lastPresentationTime }
        return Self.writtenSeconds(video: videoInput.progress.seconds, audio: audioInput?.progress.seconds)
    }

    /// Marks every input finished (draining the encoders), completes the file and moves it into place; `step` is
    /// called as the trailer's work advances, which `cancellation` stops (see `OutputContainer.finish`).
    func finishWriting(step: () -> Void, cancellation: CancellationToken?) throws(MediaError) {
        for input in encodingInputs { try input.markAsFinished() }
        try container.finish(step: step, cancellation: cancellation)
        writing = false
    }

    /// Stops writing and deletes the partial file.
    public func cancelWriting() {
        container.discard()
        writing = false
    }
}
