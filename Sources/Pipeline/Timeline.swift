import CFFmpeg

/// Maps source timestamps onto the output's timeline, which starts at the session's source start time.
///
/// Every timestamp conversion of the pipeline goes through here.
struct Timeline {
    /// Source time the output's zero corresponds to, in `AV_TIME_BASE` units (microseconds).
    let start: Int64

    init(startSeconds: Double) {
        start = Int64((startSeconds * Double(FFmpeg.timeBaseQ.den)).rounded())
    }

    /// `timestamp` in `source` units, moved to the output's timeline and expressed in `target` units.
    func convert(_ timestamp: Int64, from source: AVRational, to target: AVRational) -> Int64 {
        Self.rescale(timestamp, from: source, to: target) - Self.rescale(start, from: FFmpeg.timeBaseQ, to: target)
    }

    /// Same instant in another time base, rounded to the nearest unit.
    static func rescale(_ timestamp: Int64, from source: AVRational, to target: AVRational) -> Int64 {
        av_rescale_q_rnd(timestamp, source, target, AVRounding(rawValue: AV_ROUND_NEAR_INF.rawValue | AV_ROUND_PASS_MINMAX.rawValue))
    }
}
