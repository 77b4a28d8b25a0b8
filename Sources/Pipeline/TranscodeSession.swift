import CFFmpeg
import Foundation

/// Connects a `MediaReader` to a `MediaWriter`: decode → convert (scale, resample) → encode → mux, as FFmpeg's
/// `transcode.c` does, with every stage drained at the end of the input.
///
/// `run` blocks its thread for the whole transcode: call it from a worker thread, never from Swift's cooperative
/// pool. It is not thread-safe except for `cancellation`, which any thread may trigger.
public final class TranscodeSession {
    public let inputPath: String
    public let outputPath: String
    public let settings: TranscodeSettings
    public let cancellation: CancellationToken
    /// Bounds on what the input may demand (checked before decoding).
    public let limits: MediaLimits
    /// Shortest wall-clock time between two progress calls, in seconds.
    public var progressInterval = 0.05
    /// Called with the error when the transcode fails, before anything is freed: the moment to see what the
    /// process held (a child measures its memory there, to tell a refused allocation from other failures).
    public var onFailure: ((MediaError) -> Void)?

    public init(inputPath: String, outputPath: String, settings: TranscodeSettings,
                cancellation: CancellationToken = CancellationToken(), limits: MediaLimits = MediaLimits()) {
        self.inputPath = inputPath
        self.outputPath = outputPath
        self.settings = settings
        self.cancellation = cancellation
        self.limits = limits
    }

    /// Transcodes the input into the output file and reports the output's tracks.
    ///
    /// `progress` is called on this thread with monotonic values, at most every `progressInterval` seconds, and a
    /// last time with `presentationTime == duration` once the file is complete. On failure or cancellation the
    /// partial output is deleted and a `MediaError` says why (`canceled`, `input_truncated`, ...).
    public func run(progress: (TranscodeProgress) -> Void = { _ in }) throws(MediaError) -> TranscodeResult {
        let started = ContinuousClock.now
        let reader: MediaReader
        do throws(MediaError) {
            reader = try MediaReader(path: inputPath, cancellation: cancellation)
        } catch {
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        let writer = try MediaWriter(path: outputPath, fileType: settings.container)
        let plan: TranscodePlan
        do throws(MediaError) {
            plan = try TranscodePlan(reader: reader, writer: writer, settings: settings, limits: limits)
        } catch {
            onFailure?(error)
            throw error
        }
        let reporter = ProgressReporter(duration: plan.expectedDuration, interval: progressInterval, started: started)
        // Seconds of input per second of output (a tempo filter changes the pace).
        let inputPace = settings.filters?.tempo ?? 1
        do throws(MediaError) {
            try writer.startWriting()
            while let sample = try reader.nextSample() {
                if cancellation.isCanceled { throw MediaError.canceled }
                try plan.handle(sample)
                try limits.checkRead(seconds: writer.lastPresentationTime * inputPace)
                reporter.update(writer.lastPresentationTime, frames: plan.framesEncoded, call: progress)
            }
            if cancellation.isCanceled { throw MediaError.canceled }
            try plan.finish()
            try writer.finishWriting()
        } catch {
            onFailure?(error)
            writer.cancelWriting()
            // A read cut short by the cancellation looks like a cut-short file: say what happened.
            throw cancellation.isCanceled ? MediaError.canceled : error
        }
        let output = try? MediaReader(path: outputPath)
        let elapsed = reporter.elapsed
        let duration = output?.duration ?? writer.lastPresentationTime
        reporter.finish(frames: plan.framesEncoded, call: progress)
        let size = (try? FileManager.default.attributesOfItem(atPath: outputPath)[.size] as? Int) ?? 0
        let tracks = output?.tracks ?? []
        return TranscodeResult(
            path: outputPath, size: size, container: settings.container, tracks: tracks, duration: duration,
            framesEncoded: plan.framesEncoded, elapsed: elapsed,
            mimeType: settings.container.mimeType(hasVideo: tracks.contains { $0.mediaType == .video }))
    }

    /// Reads a file's tracks without transcoding it (same locked-down opening as a transcode).
    public static func probe(path: String) throws(MediaError) -> [Track] {
        try MediaReader(path: path).tracks
    }
}

/// Calls the progress callback: monotonic, clamped to the duration, throttled, and exactly at the end once.
private final class ProgressReporter {
    private let duration: Double
    private let interval: Duration
    private let started: ContinuousClock.Instant
    private var lastCall: ContinuousClock.Instant
    private var reported = 0.0

    init(duration: Double, interval: Double, started: ContinuousClock.Instant) {
        self.duration = duration
        self.interval = .milliseconds(Int64(interval * 1000))
        self.started = started
        lastCall = started
    }

    var elapsed: Double {
        let time = ContinuousClock.now - started
        return Double(time.components.seconds) + Double(time.components.attoseconds) * 1e-18
    }

    func update(_ presentationTime: Double, frames: Int, call: (TranscodeProgress) -> Void) {
        let now = ContinuousClock.now
        guard now - lastCall >= interval else { return }
        lastCall = now
        let bound = duration > 0 ? duration : presentationTime
        reported = max(reported, min(presentationTime, bound))
        call(TranscodeProgress(presentationTime: reported, duration: bound, framesEncoded: frames, elapsed: elapsed))
    }

    func finish(frames: Int, call: (TranscodeProgress) -> Void) {
        let end = max(duration, reported)
        call(TranscodeProgress(presentationTime: end, duration: end, framesEncoded: frames, elapsed: elapsed))
    }
}
