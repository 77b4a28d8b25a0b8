import Foundation
import Pipeline

/// A checkpointed transcode cut short, for tests of what a later attempt makes of its checkpoint.
public enum Interrupted {
    /// Transcodes `input` with `settings` into `folder/first`, checkpointed in `folder/checkpoint`, and cancels it at
    /// the first progress update (every one is given) for which `stop` holds; returns a second session of the same
    /// job into `folder/second`, with the same checkpoint, not yet run. Throws if the first attempt was not cut
    /// short (it ended before `stop` held, or failed otherwise): a later attempt would have nothing to resume.
    public static func transcode(_ input: String, settings: TranscodeSettings, in folder: URL,
                                 stoppingWhen stop: @escaping (TranscodeProgress) -> Bool) throws -> TranscodeSession {
        let checkpoint = folder.appendingPathComponent("checkpoint").path
        let token = CancellationToken()
        let first = TranscodeSession(inputPath: input, outputDirectory: folder.appendingPathComponent("first").path,
                                     settings: settings, cancellation: token)
        first.checkpointDirectory = checkpoint
        first.progressInterval = 0
        do {
            _ = try first.run { if stop($0) { token.cancel() } }
            throw ShellError(message: "the first attempt ran to its end: nothing was cut short")
        } catch let error as MediaError where error.code == MediaError.canceled.code {}
        let second = TranscodeSession(inputPath: input, outputDirectory: folder.appendingPathComponent("second").path, settings: settings)
        second.checkpointDirectory = checkpoint
        return second
    }
}
