import CFFmpeg
import Foundation
import Locks

/// A transcode into one file that survives being interrupted: the video is encoded into durable checkpoint
/// segments (`CheckpointVideoSink`), the audio whole by a pass of its own on another thread, and the output is
/// muxed from those pieces at the end (`CheckpointAssembler`). Run again with the same checkpoint folder after a
/// crash, a shutdown or another node's takeover, it keeps every segment that verifies, seeks the input to the first
/// one missing and goes on from there; the audio, if it was complete, is not made again.
///
/// Thumbnails, poster and storyboard are taken by the video pass into the checkpoint's `stills/` folder and kept
/// across attempts too (`CheckpointStills`).
///
/// Used by `TranscodeSession` for an output (a file, or a folder holding one) with encoded video and no stream copy;
/// the checkpoint folder outlives the session, whatever happens: its owner removes it once the job has ended.
final class CheckpointedTranscode {
    /// Seconds between checkpoint segment boundaries (and forced IDRs), on the output timeline: the key-frame
    /// interval the settings give (2 s unless set), at least a second (a multiple of the interval).
    /// Settings the input cannot take give 2 s: the plan then fails with its own error, after the input's limits.
    static func segmentSeconds(_ settings: TranscodeSettings, reader: MediaReader) -> Double {
        guard case .encode(let base) = settings.video, let track = reader.mainVideoTrack,
              let encoding = try? VideoEncoding.resolve(track: track, stream: reader.stream(track.index), settings: base,
                                                        filters: settings.filters) else { return 2 }
        let interval = encoding.keyFrameSeconds
        guard interval.isFinite, interval > 0 else { return 2 }
        return interval * max(1, (1 / interval).rounded(.up))
    }

    private let session: TranscodeSession
    private let checkpointPath: String

    init(session: TranscodeSession, checkpointPath: String) {
        self.session = session
        self.checkpointPath = checkpointPath
    }

    /// Whether a transcode with these settings from this input is checkpointed: a file (not a ladder) whose video
    /// is encoded, with audio encoded or dropped, and thumbnails only into an output folder (`inFolder`).
    static func applies(to settings: TranscodeSettings, input reader: MediaReader, inFolder: Bool) -> Bool {
        guard !settings.container.isSegmented, settings.container.holdsVideo, settings.thumbnails == nil || inFolder,
              case .encode = settings.video, reader.mainVideoTrack != nil else { return false }
        if case .copy = settings.audio, reader.mainAudioTrack != nil { return false }
        return true
    }

    /// - Parameter firstReader: the session's reader of the input, nothing read from it yet (the video pass reads
    ///   with it).
    func run(reader firstReader: MediaReader, progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        let started = ContinuousClock.now
        let settings = session.settings
        let cancellation = session.cancellation
        let segmentSeconds = Self.segmentSeconds(settings, reader: firstReader)
        var check = CheckpointCheckProgress(started: started, interval: session.progressInterval)
        let checkpoint = try Checkpoint(path: checkpointPath, fingerprint: Self.fingerprint(settings, input: session.inputPath),
                                        segmentSeconds: segmentSeconds, owned: session.checkpointOwned) { check.step(progress) }
        let stills = settings.thumbnails == nil ? nil : try CheckpointStills(checkpoint: checkpoint)
        if let stills, checkpoint.manifest.videoComplete, !stills.holds(checkpoint.manifest.stills) {
            // The pictures are taken with the video: without them, it is made again.
            try checkpoint.resetVideo()
        }
        let directory = try session.outputDirectory.map { path throws(MediaError) in try OutputDirectory(path: path) }
        var video: VideoPass?
        var audio: AudioPassThread?
        var expectedDuration = 0.0
        // The assembled file, read once: for the storyboard's end before the folder is committed, and for the result.
        var written: MediaReader?
        do throws(MediaError) {
            if !checkpoint.manifest.videoComplete {
                // Set up first: an encoder set up differently from the checkpoint's starts the video over.
                video = try VideoPass(reader: firstReader, checkpoint: checkpoint, stills: stills, session: session,
                                      segmentSeconds: segmentSeconds, seek: true)
                expectedDuration = video!.plan.expectedDuration
            }
            if checkpoint.manifest.audioFile == nil, case .encode = settings.audio {
                let passCancellation = AudioPassThread.token(following: cancellation)
                let reader = try MediaReader(path: session.inputPath, cancellation: passCancellation)
                if reader.mainAudioTrack != nil {
                    let output = CheckpointOutput(checkpoint: checkpoint, globalHeader: settings.container.wantsGlobalHeader)
                    let plan = try TranscodePlan(reader: reader, output: output, settings: settings, limits: session.limits,
                                                 directory: nil, pass: .audio)
                    if video == nil { expectedDuration = plan.expectedDuration }
                    audio = AudioPassThread(reader: reader, output: output, plan: plan, limits: session.limits,
                                           pace: settings.filters?.tempo ?? 1, cancellation: passCancellation)
                }
            }
        } catch {
            video?.output.cancelWriting()
            session.onFailure?(error)
            directory?.discard()
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        if expectedDuration == 0, let end = checkpoint.manifest.segments.last?.end { expectedDuration = end }
        // Once the passes are set up: an encoder set up differently from the checkpoint's started the video over.
        let resumedFrom = checkpoint.manifest.resumePoint?.seconds
        let reporter = ProgressReporter(duration: expectedDuration, interval: session.progressInterval, started: started,
                                        resumedFrom: resumedFrom, checkedSteps: check.steps)
        do throws(MediaError) {
            audio?.start()
            if var pass = video {
                do throws(MediaError) {
                    try pass.run(reporter: reporter, audio: audio, progress: progress)
                } catch where error.code == VideoEncodeSide.seekMissed.code {
                    // The input's seek skipped frames: read it from the start instead, skipping up to the checkpoint.
                    pass.output.cancelWriting()
                    pass = try VideoPass(reader: try MediaReader(path: session.inputPath, cancellation: cancellation),
                                         checkpoint: checkpoint, stills: stills, session: session, segmentSeconds: segmentSeconds,
                                         seek: false)
                    video = pass
                    try pass.run(reporter: reporter, audio: audio, progress: progress)
                }
            }
            let framesEncoded = video?.plan.framesEncoded ?? 0
            try audio?.join { seconds in reporter.catchUp(audioSeconds: seconds, frames: framesEncoded, call: progress) }
            // The encoders and their pictures are done with: they go before the file is assembled, which takes a
            // while for a long film (the reader freed its decoders at the end of the input).
            video = nil
            audio = nil
            let manifest = checkpoint.manifest
            guard manifest.videoComplete, !manifest.segments.isEmpty else {
                throw MediaError(code: "no_decodable_video", message: "The input's video track has no frame that could be decoded.")
            }
            if cancellation.isCanceled { throw MediaError.canceled }
            let frames = manifest.videoFrames
            let step = { reporter.finishingStep(frames: frames, call: progress) }
            let assembled = directory?.path(settings.container.mainFileName) ?? session.outputPath
            try CheckpointAssembler.assemble(manifest, from: checkpoint, into: assembled,
                                             inPlace: directory != nil, fileType: settings.container, cancellation: cancellation,
                                             step: step)
            written = try? MediaReader(path: assembled)
            if let stills, let directory {
                try stills.link(manifest.stills, into: directory, duration: written?.duration ?? manifest.segments.last?.end ?? 0, step: step)
            }
            try directory?.commit(step: step)
        } catch {
            audio?.stop()
            session.onFailure?(error)
            video?.output.cancelWriting()
            directory?.discard()
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        let outputPath = session.outputPath
        let tracks = written?.tracks ?? []
        let hasVideo = tracks.contains { $0.mediaType == .video }
        let files = session.outputDirectory.map { OutputFile.list(directory: $0, mainType: settings.container.mimeType(hasVideo: hasVideo)) }
        let size = files.map { $0.reduce(0) { $0 + $1.size } }
            ?? (try? FileManager.default.attributesOfItem(atPath: outputPath)[.size] as? Int) ?? 0
        let framesEncoded = checkpoint.manifest.videoFrames
        reporter.finish(frames: framesEncoded, call: progress)
        var result = TranscodeResult(
            path: outputPath, size: size, container: settings.container, tracks: tracks,
            duration: written?.duration ?? checkpoint.manifest.segments.last?.end ?? 0,
            framesEncoded: framesEncoded, elapsed: reporter.elapsed, mimeType: settings.container.mimeType(hasVideo: hasVideo),
            files: files)
        result.resumedFrom = resumedFrom
        return result
    }

    /// What a checkpoint must have been made with to be used: this format, the settings, the input file (by name,
    /// inode, size and modification time: uploads never change in place), the watermark's image (the same way) and
    /// the encoder library. The file's name and inode, not its path as given: the same file reached another way
    /// (`./in.mp4`, an absolute path, a shared folder mounted elsewhere on another node, whose server keeps the
    /// inode) started over. The file a symbolic link points at, not the link: FileManager reads a link's own
    /// attributes, so a file replaced behind an unchanged link (a take rendered again) resumed, splicing the old
    /// file's first part onto the new one's rest.
    static func fingerprint(_ settings: TranscodeSettings, input: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        func identity(_ given: String) -> String {
            let path = URL(fileURLWithPath: given).resolvingSymlinksInPath().path
            let attributes = try? FileManager.default.attributesOfItem(atPath: path)
            let size = attributes?[.size] as? Int ?? -1
            let modified = (attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
            let inode = attributes?[.systemFileNumber] as? Int ?? 0
            return "\(path.split(separator: "/").last ?? "") \(inode) \(size) \(modified)"
        }
        var text = "checkpoint \(CheckpointManifest.currentVersion)\n"
        text += "input \(identity(input))\n"
        if let image = settings.filters?.video?.watermark?.imagePath { text += "watermark \(identity(image))\n" }
        text += "avcodec \(avcodec_version()) \(String(cString: avcodec_configuration()).count)\n"
        text += "tone mapping \(ToneMapping.method)\n"
        text += String(decoding: (try? encoder.encode(settings)) ?? Data(), as: UTF8.self)
        let hasher = SHA256Hasher()
        Array(text.utf8).withUnsafeBytes { hasher.update($0) }
        return hasher.finish()
    }
}

/// The video pass of a checkpointed transcode: its reader (moved to the checkpoint's resume point when the input
/// seeks reliably), output and plan, run on the session's thread.
private struct VideoPass {
    let reader: MediaReader
    let output: CheckpointOutput
    let plan: TranscodePlan
    private let session: TranscodeSession
    private let checkpoint: Checkpoint
    private let stills: CheckpointStills?

    init(reader: MediaReader, checkpoint: Checkpoint, stills: CheckpointStills?, session: TranscodeSession,
         segmentSeconds: Double, seek: Bool) throws(MediaError) {
        self.reader = reader
        self.session = session
        self.checkpoint = checkpoint
        self.stills = stills
        let settings = session.settings
        output = CheckpointOutput(checkpoint: checkpoint, globalHeader: settings.container.wantsGlobalHeader)
        plan = try TranscodePlan(reader: reader, output: output, settings: settings, limits: session.limits,
                                 directory: stills?.path, pass: .video(segmentSeconds: segmentSeconds))
        let fromTheStart = checkpoint.manifest.resumePoint.map { resume in
            !seek || CheckpointOutput.seekToWarmUp(reader, timeline: output.timeline, resumeSeconds: resume.seconds,
                                                   tempo: settings.filters?.tempo ?? 1, thumbnailer: plan.thumbnailer)
        } ?? true
        if fromTheStart { plan.readsFromTheStart() }
    }

    /// Reads, encodes and checkpoints the video (and takes the pictures) to its end; stops early if the audio pass
    /// fails.
    func run(reporter: ProgressReporter, audio: AudioPassThread?, progress: (TranscodeProgress) -> Void) throws(MediaError) {
        try plan.run(reader: reader, output: output, cancellation: session.cancellation, limits: session.limits,
                     pace: session.settings.filters?.tempo ?? 1, reporter: reporter, progress: progress) { audio?.failure }
        if let stills, let thumbnailer = plan.thumbnailer {
            // Recorded before the video is complete: a complete video always has its pictures.
            let frames = plan.framesEncoded
            let record = try stills.record(thumbnailer, step: { reporter.finishingStep(frames: frames, call: progress) })
            try checkpoint.update { $0.stills = record }
        }
        try output.finishWriting()
    }
}
