import CFFmpeg

/// How much FFmpeg itself prints on stderr; process-wide, set once at start.
public enum MediaLog: Sendable {
    case quiet, error, warning, info

    /// Sets FFmpeg's log level for the whole process.
    public static func setLevel(_ level: MediaLog) {
        let value: Int32 = switch level {
        case .quiet: AV_LOG_QUIET
        case .error: AV_LOG_ERROR
        case .warning: AV_LOG_WARNING
        case .info: AV_LOG_INFO
        }
        av_log_set_level(value)
    }
}
