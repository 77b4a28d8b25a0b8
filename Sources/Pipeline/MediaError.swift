import CFFmpeg

/// An error from the pipeline: a stable snake_case `code` for programs, a `message` for people, and the
/// FFmpeg error code when FFmpeg reported it.
public struct MediaError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Stable identifier, e.g. `input_truncated`, `unsupported_format`, `canceled`.
    public let code: String
    /// A sentence saying what went wrong and, where possible, what to change.
    public let message: String
    /// FFmpeg's negative `AVERROR` value, when the failure came from an FFmpeg call.
    public let averror: Int32?
    /// Whether the same work may well succeed a little later (a server that answered 503 for the input's URL): the
    /// job then goes back to the queue, up to its attempts, rather than fail.
    public let passing: Bool
    /// For a passing failure, seconds the other end asked to be left alone for (a `Retry-After`), when it said.
    public let retryAfter: Double?

    public init(code: String, message: String, averror: Int32? = nil, passing: Bool = false, retryAfter: Double? = nil) {
        self.code = code
        self.message = message
        self.averror = averror
        self.passing = passing
        self.retryAfter = retryAfter
    }

    public var description: String { "\(code): \(message)" }

    /// Builds an error for a failed FFmpeg call, keeping FFmpeg's own text and what we were doing.
    static func ffmpeg(_ result: Int32, _ doing: String, code: String? = nil) -> MediaError {
        let text = FFmpeg.errorText(result)
        let resolved = code ?? (result == FFmpeg.noSpace ? "no_space" : (result == FFmpeg.noMemory ? "out_of_memory" : "ffmpeg_error"))
        return MediaError(code: resolved, message: "\(doing) failed: \(text)", averror: result)
    }

    /// The error a cancelled transcode ends with.
    public static let canceled = MediaError(code: "canceled", message: "The transcode was canceled.")

    /// A thread of the pipeline could not be started (no memory for its stack under the job's limit, or no processes
    /// left): the job fails as short of memory, where it waited for ever on work no thread would do.
    static func threadNotStarted(_ name: String) -> MediaError {
        MediaError(code: "out_of_memory", message: "Starting the pipeline's \(name) thread failed.")
    }
}
