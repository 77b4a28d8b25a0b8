import CFFmpeg

/// What the playlists and the manifest say about one track of a ladder, from what its segments really hold.
struct LadderTrack {
    struct Picture {
        var width: Int
        var height: Int
        var frameRate: AVRational
        /// HLS `VIDEO-RANGE`: `PQ` or `HLG` for HDR pictures, nil for SDR.
        var videoRange: String? = nil
    }

    struct Sound: Equatable {
        var sampleRate: Int
        var channels: Int
    }

    /// Folder in the output directory, also the DASH representation id.
    var folder: String
    /// RFC 6381 codec string.
    var codecs: String
    var picture: Picture?
    var sound: Sound?
    /// Units per second of `segments`' times.
    var timescale: Int32
    /// Units added to every timestamp in the files (`SegmentedOutput.offsetSeconds`).
    var offset: Int64
    var segments: [SegmentedOutput.Segment]
    /// The target duration of every media playlist of the ladder, when set (`LadderTrack.sharingTarget`); else this
    /// track's own.
    var sharedTargetDuration: Int? = nil

    func seconds(_ units: Int64) -> Double { Double(units) / Double(timescale) }

    /// Seconds of media.
    var duration: Double { segments.reduce(0) { $0 + seconds($1.duration) } }

    /// Where the track ends on the output timeline, in seconds (a track may start after zero: video behind audio).
    var end: Double { segments.last.map { seconds($0.start + $0.duration - offset) } ?? 0 }

    /// What a finished track's segments hold (an init segment alone has no samples to tell them).
    struct Measured {
        var frameRate: Double?
        /// Seconds of media.
        var duration: Double
        var bitRate: Int
        /// Where it ends on the output timeline (`end`).
        var end: Double

        /// Where the ladder ends: its last track's end, not its longest track's length (a track that starts late
        /// ends later than its length).
        static func end(of measured: [String: Measured]) -> Double { measured.values.map(\.end).max() ?? 0 }
    }

    var measured: Measured { Measured(frameRate: picture.map { av_q2d($0.frameRate) }, duration: duration, bitRate: averageBitRate, end: end) }

    /// A length as a playlist lists it (`EXTINF`, five decimals).
    static func listed(_ seconds: Double) -> Double { (seconds * 100_000).rounded() / 100_000 }

    /// A playlist's target duration: its longest piece rounded to the nearest second (at least 1).
    static func targetDuration(_ durations: [Double]) -> Int { max(1, Int((durations.max() ?? 0).rounded())) }

    /// Seconds of each segment.
    var segmentDurations: [Double] { segments.map { seconds($0.duration) } }

    /// The media playlist's target duration: the ladder's, shared, or this track's own.
    var targetDuration: Int { sharedTargetDuration ?? Self.targetDuration(segmentDurations) }

    /// These tracks with one target duration, their longest segment's: "each Media Playlist in each Variant Stream
    /// MUST have the same Target Duration" (RFC 8216, 6.2.4), and a variant's audio is in all of them. Each rounded
    /// its own longest segment before, and a video of 2.47 s said 2 where its audio (priming included) said 3.
    static func sharingTarget(_ tracks: [LadderTrack]) -> [LadderTrack] {
        let target = targetDuration(tracks.flatMap(\.segmentDurations))
        return tracks.map { track in
            var shared = track
            shared.sharedTargetDuration = target
            return shared
        }
    }

    /// The peak segment bit rate of a playlist of `pieces` (what BANDWIDTH states, as RFC 8216bis defines it), bits
    /// per second: the highest of any run of consecutive pieces lasting 0.5 to 1.5 of the playlist's target duration,
    /// over their lengths as listed (what a player measures with). The target is the playlist's stated one when given
    /// (`targetDuration`), else its longest piece's. Not of single segments: a last one of a frame or
    /// a few samples would state a peak many times the real one, and players would pass over the rung. A playlist
    /// shorter than half its target is one run.
    static func peakBitRate(_ pieces: [(bytes: Int, seconds: Double)], targetDuration: Int? = nil) -> Int {
        let targetDuration = targetDuration ?? Self.targetDuration(pieces.map(\.seconds))
        let lengths = pieces.map { listed($0.seconds) }
        let shortest = 0.5 * Double(targetDuration), longest = 1.5 * Double(targetDuration)
        var peak = 0.0
        for start in pieces.indices {
            var bits = 0.0, length = 0.0
            for index in start..<pieces.count {
                bits += Double(pieces[index].bytes * 8)
                length += lengths[index]
                if length > longest + 1e-9 { break }
                if length >= shortest - 1e-9, length > 0 { peak = max(peak, bits / length) }
            }
        }
        if peak == 0 {
            let length = lengths.reduce(0, +)
            if length > 0 { peak = Double(pieces.reduce(0) { $0 + $1.bytes * 8 }) / length }
        }
        return Int(peak.rounded(.up))
    }

    /// The peak segment bit rate of the media playlist (see `peakBitRate(_:)`), never below the average: a last
    /// segment too short for any window, dense with its fragment's boxes, left the windows' peak under the whole
    /// playlist's average (BANDWIDTH 129932 beside AVERAGE-BANDWIDTH 131008 for 3 s of AAC in 2 s segments).
    var peakBitRate: Int {
        max(averageBitRate, Self.peakBitRate(segments.map { (bytes: $0.bytes, seconds: seconds($0.duration)) }, targetDuration: targetDuration))
    }

    /// All segments' bits over the whole duration, in bits per second.
    var averageBitRate: Int {
        duration > 0 ? Int((Double(segments.reduce(0) { $0 + $1.bytes } * 8) / duration).rounded(.up)) : 0
    }

    /// Every key frame with how long it stands for (until the next key frame, the last until the track's end).
    var iFrames: [(segment: SegmentedOutput.Segment, frame: SegmentedOutput.KeyFrame, duration: Double)] {
        let all = segments.flatMap { segment in segment.keyFrames.map { (segment, $0) } }
        // Key frame times are on the output timeline, as `end` is.
        return all.enumerated().map { index, item in
            let next = index + 1 < all.count ? all[index + 1].1.time : end
            return (item.0, item.1, max(0, next - item.1.time))
        }
    }

    /// The peak bit rate of the I-frame playlist, its byte ranges over the times they stand for, as for segments.
    var iFramePeakBitRate: Int { max(iFrameAverageBitRate, Self.peakBitRate(iFrames.map { (bytes: $0.frame.length, seconds: $0.duration) })) }

    /// All I-frame ranges' bits over the whole duration, in bits per second.
    var iFrameAverageBitRate: Int {
        duration > 0 ? Int((Double(iFrames.reduce(0) { $0 + $1.frame.length } * 8) / duration).rounded(.up)) : 0
    }
}
