import CFFmpeg
import Foundation

/// Connects a `MediaReader` to a `MediaWriter`: decode → convert (scale, resample) → encode → mux, as FFmpeg's
/// `transcode.c` does, with every stage drained at the end of the input.
///
/// `run` blocks its thread for the whole transcode: call it from a worker thread, never from Swift's cooperative
/// pool. It is not thread-safe except for `cancellation`, which any thread may trigger.
public final class TranscodeSession {
    public let inputPath: String
    /// The main output file: the lone file, or in a folder `output.mp4` (...) or a ladder's `master.m3u8`.
    public let outputPath: String
    /// The folder the output is written in, when it is one (every job's is); nil for a lone file.
    public let outputDirectory: String?
    public let settings: TranscodeSettings
    public let cancellation: CancellationToken
    /// Bounds on what the input may demand (checked before decoding).
    public let limits: MediaLimits
    /// Shortest wall-clock time between two progress calls, in seconds.
    public var progressInterval = 0.05
    /// Called with the error when the transcode fails, before anything is freed: the moment to see what the
    /// process held (a child measures its memory there, to tell a refused allocation from other failures).
    public var onFailure: ((MediaError) -> Void)?
    /// A folder for durable checkpoints of the encoded video and audio (see `CheckpointedTranscode`); the same folder given to a later run of the same job resumes where this one stopped.
    /// The session never removes it: its owner does once the job has ended. nil: no checkpoints.
    public var checkpointDirectory: String?
    /// Whether `checkpointDirectory` is the caller's own (a server's folder for the job): a checkpoint found there
    /// unreadable, or other files, are cleared and the transcode starts over. Otherwise (a folder a user gave) a
    /// folder holding other files is refused, its files left alone.
    public var checkpointOwned = false

    /// A transcode into one file at `outputPath` (no ladder, no thumbnails).
    public init(inputPath: String, outputPath: String, settings: TranscodeSettings,
                cancellation: CancellationToken = CancellationToken(), limits: MediaLimits = MediaLimits()) {
        self.inputPath = inputPath
        self.outputPath = outputPath
        outputDirectory = nil
        self.settings = settings
        self.cancellation = cancellation
        self.limits = limits
    }

    /// A transcode into the folder `outputDirectory` (which must not exist yet): the main file (`output.mp4`, ...,
    /// or a ladder's playlists and segments) with the thumbnails beside it. The folder appears whole or not at all.
    public init(inputPath: String, outputDirectory: String, settings: TranscodeSettings,
                cancellation: CancellationToken = CancellationToken(), limits: MediaLimits = MediaLimits()) {
        self.inputPath = inputPath
        self.outputDirectory = outputDirectory
        outputPath = outputDirectory + "/" + settings.container.mainFileName
        self.settings = settings
        self.cancellation = cancellation
        self.limits = limits
    }

    /// Transcodes the input and reports the output's tracks (and, for a folder, its files).
    ///
    /// `progress` is called on this thread with monotonic values, at most every `progressInterval` seconds, and a
    /// last time with `presentationTime == duration` once the output is complete. On failure or cancellation the
    /// partial output is deleted and a `MediaError` says why (`canceled`, `input_truncated`, ...).
    public func run(progress: (TranscodeProgress) -> Void = { _ in }) throws(MediaError) -> TranscodeResult {
        let started = ContinuousClock.now
        if settings.container.isSegmented && outputDirectory == nil {
            throw MediaError(code: "invalid_settings", message: "container: a ladder is a folder of files; give an output folder.")
        }
        let reader: MediaReader
        do throws(MediaError) {
            reader = try MediaReader(path: inputPath, cancellation: cancellation)
        } catch {
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        if let checkpointDirectory, CheckpointedTranscode.applies(to: settings, input: reader, inFolder: outputDirectory != nil) {
            return try CheckpointedTranscode(session: self, checkpointPath: checkpointDirectory).run(reader: reader, progress: progress)
        }
        if let checkpointDirectory, outputDirectory != nil, CheckpointedLadder.applies(to: settings, input: reader) {
            return try CheckpointedLadder(session: self, checkpointPath: checkpointDirectory).run(reader: reader, progress: progress)
        }
        let directory = try outputDirectory.map { path throws(MediaError) in try OutputDirectory(path: path) }
        let output: any TranscodeOutput
        if let directory, settings.container.isSegmented {
            output = LadderWriter(root: directory.temporaryPath,
                                  segmentDuration: settings.segmentDuration ?? TranscodeSettings.defaultSegmentDuration)
        } else if let directory {
            output = try MediaWriter(path: directory.path(settings.container.mainFileName), fileType: settings.container, inPlace: true)
        } else {
            output = try MediaWriter(path: outputPath, fileType: settings.container)
        }
        let plan: TranscodePlan
        do throws(MediaError) {
            plan = try TranscodePlan(reader: reader, output: output, settings: settings, limits: limits,
                                     directory: directory?.temporaryPath)
        } catch {
            onFailure?(error)
            directory?.discard()
            throw error
        }
        let reporter = ProgressReporter(duration: plan.expectedDuration, interval: progressInterval, started: started)
        // The finished file, read once: for the storyboard's end before the folder is committed, and for the result.
        var written: MediaReader?
        do throws(MediaError) {
            try output.startWriting()
            // Seconds of input per second of output (a tempo filter changes the pace).
            try plan.run(reader: reader, output: output, cancellation: cancellation, limits: limits,
                         pace: settings.filters?.tempo ?? 1, reporter: reporter, progress: progress)
            try output.finishWriting(step: { reporter.finishingStep(frames: plan.framesEncoded, call: progress) },
                                     cancellation: cancellation)
            if let directory {
                // A file's cues last as long as the file, as its reader says (its longest track, the last
                // picture's length included); what the writer counted is where its progress stood.
                if !settings.container.isSegmented { written = try? MediaReader(path: directory.path(settings.container.mainFileName)) }
                try plan.thumbnailer?.writeCues(duration: written?.duration ?? output.writtenSeconds)
                try directory.commit(step: { reporter.finishingStep(frames: plan.framesEncoded, call: progress) })
            }
        } catch {
            onFailure?(error)
            output.cancelWriting()
            directory?.discard()
            // A read cut short by the cancellation looks like a cut-short file: say what happened.
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        let elapsed = reporter.elapsed
        var tracks: [Track]
        let duration: Double
        // A folder's files, listed once it is in place; the main file's type follows what it holds (copied video
        // is video too).
        var files: [OutputFile]?
        if settings.container.isSegmented, let outputDirectory {
            (files, tracks) = Self.ladderTracks(directory: outputDirectory, settings: settings,
                                                measured: (output as? LadderWriter)?.measured ?? [:])
            duration = output.writtenSeconds
        } else {
            let written = written ?? (try? MediaReader(path: outputPath))
            tracks = written?.tracks ?? []
            if written?.container.durationIsEstimatedFromBitRate == true {
                // A raw AAC output's length as FFmpeg estimates it from its first seconds' bit rate (5.74 s for 8.03
                // of beeps and silence): what was written is known.
                duration = output.writtenSeconds
                for index in tracks.indices { tracks[index].duration = duration }
            } else {
                duration = written?.duration ?? output.writtenSeconds
            }
            if let outputDirectory {
                files = OutputFile.list(directory: outputDirectory,
                                        mainType: settings.container.mimeType(hasVideo: tracks.contains { $0.mediaType == .video }))
            }
        }
        reporter.finish(frames: plan.framesEncoded, call: progress)
        let size = (files ?? []).reduce(0) { $0 + $1.size }
        return TranscodeResult(
            path: outputPath,
            size: files == nil ? (try? FileManager.default.attributesOfItem(atPath: outputPath)[.size] as? Int) ?? 0 : size,
            container: settings.container, tracks: tracks, duration: duration,
            framesEncoded: plan.framesEncoded, elapsed: elapsed,
            mimeType: settings.container.mimeType(hasVideo: tracks.contains { $0.mediaType == .video }),
            files: files)
    }

    /// A ladder's files, once it is in place, and its tracks as its init segments describe them, with what its
    /// segments hold (`measured`, by folder: an init segment alone has no samples to tell it).
    static func ladderTracks(directory: String, settings: TranscodeSettings,
                             measured: [String: LadderTrack.Measured]) -> ([OutputFile], [Track]) {
        let listed = OutputFile.list(directory: directory, mainType: settings.container.mimeType(hasVideo: true))
        var tracks: [Track] = listed.filter { $0.path.hasSuffix("/" + SegmentedOutput.initName) }.compactMap { file in
            guard var track = try? MediaReader(path: directory + "/" + file.path).tracks.first else { return nil }
            let folder = String(file.path.dropLast(SegmentedOutput.initName.count + 1))
            if let numbers = measured[folder] {
                track.frameRate = numbers.frameRate
                track.duration = numbers.duration
                track.bitRate = numbers.bitRate
            }
            return track
        }.sorted { ($0.mediaType == .video ? 0 : 1, -($0.height ?? 0)) < ($1.mediaType == .video ? 0 : 1, -($1.height ?? 0)) }
        for index in tracks.indices { tracks[index].index = index }
        return (listed, tracks)
    }

    /// Removes a checkpoint folder that has served (its own files only, then the folder if it is empty).
    public static func removeCheckpoint(at path: String) {
        Checkpoint.remove(path: path)
    }

    /// Reads a file's tracks without transcoding it (same locked-down opening as a transcode).
    public static func probe(path: String) throws(MediaError) -> [Track] {
        try MediaReader(path: path).tracks
    }
}
