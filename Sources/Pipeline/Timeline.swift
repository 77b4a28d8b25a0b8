import CFFmpeg

/// Maps source timestamps onto the output's timeline, which starts at the session's source start time.
///
/// Every timestamp conversion of the pipeline goes through here.
struct Timeline {
    /// Source time the output's zero corresponds to, in `AV_TIME_BASE` units (microseconds).
    let start: Int64

    /// The largest time a file may give, either way of zero, in microseconds (2^54: about 570 years; a live
    /// recording's clock counts from 1970, and Matroska files starting at 9,000,000,000 s are about). The reader
    /// refuses a file past it: within it, sums and differences of times never overflow, where a crafted file's times
    /// near 2^63 made them trap and crash the job's process.
    static let limit: Int64 = 1 << 54

    /// `limit` in seconds.
    static let limitSeconds = Double(limit) / 1e6

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
