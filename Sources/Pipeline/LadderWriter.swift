import CFFmpeg
import Foundation

/// Writes an adaptive-bitrate ladder into a folder: each video rendition and the one audio track as CMAF segments
/// (`SegmentedOutput`), then the HLS master, media and I-frame playlists and the DASH manifest, all over the same
/// segment files and measured from them.
///
/// The folder itself is temporary (an `OutputDirectory`); each track is written by the thread that feeds it, and
/// finished on the session's thread once every input has drained.
final class LadderWriter: TranscodeOutput {
    private let root: String
    private let segmentDuration: Double
    private(set) var timeline = Timeline(startSeconds: 0)
    private var video: [(output: SegmentedOutput, input: EncodingWriterInput, encoding: VideoEncoding)] = []
    private var audio: (output: SegmentedOutput, input: EncodingWriterInput, encoding: AudioEncoding)?
    private var writing = false

    init(root: String, segmentDuration: Double) {
        self.root = root
        self.segmentDuration = segmentDuration
    }

    func startSession(atSourceTime seconds: Double) {
        timeline = Timeline(startSeconds: seconds)
    }

    func addInput(video encoding: VideoEncoding, name: String) throws(MediaError) -> EncodingWriterInput {
        precondition(!writing, "inputs are added before startWriting")
        let encoder = try StreamEncoder(video: encoding, globalHeader: true)
        let output = try SegmentedOutput(root: root, folder: name, encoder: encoder, segmentDuration: segmentDuration)
        let input = EncodingWriterInput(encoder: encoder, sink: output)
        video.append((output, input, encoding))
        return input
    }

    func addInput(audio encoding: AudioEncoding) throws(MediaError) -> EncodingWriterInput {
        precondition(!writing && audio == nil, "one audio input, added before startWriting")
        let encoder = try StreamEncoder(audio: encoding, globalHeader: true)
        let output = try SegmentedOutput(root: root, folder: "audio", encoder: encoder, segmentDuration: segmentDuration)
        let input = EncodingWriterInput(encoder: encoder, sink: output)
        audio = (output, input, encoding)
        return input
    }

    func addPassthroughInput(copying stream: UnsafeMutablePointer<AVStream>, key: String) throws(MediaError) -> PassthroughWriterInput {
        throw MediaError(code: "copy_not_supported", message: "\(key): a ladder encodes every track; \"copy\" is not available with hls.")
    }

    func startWriting() throws(MediaError) {
        // One offset for every track, past the longest start delay, in whole milliseconds.
        let delays = video.map(\.input.encoder.startDelay) + [audio?.input.encoder.startDelay ?? 0]
        let offset = ((delays.max() ?? 0) * 1000).rounded(.up) / 1000
        for track in video { track.output.offsetSeconds = offset }
        audio?.output.offsetSeconds = offset
        for track in video { try track.output.start() }
        try audio?.output.start()
        writing = true
    }

    /// Ends every track, then writes the playlists and the manifest from what the segments hold.
    func finishWriting() throws(MediaError) {
        for track in video {
            try track.input.markAsFinished()
            try track.output.finish()
        }
        if let audio {
            try audio.input.markAsFinished()
            try audio.output.finish()
        }
        writing = false
        var videoTracks: [LadderTrack] = []
        for track in video {
            guard let codecs = CodecString.avc(extradata: track.output.extradata) else {
                throw MediaError(code: "output_failed", message: "The \(track.output.folder) rendition's H.264 headers have no SPS.")
            }
            guard !track.output.segments.isEmpty else {
                throw MediaError(code: "no_decodable_video", message: "The input's video track has no frame that could be decoded.")
            }
            videoTracks.append(LadderTrack(
                folder: track.output.folder, codecs: codecs,
                picture: .init(width: track.encoding.width, height: track.encoding.height, frameRate: track.encoding.frameRate),
                sound: nil, timescale: track.output.timescale, offset: track.output.offset, segments: track.output.segments))
        }
        let audioTrack = audio.map { audio in
            LadderTrack(folder: audio.output.folder, codecs: CodecString.aacLC, picture: nil,
                        sound: .init(sampleRate: audio.encoding.sampleRate, channels: audio.encoding.channels),
                        timescale: audio.output.timescale, offset: audio.output.offset, segments: audio.output.segments)
        }
        for track in videoTracks + [audioTrack].compactMap({ $0 }) {
            measured[track.folder] = (track.picture.map { av_q2d($0.frameRate) }, track.duration, track.averageBitRate)
        }
        for track in videoTracks {
            try write(HLSPlaylists.media(track), to: track.folder + "/" + HLSPlaylists.mediaName)
            try write(HLSPlaylists.iFrames(track), to: track.folder + "/" + HLSPlaylists.iFramesName)
        }
        if let audioTrack, !audioTrack.segments.isEmpty {
            try write(HLSPlaylists.media(audioTrack), to: audioTrack.folder + "/" + HLSPlaylists.mediaName)
        }
        let usableAudio = audioTrack.flatMap { $0.segments.isEmpty ? nil : $0 }
        try write(DASHManifest.render(video: videoTracks, audio: usableAudio), to: DASHManifest.name)
        try write(HLSPlaylists.master(video: videoTracks, audio: usableAudio), to: FileType.hls.mainFileName)
    }

    func cancelWriting() {
        writing = false
    }

    /// What each track's segments hold, by folder, once finished: frame rate, seconds and average bits per second
    /// (an init segment alone has no samples to tell them).
    private(set) var measured: [String: (frameRate: Double?, duration: Double, bitRate: Int)] = [:]

    /// Seconds of media the slowest video rendition has written (the audio's when there is no video); once
    /// finished, the longest track's length.
    var writtenSeconds: Double {
        if let longest = measured.values.map(\.duration).max() { return longest }
        return video.isEmpty ? (audio?.input.progress.seconds ?? 0) : video.map(\.input.progress.seconds).min() ?? 0
    }

    private func write(_ text: String, to relativePath: String) throws(MediaError) {
        let path = root + "/" + relativePath
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else {
            throw MediaError(code: "output_failed", message: "Writing \(relativePath) failed.")
        }
    }
}
