import Pipeline

/// Does the work of one job; the queue calls it on a worker thread.
public protocol JobRunner: Sendable {
    /// Produces the job's output in the new folder `outputDirectory` from `input`, calling `progress` as it goes;
    /// stops with `MediaError.canceled` soon after `cancellation` fires, leaving nothing at `outputDirectory`.
    /// The result lists the folder's files.
    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult

    /// The same, keeping durable checkpoints in `checkpointDirectory` (a later run given the same folder resumes
    /// from them); the folder is left in place whatever happens.
    func run(_ job: Job, input: Upload, outputDirectory: String, checkpointDirectory: String?, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult
}

extension JobRunner {
    /// Runners that do not checkpoint ignore the folder.
    public func run(_ job: Job, input: Upload, outputDirectory: String, checkpointDirectory: String?, cancellation: CancellationToken,
                    progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        try run(job, input: input, outputDirectory: outputDirectory, cancellation: cancellation, progress: progress)
    }
}

/// The real runner: a `TranscodeSession` from the upload to the output.
public struct TranscodeRunner: JobRunner {
    /// Bounds on what an input may demand.
    public let limits: MediaLimits

    public init(limits: MediaLimits = MediaLimits()) {
        self.limits = limits
    }

    public func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                    progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        try run(job, input: input, outputDirectory: outputDirectory, checkpointDirectory: nil, cancellation: cancellation, progress: progress)
    }

    public func run(_ job: Job, input: Upload, outputDirectory: String, checkpointDirectory: String?, cancellation: CancellationToken,
                    progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        let session = TranscodeSession(inputPath: input.path, outputDirectory: outputDirectory, settings: job.settings,
                                       cancellation: cancellation, limits: limits)
        session.checkpointDirectory = checkpointDirectory
        session.checkpointOwned = true // the data directory's folder for this job
        return try session.run(progress: progress)
    }
}
