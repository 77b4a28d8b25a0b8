import CFFmpeg
import Foundation
import Locks

/// A transcode into one file that survives being interrupted: the video is encoded into durable checkpoint
/// segments (`CheckpointVideoSink`), the audio whole by a pass of its own on another thread, and the output is
/// muxed from those pieces at the end (`CheckpointAssembler`). Run again with the same checkpoint folder after a
/// crash, a shutdown or another node's takeover, it keeps every segment that verifies, seeks the input to the first
/// one missing and goes on from there; the audio, if it was complete, is not made again.
///
/// Used by `TranscodeSession` for an output (a file, or a folder holding one) with encoded video (no thumbnails, no stream copy); the checkpoint
/// folder outlives the session, whatever happens: its owner removes it once the job has ended.
final class CheckpointedTranscode {
    /// Seconds between checkpoint segment boundaries (and forced IDRs), on the output timeline.
    static let segmentSeconds = 4.0

    private let session: TranscodeSession
    private let checkpointPath: String

    init(session: TranscodeSession, checkpointPath: String) {
        self.session = session
        self.checkpointPath = checkpointPath
    }

    /// Whether a transcode with these settings from this input is checkpointed: a file (not a ladder) whose video
    /// is encoded, with audio encoded or dropped, and no thumbnails.
    static func applies(to settings: TranscodeSettings, input reader: MediaReader) -> Bool {
        guard !settings.container.isSegmented, settings.container.holdsVideo, settings.thumbnails == nil,
              case .encode = settings.video, reader.firstVideoTrack != nil else { return false }
        if case .copy = settings.audio, reader.firstAudioTrack != nil { return false }
        return true
    }

    func run(progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        let started = ContinuousClock.now
        let settings = session.settings
        let cancellation = session.cancellation
        let checkpoint = try Checkpoint(path: checkpointPath, fingerprint: Self.fingerprint(settings, input: session.inputPath),
                                        segmentSeconds: Self.segmentSeconds)
        let directory = try session.outputDirectory.map { path throws(MediaError) in try OutputDirectory(path: path) }
        let globalHeader = settings.container.wantsGlobalHeader
        // The video pass, set up first: an encoder set up differently from the checkpoint's starts the video over.
        var video: (reader: MediaReader, output: CheckpointOutput, plan: TranscodePlan)?
        var audio: (reader: MediaReader, output: CheckpointOutput, plan: TranscodePlan)?
        var resumedFrom: Double?
        var expectedDuration = 0.0
        do throws(MediaError) {
            if !checkpoint.manifest.videoComplete {
                let reader = try MediaReader(path: session.inputPath, cancellation: cancellation)
                let output = CheckpointOutput(checkpoint: checkpoint, globalHeader: globalHeader)
                let plan = try TranscodePlan(reader: reader, output: output, settings: settings, limits: session.limits,
                                             directory: nil, pass: .video(segmentSeconds: Self.segmentSeconds))
                expectedDuration = plan.expectedDuration
                if let resume = checkpoint.manifest.resumePoint, let track = reader.firstVideoTrack {
                    resumedFrom = resume.seconds
                    // From the encoder's warm-up on, half a second early: a key frame right there still comes before it.
                    let sourceSeconds = Double(output.timeline.start) / 1_000_000 + resume.seconds - CheckpointOutput.warmUpSeconds - 0.5
                    _ = reader.seek(track: track.index, toSeconds: sourceSeconds)
                }
                video = (reader, output, plan)
            } else {
                resumedFrom = checkpoint.manifest.resumePoint?.seconds
            }
            if checkpoint.manifest.audioFile == nil, case .encode = settings.audio {
                let reader = try MediaReader(path: session.inputPath, cancellation: cancellation)
                if reader.firstAudioTrack != nil {
                    let output = CheckpointOutput(checkpoint: checkpoint, globalHeader: globalHeader)
                    let plan = try TranscodePlan(reader: reader, output: output, settings: settings, limits: session.limits,
                                                 directory: nil, pass: .audio)
                    expectedDuration = max(expectedDuration, video == nil ? plan.expectedDuration : 0)
                    audio = (reader, output, plan)
                }
            }
        } catch {
            session.onFailure?(error)
            directory?.discard()
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        if expectedDuration == 0, let end = checkpoint.manifest.segments.last?.end { expectedDuration = end }

        let reporter = ProgressReporter(duration: expectedDuration, interval: session.progressInterval, started: started,
                                        resumedFrom: resumedFrom)
        let audioRun = audio.map { pass in AudioPassThread(reader: pass.reader, output: pass.output, plan: pass.plan,
                                                           limits: session.limits, cancellation: cancellation) }
        do throws(MediaError) {
            audioRun?.start()
            if let video {
                let inputPace = settings.filters?.tempo ?? 1
                video.plan.start()
                do throws(MediaError) {
                    while let sample = try video.reader.nextSample() {
                        if cancellation.isCanceled { throw MediaError.canceled }
                        try video.plan.handle(sample)
                        let written = video.output.writtenSeconds
                        try session.limits.checkRead(seconds: written * inputPace)
                        reporter.update(written, frames: video.plan.framesEncoded, call: progress)
                    }
                    if cancellation.isCanceled { throw MediaError.canceled }
                    try video.plan.finish()
                } catch {
                    video.plan.abandon()
                    throw error
                }
                try video.output.finishWriting()
            }
            try audioRun?.join()
            let manifest = checkpoint.manifest
            guard manifest.videoComplete, !manifest.segments.isEmpty else {
                throw MediaError(code: "no_decodable_video", message: "The input's video track has no frame that could be decoded.")
            }
            if cancellation.isCanceled { throw MediaError.canceled }
            try CheckpointAssembler.assemble(manifest, from: checkpoint,
                                             into: directory?.path(settings.container.mainFileName) ?? session.outputPath,
                                             inPlace: directory != nil, fileType: settings.container, cancellation: cancellation)
            try directory?.commit()
        } catch {
            audioRun?.stop()
            session.onFailure?(error)
            video?.output.cancelWriting()
            directory?.discard()
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        let outputPath = session.outputPath
        let written = try? MediaReader(path: outputPath)
        let tracks = written?.tracks ?? []
        let hasVideo = tracks.contains { $0.mediaType == .video }
        let files = session.outputDirectory.map { OutputFile.list(directory: $0, mainType: settings.container.mimeType(hasVideo: hasVideo)) }
        let size = files.map { $0.reduce(0) { $0 + $1.size } }
            ?? (try? FileManager.default.attributesOfItem(atPath: outputPath)[.size] as? Int) ?? 0
        let framesEncoded = video?.plan.framesEncoded ?? 0
        reporter.finish(frames: framesEncoded, call: progress)
        var result = TranscodeResult(
            path: outputPath, size: size, container: settings.container, tracks: tracks,
            duration: written?.duration ?? checkpoint.manifest.segments.last?.end ?? 0,
            framesEncoded: framesEncoded, elapsed: reporter.elapsed, mimeType: settings.container.mimeType(hasVideo: hasVideo),
            files: files)
        result.resumedFrom = resumedFrom
        return result
    }

    /// What a checkpoint must have been made with to be used: this format, the settings, the input file (by size and
    /// modification time: uploads never change in place) and the encoder library.
    static func fingerprint(_ settings: TranscodeSettings, input: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let attributes = try? FileManager.default.attributesOfItem(atPath: input)
        let size = attributes?[.size] as? Int ?? -1
        let modified = (attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
        var text = "checkpoint \(CheckpointManifest.currentVersion) segments \(segmentSeconds)\n"
        text += "input \(input) \(size) \(modified)\n"
        text += "avcodec \(avcodec_version()) \(String(cString: avcodec_configuration()).count)\n"
        text += String(decoding: (try? encoder.encode(settings)) ?? Data(), as: UTF8.self)
        let hasher = SHA256Hasher()
        Array(text.utf8).withUnsafeBytes { hasher.update($0) }
        return hasher.finish()
    }
}

/// The audio pass of a checkpointed transcode, on a thread of its own: its own reader decodes the audio only, while
/// the session's thread runs the video.
private final class AudioPassThread: @unchecked Sendable {
    // @unchecked: the reader, output and plan are used by the pass's thread only, between `start` and the end of
    // `join` or `stop`; `outcome` and `stopped` are thread-safe.
    private let reader: MediaReader
    private let output: CheckpointOutput
    private let plan: TranscodePlan
    private let limits: MediaLimits
    private let cancellation: CancellationToken
    private let stopped = LockedValue(false)
    private let outcome = LockedValue<Result<Void, MediaError>?>(nil)
    private var started = false

    init(reader: MediaReader, output: CheckpointOutput, plan: TranscodePlan, limits: MediaLimits, cancellation: CancellationToken) {
        self.reader = reader
        self.output = output
        self.plan = plan
        self.limits = limits
        self.cancellation = cancellation
    }

    func start() {
        started = true
        NamedThread.start("audio-pass") { [self] in
            let result: Result<Void, MediaError>
            do throws(MediaError) {
                try run()
                result = .success(())
            } catch {
                output.cancelWriting()
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            outcome.notifyAll()
        }
    }

    private func run() throws(MediaError) {
        plan.start()
        do throws(MediaError) {
            while let sample = try reader.nextSample() {
                if cancellation.isCanceled || stopped.withLock({ $0 }) { throw MediaError.canceled }
                try plan.handle(sample)
                try limits.checkRead(seconds: output.writtenSeconds)
            }
            try plan.finish()
        } catch {
            plan.abandon()
            throw error
        }
        try output.finishWriting()
    }

    /// Waits for the pass and rethrows its error.
    func join() throws(MediaError) {
        guard started else { return }
        _ = outcome.wait { $0 != nil }
        if case .failure(let error)? = outcome.withLock({ $0 }) { throw error }
    }

    /// Stops the pass (another part failed) and waits for it.
    func stop() {
        guard started else { return }
        stopped.withLock { $0 = true }
        _ = outcome.wait { $0 != nil }
    }
}
