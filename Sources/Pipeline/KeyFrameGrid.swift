/// Where a ladder's renditions put their key frames, on the output timeline: at every segment boundary (multiples
/// of `segmentDuration`), so each segment of each rendition starts with an IDR at the same instant, and in between
/// every `interval` seconds, the asked interval shortened to split a segment evenly (2.002 s, 60 pictures at 29.97
/// fps, in 6 s segments becomes 2 s: counted from 0 it drifted off the boundaries until key frames came in pairs one
/// picture apart). A frame is a key frame when it is the first at or after a grid instant.
struct KeyFrameGrid: Equatable {
    /// Seconds between key frames: a whole fraction of `segmentDuration`, at most the interval asked for.
    let interval: Double
    /// Seconds between segment boundaries.
    let segmentDuration: Double
    /// The next grid instant, in seconds.
    private(set) var next = 0.0

    /// Timestamps are rounded into time bases: an instant half a millisecond early is on time.
    static let tolerance = 0.0005

    init(interval: Double, segmentDuration: Double) {
        let parts = max(1, (segmentDuration / interval - 1e-6).rounded(.up))
        self.interval = segmentDuration / parts
        self.segmentDuration = segmentDuration
    }

    /// Whether the frame presented at `time` (seconds) must be a key frame; moves the grid past it.
    mutating func isKeyFrame(at time: Double) -> Bool {
        guard time + Self.tolerance >= next else { return false }
        next = min(Self.multiple(of: interval, after: time), Self.multiple(of: segmentDuration, after: time))
        return true
    }

    /// The segment a sample presented at `time` (seconds) belongs to when segments are cut every `duration` seconds.
    static func segment(at time: Double, duration: Double) -> Int {
        max(0, Int(((time + tolerance) / duration).rounded(.down)))
    }

    /// The smallest multiple of `step` later than `time` (by more than the tolerance).
    private static func multiple(of step: Double, after time: Double) -> Double {
        (((time + tolerance) / step).rounded(.down) + 1) * step
    }
}
