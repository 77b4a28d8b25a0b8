import CFFmpeg
import Foundation

/// Writes an adaptive-bitrate ladder into a folder: each video rendition and the one audio track as CMAF segments
/// (`SegmentedOutput`), then the HLS master, media and I-frame playlists and the DASH manifest, all over the same
/// segment files and measured from them.
///
/// The folder itself is temporary (an `OutputDirectory`); each track is written by the thread that feeds it, and
/// finished on the session's thread once every input has drained.
final class LadderWriter: TranscodeOutput {
    /// An HLS playlist lists its segments' lengths from zero: audio that started 3 s late was placed 3 s early by a
    /// player (MSE players buffered from its start, skipping the video's first seconds), and seeks took the wrong
    /// segment; so was video that started after its audio.
    var tracksStartAtZero: Bool { true }

    private let root: String
    private let segmentDuration: Double
    private(set) var timeline = Timeline(startSeconds: 0)
    private var video: [(output: SegmentedOutput, input: EncodingWriterInput, encoding: VideoEncoding)] = []
    private var audio: (output: SegmentedOutput, input: EncodingWriterInput, encoding: AudioEncoding)?
    private var writing = false

    /// A checkpointed ladder: told of each track's segments once they are on disk (folder, segment, its latest
    /// presentation time in the encoder's time base).
    var journal: ((String, SegmentedOutput.Segment, Int64) -> MediaError?)?
    /// A resumed ladder: per folder, the segments an earlier attempt finished and the latest presentation time they
    /// hold (encoder time base); those tracks continue after them.
    var resume: [String: (segments: [SegmentedOutput.Segment], last: Int64)] = [:]
    /// The time offset of every track's files, when it is decided outside (a ladder written in two passes, one for
    /// the video and one for the audio, must use one offset); nil: from this writer's encoders.
    var offsetOverride: Double?
    /// Whether `finishWriting` writes the playlists and the manifest (not when the ladder is written in passes).
    var writesPlaylists = true
    private var lastResume: Int64?

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
        attach(output, folder: name, encoder: encoder)
        let input = EncodingWriterInput(encoder: encoder, sink: output)
        video.append((output, input, encoding))
        return input
    }

    /// Hooks a track to the journal and continues it where an earlier attempt stopped.
    private func attach(_ output: SegmentedOutput, folder: String, encoder: StreamEncoder) {
        if let journal { output.journal = { segment, last in journal(folder, segment, last) } }
        lastResume = nil
        guard let earlier = resume[folder] else { return }
        output.resume(segments: earlier.segments, skipThrough: earlier.last)
        lastResume = CheckpointOutput.warmUpStart(before: earlier.last, timeBase: encoder.timeBase)
    }

    /// What each track's playlists will need, by folder, once writing has started (segments not included).
    func trackRecords() throws(MediaError) -> [String: CheckpointManifest.LadderTrackRecord] {
        var records: [String: CheckpointManifest.LadderTrackRecord] = [:]
        for (index, track) in video.enumerated() {
            guard let codecs = CodecString.avc(extradata: track.output.extradata) else {
                throw MediaError(code: "output_failed", message: "The \(track.output.folder) rendition's H.264 headers have no SPS.")
            }
            records[track.output.folder] = .init(
                order: index, codecs: codecs, width: track.encoding.width, height: track.encoding.height,
                frameRate: [track.encoding.frameRate.num, track.encoding.frameRate.den],
                videoRange: track.encoding.colors.videoRange, timescale: track.output.timescale, offset: track.output.offset)
        }
        if let audio {
            records[audio.output.folder] = .init(
                order: Int.max, codecs: CodecString.aacLC, sampleRate: audio.encoding.sampleRate, channels: audio.encoding.channels,
                timescale: audio.output.timescale, offset: audio.output.offset)
        }
        return records
    }

    /// Where the rendition added last starts encoding again (see `TranscodeOutput.resumeVideo`).
    func resumeVideo() -> Int64? { lastResume }

    /// Seconds each encoder's first packet may come before its first frame (B-frame delay, AAC priming).
    var startDelays: [Double] { video.map(\.input.encoder.startDelay) + [audio?.input.encoder.startDelay].compactMap { $0 } }

    /// The offset for these delays, in whole milliseconds.
    static func offset(for delays: [Double]) -> Double { ((delays.max() ?? 0) * 1000).rounded(.up) / 1000 }

    func addInput(audio encoding: AudioEncoding) throws(MediaError) -> EncodingWriterInput {
        precondition(!writing && audio == nil, "one audio input, added before startWriting")
        let encoder = try StreamEncoder(audio: encoding, globalHeader: true)
        let output = try SegmentedOutput(root: root, folder: "audio", encoder: encoder, segmentDuration: segmentDuration)
        attach(output, folder: "audio", encoder: encoder)
        let input = EncodingWriterInput(encoder: encoder, sink: output)
        audio = (output, input, encoding)
        return input
    }

    func addPassthroughInput(copying stream: UnsafeMutablePointer<AVStream>, key: String) throws(MediaError) -> PassthroughWriterInput {
        throw MediaError(code: "copy_not_supported", message: "\(key): a ladder encodes every track; \"copy\" is not available with hls.")
    }

    func startWriting() throws(MediaError) {
        // One offset for every track, past the longest start delay, in whole milliseconds.
        let offset = offsetOverride ?? Self.offset(for: startDelays)
        for track in video { track.output.offsetSeconds = offset }
        audio?.output.offsetSeconds = offset
        for track in video { try track.output.start() }
        try audio?.output.start()
        writing = true
    }

    /// Ends every track, then writes the playlists and the manifest from what the segments hold (short work: the
    /// segments are written as they come).
    func finishWriting(step: () -> Void, cancellation: CancellationToken?) throws(MediaError) {
        for track in video {
            try track.input.markAsFinished()
            try track.output.finish()
        }
        if let audio {
            try audio.input.markAsFinished()
            try audio.output.finish()
        }
        writing = false
        guard writesPlaylists else { return }
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
                picture: .init(width: track.encoding.width, height: track.encoding.height, frameRate: track.encoding.frameRate,
                               videoRange: track.encoding.colors.videoRange),
                sound: nil, timescale: track.output.timescale, offset: track.output.offset, segments: track.output.segments))
        }
        let audioTrack = audio.map { audio in
            LadderTrack(folder: audio.output.folder, codecs: CodecString.aacLC, picture: nil,
                        sound: .init(sampleRate: audio.encoding.sampleRate, channels: audio.encoding.channels),
                        timescale: audio.output.timescale, offset: audio.output.offset, segments: audio.output.segments)
        }
        measured = try Self.writePlaylists(root: root, video: videoTracks, audio: audioTrack)
    }

    /// Writes the media, I-frame and master playlists and the DASH manifest for these tracks into `root`; returns
    /// what each track holds, by folder.
    static func writePlaylists(root: String, video videoTracks: [LadderTrack], audio audioTrack: LadderTrack?) throws(MediaError)
        -> [String: LadderTrack.Measured] {
        var measured: [String: LadderTrack.Measured] = [:]
        for track in videoTracks + [audioTrack].compactMap({ $0 }) {
            measured[track.folder] = track.measured
        }
        // The playlists state one target duration (an audio track without segments has no playlist).
        let usableAudio = audioTrack.flatMap { $0.segments.isEmpty ? nil : $0 }
        let shared = LadderTrack.sharingTarget(videoTracks + [usableAudio].compactMap { $0 })
        let video = Array(shared.prefix(videoTracks.count))
        let audio = usableAudio == nil ? nil : shared.last
        for track in video {
            try write(HLSPlaylists.media(track), to: track.folder + "/" + HLSPlaylists.mediaName, in: root)
            try write(HLSPlaylists.iFrames(track), to: track.folder + "/" + HLSPlaylists.iFramesName, in: root)
        }
        if let audio {
            try write(HLSPlaylists.media(audio), to: audio.folder + "/" + HLSPlaylists.mediaName, in: root)
        }
        try write(DASHManifest.render(video: video, audio: audio), to: DASHManifest.name, in: root)
        try write(HLSPlaylists.master(video: video, audio: audio), to: FileType.hls.mainFileName, in: root)
        return measured
    }

    func cancelWriting() {
        writing = false
    }

    /// What each track's segments hold, by folder, once finished: frame rate, seconds and average bits per second
    /// (an init segment alone has no samples to tell them).
    private(set) var measured: [String: LadderTrack.Measured] = [:]

    /// Seconds of media the slowest video rendition has written or, past the video's end, the audio (see
    /// `writtenSeconds(video:audio:)`; the audio's alone when there is no video); once finished, where the last
    /// track ends.
    var writtenSeconds: Double {
        if !measured.isEmpty { return LadderTrack.Measured.end(of: measured) }
        let audioSeconds = audio?.input.progress.seconds
        guard let slowest = video.map(\.input.progress.seconds).min() else { return audioSeconds ?? 0 }
        return Self.writtenSeconds(video: slowest, audio: audioSeconds)
    }

    private static func write(_ text: String, to relativePath: String, in root: String) throws(MediaError) {
        let path = root + "/" + relativePath
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else {
            throw MediaError(code: "output_failed", message: "Writing \(relativePath) failed.")
        }
    }
}
