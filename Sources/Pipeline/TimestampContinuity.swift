import CFFmpeg

/// Keeps packet timestamps running across the discontinuities of formats that allow them (MPEG-TS, MPEG-PS, FLV:
/// FFmpeg's `AVFMT_TS_DISCONT`): captures spliced at an ad break, or files joined with `cat`, whose clock starts again.
///
/// Without it the second part's timestamps land on the first's: its pictures were dropped as not moving time
/// forward, and the job succeeded with half the content. When a stream's decoding time jumps back by more than
/// `backwardLimit`, or ahead by more than `forwardLimit` (FFmpeg's CLI uses 10 s for both), every stream's later
/// packets are shifted to start where the latest stream ended, so no stream's time goes back (a stream copy
/// needs that). Within the limits, timestamps are left alone.
struct TimestampContinuity {
    /// Microseconds (`AV_TIME_BASE` units).
    static let backwardLimit: Int64 = 500_000
    static let forwardLimit: Int64 = 10_000_000

    /// Added to every packet's timestamps from now on, in microseconds.
    private(set) var offset: Int64 = 0
    /// Per stream: the last decoding time seen (offset applied) and that packet's duration, in microseconds.
    private var last: [Int32: (time: Int64, duration: Int64)] = [:]

    /// Shifts `packet` (timestamps in `timeBase`) by the running offset, first moving the offset if the packet
    /// starts a discontinuity.
    mutating func apply(to packet: UnsafeMutablePointer<AVPacket>, timeBase: AVRational) {
        let value = packet.pointee
        let stamp = value.dts != FFmpeg.noPTS ? value.dts : value.pts
        guard stamp != FFmpeg.noPTS else { return }
        let microseconds = FFmpeg.timeBaseQ
        var time = Timeline.rescale(stamp, from: timeBase, to: microseconds) + offset
        if let previous = last[value.stream_index] {
            let delta = time - previous.time
            if delta < -Self.backwardLimit || delta > Self.forwardLimit {
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
