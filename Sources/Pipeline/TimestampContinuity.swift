import CFFmpeg

/// Watches packet timestamps for jumps. In formats whose clock may restart (MPEG-TS, MPEG-PS, FLV: FFmpeg's
/// `AVFMT_TS_DISCONT`) it keeps them running across the discontinuity: captures spliced at an ad break, or files
/// joined with `cat`. In every other format a clock cannot restart, so a stream whose time goes back is broken, and
/// the transcode stops with `timestamps_invalid` naming the stream and the time.
///
/// Without it the second part's timestamps land on the first's: its pictures were dropped as not moving time
/// forward, and the job succeeded with half the content (or, in Matroska, failed as "cut short"). When a stream's
/// decoding time jumps back by more than `backwardLimit`, or ahead by more than `forwardLimit` (FFmpeg's CLI uses
/// 10 s for both) past its own and every other stream's latest time, every stream's later packets are shifted to
/// start where the latest stream ended, so no stream's time goes back (a stream copy needs that). Within the limits,
/// timestamps are left alone. A forward jump in a format without discontinuities is a gap, kept as such.
struct TimestampContinuity {
    /// Whether the clock may restart (stitch) or not (refuse a stream that goes back).
    let allowsDiscontinuities: Bool
    /// Where the file says its media ends, in microseconds on its clock, when it says so: without discontinuities, a
    /// stream that leaps far past it (a 10 s file whose audio jumps 5 hours ahead) is refused, not filled with hours
    /// of silence.
    let declaredEnd: Int64?
    /// Per stream without discontinuities: the latest decoding time seen, in microseconds.
    private var highest: [Int32: Int64] = [:]

    /// Microseconds (`AV_TIME_BASE` units).
    static let backwardLimit: Int64 = 500_000
    static let forwardLimit: Int64 = 10_000_000

    /// Added to every packet's timestamps from now on, in microseconds.
    private(set) var offset: Int64 = 0
    /// Per stream: the last decoding time seen (offset applied) and that packet's duration, in microseconds.
    private var last: [Int32: (time: Int64, duration: Int64)] = [:]

    /// `declaredEnd` in seconds on the file's clock.
    init(allowsDiscontinuities: Bool, declaredEnd: Double? = nil) {
        self.allowsDiscontinuities = allowsDiscontinuities
        self.declaredEnd = declaredEnd.map { Int64(($0 * 1e6).rounded()) }
    }

    /// Shifts `packet` (timestamps in `timeBase`) by the running offset, first moving the offset if the packet
    /// starts a discontinuity; throws `timestamps_invalid` for a stream going back where that cannot happen, naming
    /// it as `stream` and its times in seconds from `origin` (the file's start, seconds).
    mutating func apply(to packet: UnsafeMutablePointer<AVPacket>, timeBase: AVRational, stream: String, origin: Double)
        throws(MediaError) {
        let value = packet.pointee
        // Without discontinuities only decoding times are compared: presentation times go back with B-frames.
        let stamp = allowsDiscontinuities && value.dts == FFmpeg.noPTS ? value.pts : value.dts
        guard stamp != FFmpeg.noPTS else { return }
        let microseconds = FFmpeg.timeBaseQ
        var time = Timeline.rescale(stamp, from: timeBase, to: microseconds) + offset
        if let previous = last[value.stream_index] {
            let delta = time - previous.time
            if !allowsDiscontinuities {
                let seconds = { (time: Int64) in String(format: "%.2f s", Double(time) / 1e6 - origin) }
                // Compared with the latest time seen, so small steps back cannot add up to a large one.
                let latest = max(highest[value.stream_index] ?? previous.time, previous.time)
                if time < latest - Self.backwardLimit {
                    throw MediaError(code: "timestamps_invalid", message:
                        "The input's \(stream) goes back in time, from \(seconds(latest)) to \(seconds(time)): "
                        + "its timestamps are broken (a muxing error), so its frames cannot be put in order. "
                        + "Export the file again from its source.")
                }
                if delta > Self.forwardLimit, let end = declaredEnd,
                   time > end + max(1_000_000, (end - Int64(origin * 1e6)) / 50) {
                    throw MediaError(code: "timestamps_invalid", message:
                        "The input's \(stream) leaps from \(seconds(previous.time)) to \(seconds(time)), far past the end "
                        + "the file declares (\(seconds(end))): its timestamps are broken. Export the file again from its source.")
                }
                highest[value.stream_index] = max(latest, time)
            } else if delta < -Self.backwardLimit
                        || (delta > Self.forwardLimit && time - (last.values.map(\.time).max() ?? previous.time) > Self.forwardLimit) {
                // Ahead: only past every stream (FFmpeg's CLI compares with the file's latest packet). A stream
                // that comes back after a long hole (a broadcast's audio that dropped out) is where the others are:
                // taken for a restarted clock, it moved every stream back to where the latest had ended.
                let end = last.values.map { $0.time + max($0.duration, 1) }.max() ?? previous.time
                let shift = end - time
                offset += shift
                time += shift
            }
        }
        last[value.stream_index] = (time, Timeline.rescale(max(value.duration, 0), from: timeBase, to: microseconds))
        guard offset != 0 else { return }
        let ticks = Timeline.rescale(offset, from: microseconds, to: timeBase)
        if value.dts != FFmpeg.noPTS { packet.pointee.dts += ticks }
        if value.pts != FFmpeg.noPTS { packet.pointee.pts += ticks }
    }
}
