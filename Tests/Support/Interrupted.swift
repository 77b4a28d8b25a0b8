import Foundation
import Pipeline

/// A checkpointed transcode cut short, for tests of what a later attempt makes of its checkpoint.
public enum Interrupted {
    /// Transcodes `input` with `settings` into `folder/first`, checkpointed in `folder/checkpoint`, and cancels it at
    /// the first progress update (every one is given) for which `stop` holds; returns a second session of the same
    /// job into `folder/second`, with the same checkpoint, not yet run.
    public static func transcode(_ input: String, settings: TranscodeSettings, in folder: URL,
                                 stoppingWhen stop: @escaping (TranscodeProgress) -> Bool) -> TranscodeSession {
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        let token = CancellationToken()
        let first = TranscodeSession(inputPath: input, outputDirectory: folder.appendingPathComponent("first").path,
                                     settings: settings, cancellation: token)
        first.checkpointDirectory = checkpoint
        first.progressInterval = 0
        _ = try? first.run { if stop($0) { token.cancel() } }
        let second = TranscodeSession(inputPath: input, outputDirectory: folder.appendingPathComponent("second").path, settings: settings)
        second.checkpointDirectory = checkpoint
        return second
    }
}
