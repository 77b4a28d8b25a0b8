import CFFmpeg

/// What the playlists and the manifest say about one track of a ladder, from what its segments really hold.
struct LadderTrack {
    struct Picture {
        var width: Int
        var height: Int
        var frameRate: AVRational
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

    func seconds(_ units: Int64) -> Double { Double(units) / Double(timescale) }

    /// Seconds of media.
    var duration: Double { segments.reduce(0) { $0 + seconds($1.duration) } }

    /// A length as a playlist lists it (`EXTINF`, five decimals).
    static func listed(_ seconds: Double) -> Double { (seconds * 100_000).rounded() / 100_000 }

    /// The highest bit rate of any segment, in bits per second, over its length as listed: a player measures with
    /// that (a last audio segment of a few milliseconds would otherwise come out above the stated peak).
    var peakBitRate: Int {
        segments.map { segment in
            let length = Self.listed(seconds(segment.duration))
            return length > 0 ? Int((Double(segment.bytes * 8) / length).rounded(.up)) : 0
        }.max() ?? 0
    }

    /// All segments' bits over the whole duration, in bits per second.
    var averageBitRate: Int {
        duration > 0 ? Int((Double(segments.reduce(0) { $0 + $1.bytes } * 8) / duration).rounded(.up)) : 0
    }

    /// Every key frame with how long it stands for (until the next key frame, the last until the track's end).
    var iFrames: [(segment: SegmentedOutput.Segment, frame: SegmentedOutput.KeyFrame, duration: Double)] {
        let all = segments.flatMap { segment in segment.keyFrames.map { (segment, $0) } }
        // Key frame times are on the output timeline; segment times in the files carry the offset.
        let end = segments.last.map { seconds($0.start + $0.duration - offset) } ?? 0
        return all.enumerated().map { index, item in
            let next = index + 1 < all.count ? all[index + 1].1.time : end
            return (item.0, item.1, max(0, next - item.1.time))
        }
    }

    /// The highest bit rate of any I-frame range over the time it stands for, in bits per second.
    var iFramePeakBitRate: Int {
        iFrames.map { item in
            let length = Self.listed(item.duration)
            return length > 0 ? Int((Double(item.frame.length * 8) / length).rounded(.up)) : 0
        }.max() ?? 0
    }

    /// All I-frame ranges' bits over the whole duration, in bits per second.
    var iFrameAverageBitRate: Int {
        duration > 0 ? Int((Double(iFrames.reduce(0) { $0 + $1.frame.length } * 8) / duration).rounded(.up)) : 0
    }
}
