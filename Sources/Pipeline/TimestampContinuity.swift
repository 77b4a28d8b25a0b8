import CFFmpeg

/// Watches packet timestamps for jumps. In formats whose clock may restart (MPEG-TS, MPEG-PS, FLV: FFmpeg's
/// `AVFMT_TS_DISCONT`) it keeps them running across the discontinuity: captures spliced at an ad break, or files
/// joined with `cat`. In every other format a clock cannot restart, so a stream whose time goes back is broken, and
/// the transcode stops with `timestamps_invalid` naming the stream and the time.
///
/// Without it the second part's timestamps land on the first's: its pictures were dropped as not moving time
/// forward, and the job succeeded with half the content (or, in Matroska, failed as "cut short"). When a stream's
/// decoding time jumps back by more than `backwardLimit`, or ahead by more than `forwardLimit` (FFmpeg's CLI uses
/// 10 s for both) past its own and every other stream's latest time, the stream's later packets are shifted to start
/// where it ended, so no stream's time goes back (a stream copy needs that). Within the limits,
/// timestamps are left alone. A forward jump in a format without discontinuities is a gap, kept as such.
///
/// Streams seldom change clocks at the same point of the file: at a splice the video's first packets on the new
/// clock come before the audio's last on the old one. Each stream therefore keeps the shift it is on, and one that
/// jumps takes up the newest shift another stream is on under which it runs on (the clock that stream already moved
/// to) before a new one is made. With one shift for all, every packet of the stream still on the old clock moved it back
/// and the next on the new clock forward again, each time to where the latest stream ended: the output grew by a
/// frame's time at every switch (a second more for a second of lead) and its audio broke up.
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

    /// The shifts made so far, oldest first, in microseconds: the first is none.
    private var shifts: [Int64] = [0]
    /// Per stream: the index in `shifts` of the one its packets get (none until it jumps).
    private var shiftOf: [Int32: Int] = [:]
    /// Per stream: the last decoding time seen (shift applied) and that packet's duration, in microseconds.
    private var last: [Int32: (time: Int64, duration: Int64)] = [:]
    /// How far behind the latest stream another may be and still count as going on, microseconds: a muxer puts
    /// one stream up to a second or so ahead of another.
    static let activeWindow: Int64 = 2_000_000
    /// Shifts kept to be taken up by streams still on an older clock; a file restarting its clock more often than
    /// this within one stream's lag is broken beyond telling anyway.
    static let keptShifts = 16

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
        let raw = Timeline.rescale(stamp, from: timeBase, to: microseconds)
        // A stream first seen now is on the newest clock, as the streams that moved to it.
        var shift = shiftOf[value.stream_index] ?? shifts.count - 1
        shiftOf[value.stream_index] = shift
        var time = raw + shifts[shift]
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
                // Another stream's shift under which this packet comes after the stream's last (the clock that
                // stream moved to first), or a new one that continues the stream from where it ended: from its own
                // end, not the latest stream's (audio whose clock leapt alone was put where the video had been read
                // up to, muxed up to a second ahead, and stayed that late). Only a shift some other stream is on: an
                // old clock a programme comes back to after a break has run on meanwhile, and taken up again its
                // shift left a hole of up to 10 s, or went back.
                // A stream counts while it goes on: one that stopped (a track of the first file only) would hold
                // its shift for good.
                let latest = last.values.map(\.time).max() ?? previous.time
                let others = Set(shiftOf.filter { stream, _ in
                    stream != value.stream_index && (last[stream]?.time ?? .min) >= latest - Self.activeWindow
                }.values)
                // A stream that was not going on (away during a break that had the other kind of media alone: sound
                // without pictures, pictures without sound) comes back where the streams that went on are, after
                // its own hole: joined to its own end, it lost the break's length and stayed that far from the
                // others to the end of the file (4 s for 4 s of sound alone). (Timestamps cannot tell such a stream
                // from one muxed more than `activeWindow` behind the others, against the transport stream's buffer
                // model, whose shift to its own end is then refused: that one comes back where the others are.)
                let away = previous.time < latest - Self.activeWindow
                let fits = { (landing: Int64) -> Bool in
                    away ? landing > previous.time && (latest - Self.activeWindow...latest + Self.forwardLimit).contains(landing)
                        : (1...Self.forwardLimit).contains(landing - previous.time)
                }
                if let taken = shifts.indices.reversed().first(where: { index in
                    index != shift && others.contains(index) && fits(raw + shifts[index])
                }) {
                    shift = taken
                } else {
                    shifts.append((away ? latest : previous.time) + max(previous.duration, 1) - raw)
                    shift = shifts.count - 1
                    if shifts.count > Self.keptShifts, let unused = shifts.indices.first(where: { index in
                        index != shift && !shiftOf.contains { $0.key != value.stream_index && $0.value == index }
                    }) {
                        // The oldest no stream is on goes; the indices after it move down.
                        shifts.remove(at: unused)
                        shiftOf = shiftOf.mapValues { $0 > unused ? $0 - 1 : $0 }
                        shift -= 1
                    }
                }
                shiftOf[value.stream_index] = shift
                time = raw + shifts[shift]
            }
        }
        last[value.stream_index] = (time, Timeline.rescale(max(value.duration, 0), from: timeBase, to: microseconds))
        let offset = shifts[shift]
        guard offset != 0 else { return }
        let ticks = Timeline.rescale(offset, from: microseconds, to: timeBase)
        if value.dts != FFmpeg.noPTS { packet.pointee.dts += ticks }
        if value.pts != FFmpeg.noPTS { packet.pointee.pts += ticks }
    }
}
