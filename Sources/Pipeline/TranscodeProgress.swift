/// How far a transcode has come: the presentation time of the last sample written over the expected duration.
public struct TranscodeProgress: Sendable, Equatable, Codable {
    /// End of the last sample written, in seconds of output; never above `duration` (which grows with it past the
    /// input's declared length), never decreasing.
    public var presentationTime: Double
    /// Expected output duration in seconds.
    public var duration: Double
    /// Video frames encoded so far.
    public var framesEncoded: Int
    /// Wall-clock seconds since the transcode started.
    public var elapsed: Double
    /// Seconds of output an earlier attempt of the job made and this one continues from (a checkpoint); nil when
    /// this attempt started at the beginning.
    public var resumedFrom: Double?
    /// Steps of the work after the last sample, while the output file is completed (a checkpoint muxed into it, an
    /// MP4's index moved to its front: both rewrite the whole file); nil before. It counts up as long as that work
    /// advances, so a watchdog can tell a long finish from a stall while `presentationTime` stays put.
    public var finishing: Int?
    /// Steps of the work before this attempt continues from an earlier attempt's checkpoint: its files checked
    /// (size and SHA-256: a long film's checkpoint is about the size of its output), then the samples read again up
    /// to where it ends (from the input's start when it cannot seek there); nil otherwise. It counts up as that work
    /// advances, so a watchdog can tell it from a stall; the time is 0 meanwhile.
    public var verifying: Int?

    /// `presentationTime / duration`, from 0 to 1.
    public var fraction: Double { duration > 0 ? min(1, presentationTime / duration) : 0 }

    /// Media seconds transcoded per wall-clock second; 0 while an earlier attempt's checkpoint is checked (the time
    /// is 0 then: measured from where it ends, the speed came out large and negative).
    public var speed: Double {
        guard elapsed > 0, verifying == nil else { return 0 }
        return max(0, (presentationTime - (resumedFrom ?? 0)) / elapsed)
    }

    /// Video frames encoded per wall-clock second; 0 while a checkpoint is checked (the pictures decoded to get back
    /// to its end are not output).
    public var framesPerSecond: Double { elapsed > 0 && verifying == nil ? Double(framesEncoded) / elapsed : 0 }

    public init(presentationTime: Double, duration: Double, framesEncoded: Int, elapsed: Double, resumedFrom: Double? = nil,
                finishing: Int? = nil, verifying: Int? = nil) {
        self.presentationTime = presentationTime
        self.duration = duration
        self.framesEncoded = framesEncoded
        self.elapsed = elapsed
        self.resumedFrom = resumedFrom
        self.finishing = finishing
        self.verifying = verifying
    }
}
