import CFFmpeg
import Foundation

/// A ladder (`"container": "hls"`) that survives being interrupted, as `CheckpointedTranscode` does for one file:
/// every rendition and the audio are written as segments into the checkpoint's `ladder/` folder, each segment
/// flushed to disk and listed in the manifest before the next; the audio by a pass of its own on another thread.
/// Run again with the same checkpoint, it keeps the segments every rendition finished (the key frames and segment
/// boundaries are the same in all of them), seeks the input and continues each rendition after them, with its
/// encoder warmed up first. Thumbnails, poster and storyboard are kept across attempts the same way
/// (`CheckpointStills`). The playlists and the manifest are written from the records at the end, and the files
/// are linked into the output folder, which then appears whole.
final class CheckpointedLadder {
    private let session: TranscodeSession
    private let checkpointPath: String

    init(session: TranscodeSession, checkpointPath: String) {
        self.session = session
        self.checkpointPath = checkpointPath
    }

    /// Whether a ladder with these settings from this input is checkpointed: its video is encoded.
    static func applies(to settings: TranscodeSettings, input reader: MediaReader) -> Bool {
        guard settings.container.isSegmented, case .encode = settings.video,
              reader.mainVideoTrack != nil else { return false }
        return true
    }

    /// A pass of the ladder: its reader, writer and plan.
    private struct Pass {
        let reader: MediaReader
        let writer: LadderWriter
        let plan: TranscodePlan
        /// The audio pass's own token (`AudioPassThread.token(following:)`); the video pass's is the session's.
        var cancellation: CancellationToken?
    }

    /// - Parameter firstReader: the session's reader of the input, nothing read from it yet (the video pass reads
    ///   with it).
    func run(reader firstReader: MediaReader, progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        let started = ContinuousClock.now
        let settings = session.settings
        let cancellation = session.cancellation
        let segmentDuration = settings.segmentDuration ?? TranscodeSettings.defaultSegmentDuration
        let checkpoint = try Checkpoint(path: checkpointPath, fingerprint: CheckpointedTranscode.fingerprint(settings, input: session.inputPath),
                                        segmentSeconds: segmentDuration, owned: session.checkpointOwned)
        let root = checkpoint.file(Checkpoint.ladderFolder)
        let stills = settings.thumbnails == nil ? nil : try CheckpointStills(checkpoint: checkpoint)
        let directory = try OutputDirectory(path: session.outputDirectory!)

        // What an earlier attempt left: the segments every rendition finished (renditions ahead are cut back), as
        // far as they are all in place. A segment's file is written and synced before it is recorded, but a power
        // cut may still lose its new name; one missing, of another size or (where recorded) another SHA-256, and
        // everything from it is made again.
        let stored = checkpoint.manifest.ladder
        // Each segment is read whole to check it (`CheckpointCheckProgress`); a cancel stops it.
        var check = CheckpointCheckProgress(started: started, interval: session.progressInterval)
        func inPlace(_ record: CheckpointManifest.LadderTrackRecord) -> Int {
            record.segments.prefix { segment in
                guard !cancellation.isCanceled else { return false }
                let file = root + "/" + segment.path
                defer { check.step(progress) }
                return (try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? Int == segment.bytes
                    && (segment.sha256 == nil || SHA256Hasher.file(atPath: file) == segment.sha256)
            }.count
        }
        let renditions = stored.filter { $0.value.isVideo }
        let whole = renditions.mapValues(inPlace)
        var kept = renditions.isEmpty ? 0 : whole.values.min()!
        var videoComplete = !renditions.isEmpty && renditions.values.allSatisfy(\.complete)
            && Set(renditions.values.map(\.segments.count)).count == 1 && renditions.allSatisfy { whole[$0.key] == $0.value.segments.count }
        if videoComplete, let stills, !stills.holds(checkpoint.manifest.stills) {
            // The pictures are taken with the video: without them, it is made again.
            videoComplete = false
            kept = 0
        }
        var resume: [String: (segments: [SegmentedOutput.Segment], last: Int64)] = [:]
        if !videoComplete && kept > 0 {
            for (folder, record) in renditions { resume[folder] = (Array(record.segments.prefix(kept)), record.lastPresentation[kept - 1]) }
        }
        let audioComplete = stored["audio"].map { $0.complete && inPlace($0) == $0.segments.count } == true
        if cancellation.isCanceled { throw MediaError.canceled }
        try checkpoint.update { manifest in
            for folder in renditions.keys where !videoComplete {
                manifest.ladder[folder]?.segments = Array(stored[folder]!.segments.prefix(kept))
                manifest.ladder[folder]?.lastPresentation = Array(stored[folder]!.lastPresentation.prefix(kept))
                manifest.ladder[folder]?.complete = false
            }
            if !videoComplete { manifest.stills = nil }
            if !audioComplete { manifest.ladder["audio"] = nil }
        }
        let resumedFrom: Double? = videoComplete ? nil : renditions.first.flatMap { _, record in
            guard kept > 0 else { return nil }
            let last = record.segments[kept - 1]
            return Double(last.start + last.duration - record.offset) / Double(record.timescale)
        }

        let journal: (String, SegmentedOutput.Segment, Int64) -> MediaError? = { folder, segment, last in
            do throws(MediaError) {
                try checkpoint.append(.ladder(folder: folder, segment: segment, lastPresentation: last))
            } catch {
                return error
            }
            return nil
        }
        func makeVideo(reader given: MediaReader? = nil, seek: Bool) throws(MediaError) -> Pass {
            let reader: MediaReader
            if let given { reader = given } else { reader = try MediaReader(path: session.inputPath, cancellation: cancellation) }
            let writer = LadderWriter(root: root, segmentDuration: segmentDuration)
            writer.writesPlaylists = false
            writer.resume = resume
            writer.journal = journal
            let plan = try TranscodePlan(reader: reader, output: writer, settings: settings, limits: session.limits,
                                         directory: stills?.path, pass: .video(segmentSeconds: segmentDuration))
            let fromTheStart = resumedFrom.map { seconds in
                !seek || CheckpointOutput.seekToWarmUp(reader, timeline: writer.timeline, resumeSeconds: seconds,
                                                       tempo: settings.filters?.tempo ?? 1, thumbnailer: plan.thumbnailer)
            } ?? true
            if fromTheStart { plan.readsFromTheStart() }
            return Pass(reader: reader, writer: writer, plan: plan)
        }
        var video: Pass?
        var audio: Pass?
        var audioThread: AudioPassThread?
        do throws(MediaError) {
            if !videoComplete { video = try makeVideo(reader: firstReader, seek: true) }
            if !audioComplete, case .encode = settings.audio {
                let passCancellation = AudioPassThread.token(following: cancellation)
                let reader = try MediaReader(path: session.inputPath, cancellation: passCancellation)
                if reader.mainAudioTrack != nil {
                    let writer = LadderWriter(root: root, segmentDuration: segmentDuration)
                    writer.writesPlaylists = false
                    writer.journal = journal
                    let plan = try TranscodePlan(reader: reader, output: writer, settings: settings, limits: session.limits,
                                                 directory: nil, pass: .audio)
                    audio = Pass(reader: reader, writer: writer, plan: plan, cancellation: passCancellation)
                }
            }
            // One offset for every track of every attempt: decided once, from every encoder's start delay.
            let offset = checkpoint.manifest.ladderOffset
                ?? LadderWriter.offset(for: (video?.writer.startDelays ?? []) + (audio?.writer.startDelays ?? []))
            try checkpoint.update { $0.ladderOffset = offset }
            for pass in [video, audio].compactMap({ $0 }) {
                pass.writer.offsetOverride = offset
                try pass.writer.startWriting()
                let records = try pass.writer.trackRecords()
                try checkpoint.update { manifest in
                    for (folder, var record) in records {
                        record.segments = manifest.ladder[folder]?.segments ?? []
                        record.lastPresentation = manifest.ladder[folder]?.lastPresentation ?? []
                        manifest.ladder[folder] = record
                    }
                }
            }
            if let audio {
                // The sound is recorded whole as soon as its pass ends: recorded after the video's, an attempt
                // interrupted in between (most are: the sound's pass is the quicker) encoded it all again.
                audioThread = AudioPassThread(reader: audio.reader, output: audio.writer, plan: audio.plan, limits: session.limits,
                                              pace: settings.filters?.tempo ?? 1, cancellation: audio.cancellation ?? cancellation) { () throws(MediaError) in
                    try checkpoint.update { $0.ladder["audio"]?.complete = true }
                }
            }
        } catch {
            session.onFailure?(error)
            directory.discard()
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        let reporter = ProgressReporter(duration: video?.plan.expectedDuration ?? audio?.plan.expectedDuration ?? 0,
                                        interval: session.progressInterval, started: started, resumedFrom: resumedFrom,
                                        checkedSteps: check.steps)
        do throws(MediaError) {
            audioThread?.start()
            if var pass = video {
                do throws(MediaError) {
                    try encode(pass, reporter: reporter, audio: audioThread, progress: progress)
                } catch where error.code == VideoEncodeSide.seekMissed.code {
                    // The input's seek skipped frames: read it from the start instead, skipping up to the checkpoint.
                    pass.writer.cancelWriting()
                    pass = try makeVideo(seek: false)
                    video = pass
                    pass.writer.offsetOverride = checkpoint.manifest.ladderOffset
                    try pass.writer.startWriting()
                    try encode(pass, reporter: reporter, audio: audioThread, progress: progress)
                }
                // The pictures are recorded with the complete video: a complete video always has its pictures.
                let frames = pass.plan.framesEncoded
                let record = try stills.map { stills throws(MediaError) in
                    try stills.record(pass.plan.thumbnailer!, step: { reporter.finishingStep(frames: frames, call: progress) })
                }
                try checkpoint.update { manifest in
                    for folder in manifest.ladder.keys where manifest.ladder[folder]!.isVideo { manifest.ladder[folder]!.complete = true }
                    manifest.stills = record
                }
            }
            let videoFrames = video?.plan.framesEncoded ?? 0
            try audioThread?.join { seconds in reporter.catchUp(audioSeconds: seconds, frames: videoFrames, call: progress) }
            if cancellation.isCanceled { throw MediaError.canceled }
            // Linking and flushing every file of a long ladder takes a while on slow storage: each file is a step of
            // the finishing, or the watchdog would take it for a stall (and the checkpoint would go with the job).
            let step = { reporter.finishingStep(frames: videoFrames, call: progress) }
            let measured = try assemble(checkpoint.manifest, root: root, into: directory, step: step)
            try stills?.link(checkpoint.manifest.stills, into: directory, duration: LadderTrack.Measured.end(of: measured), step: step)
            try directory.commit(step: step)
            let (files, tracks) = TranscodeSession.ladderTracks(directory: session.outputDirectory!, settings: settings, measured: measured)
            // The first rendition's frames, as its segments counted them; from its length and frame rate for a
            // checkpoint written before they were counted (a variable frame rate's are then off: 1196 for 1107).
            let first = checkpoint.manifest.ladder.values.filter(\.isVideo).min { $0.order < $1.order }
            let framesEncoded = first.map { record in
                if record.segments.allSatisfy({ $0.packets != nil }) { return record.segments.reduce(0) { $0 + ($1.packets ?? 0) } }
                let seconds = Double(record.segments.reduce(0) { $0 + $1.duration }) / Double(record.timescale)
                let rate = Double(record.frameRate?[0] ?? 0) / Double(max(1, record.frameRate?[1] ?? 1))
                return Int((seconds * rate).rounded())
            } ?? 0
            reporter.finish(frames: framesEncoded, call: progress)
            var result = TranscodeResult(
                path: session.outputPath, size: files.reduce(0) { $0 + $1.size }, container: settings.container, tracks: tracks,
                duration: LadderTrack.Measured.end(of: measured), framesEncoded: framesEncoded, elapsed: reporter.elapsed,
                mimeType: settings.container.mimeType(hasVideo: true), files: files)
            result.resumedFrom = resumedFrom
            return result
        } catch {
            audioThread?.stop()
            session.onFailure?(error)
            video?.writer.cancelWriting()
            directory.discard()
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
    }

    /// Reads, encodes and writes the renditions to the input's end; stops early if the audio pass fails.
    private func encode(_ pass: Pass, reporter: ProgressReporter, audio: AudioPassThread?,
                        progress: (TranscodeProgress) -> Void) throws(MediaError) {
        try pass.plan.run(reader: pass.reader, output: pass.writer, cancellation: session.cancellation, limits: session.limits,
                          pace: session.settings.filters?.tempo ?? 1, reporter: reporter, progress: progress) { audio?.failure }
        try pass.writer.finishWriting()
    }

    /// Writes the playlists and the manifest from the records into the checkpoint's ladder folder, then links every
    /// file of it into the output folder. Returns what each track holds.
    private func assemble(_ manifest: CheckpointManifest, root: String, into directory: OutputDirectory, step: () -> Void) throws(MediaError)
        -> [String: LadderTrack.Measured] {
        func track(_ folder: String, _ record: CheckpointManifest.LadderTrackRecord) -> LadderTrack {
            var segments = record.segments
            // Each segment lasts until the next starts.
            for index in segments.indices.dropLast() { segments[index].duration = segments[index + 1].start - segments[index].start }
            return LadderTrack(
                folder: folder, codecs: record.codecs,
                picture: record.width.map { .init(width: $0, height: record.height ?? 0,
                                                  frameRate: AVRational(num: record.frameRate?[0] ?? 0, den: record.frameRate?[1] ?? 1),
                                                  videoRange: record.videoRange) },
                sound: record.sampleRate.map { .init(sampleRate: $0, channels: record.channels ?? 2) },
                timescale: record.timescale, offset: record.offset, segments: segments)
        }
        let videoTracks = manifest.ladder.filter(\.value.isVideo).sorted { $0.value.order < $1.value.order }.map { track($0.key, $0.value) }
        guard !videoTracks.isEmpty, videoTracks.allSatisfy({ !$0.segments.isEmpty }) else {
            throw MediaError(code: "no_decodable_video", message: "The input's video track has no frame that could be decoded.")
        }
        let audioTrack = manifest.ladder["audio"].map { track("audio", $0) }
        let measured = try LadderWriter.writePlaylists(root: root, video: videoTracks, audio: audioTrack)
        // Only the files the records and playlists name: a segment an interrupted attempt left past them is not.
        var names = [FileType.hls.mainFileName, DASHManifest.name]
        // (An audio track without segments is left out of the playlists, its files with it.)
        for track in videoTracks + [audioTrack].compactMap({ $0 }).filter({ !$0.segments.isEmpty }) {
            names.append(track.folder + "/" + SegmentedOutput.initName)
            names.append(track.folder + "/" + HLSPlaylists.mediaName)
            if track.picture != nil { names.append(track.folder + "/" + HLSPlaylists.iFramesName) }
            names += track.segments.map(\.path)
        }
        for name in names {
            // Each was written or found in place: one missing now would make a ladder players cannot play.
            guard FileManager.default.fileExists(atPath: root + "/" + name) else {
                throw MediaError(code: "output_failed", message: "The checkpoint's \(name) went missing before the ladder was assembled.")
            }
            try directory.adopt(file: root + "/" + name, as: name)
            step()
        }
        return measured
    }
}
