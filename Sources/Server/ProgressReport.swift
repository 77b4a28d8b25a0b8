import Foundation
import Jobs
import Pipeline

/// Progress as the API and the CLI show it: seconds written, expected seconds, fraction, frames per second and
/// speed, rounded for people. A job whose input is given by URL is first `fetching` (bytes so far, and the fraction
/// of the download when its length is known); every job is then `transcoding`, and `finishing` while its output file
/// is completed after the last sample (which rewrites a long film's file: the fraction stays where it is).
public struct ProgressReport: Encodable, Sendable {
    /// `fetching` (the input is downloading), `verifying` (an earlier attempt's checkpoint is checked, and the input
    /// read again up to where it ends, before this attempt continues from it), `transcoding` or `finishing`.
    public var phase = "transcoding"
    /// While fetching: bytes received so far, and bytes expected when known.
    public var bytes: Int64?
    public var totalBytes: Int64?
    /// Seconds of output written.
    public let presentationTime: Double
    /// Expected output seconds.
    public let duration: Double
    /// 0 to 1.
    public let fraction: Double
    /// Video frames encoded per wall-clock second.
    public let framesPerSecond: Double
    /// Media seconds per wall-clock second.
    public let speed: Double
    /// Seconds of output an earlier attempt made that this one continued from (a checkpoint); nil when this attempt
    /// started at the beginning (or is not running here).
    public var resumedFrom: Double?

    public init(_ progress: TranscodeProgress) {
        if progress.finishing != nil { phase = "finishing" }
        if progress.verifying != nil { phase = "verifying" }
        presentationTime = Self.round(progress.presentationTime)
        duration = Self.round(progress.duration)
        fraction = Self.round(progress.fraction, places: 4)
        framesPerSecond = Self.round(progress.framesPerSecond, places: 1)
        speed = Self.round(progress.speed)
        resumedFrom = progress.resumedFrom.map { Self.round($0) }
    }

    /// A download under way; `fetch` nil when another node fetches it (nothing is known here but that).
    init(fetch: FetchProgress?) {
        phase = "fetching"
        bytes = fetch?.bytes ?? 0
        totalBytes = fetch?.totalBytes
        presentationTime = 0
        duration = 0
        if let fetch, let total = fetch.totalBytes, total > 0 {
            fraction = Self.round(min(1, Double(fetch.bytes) / Double(total)), places: 4)
        } else {
            fraction = 0
        }
        framesPerSecond = 0
        speed = 0
    }

    /// What the store last saved of a job. Rates: a succeeded job's averages over its transcode; otherwise 0, as
    /// they are only known while the job runs here.
    init(job: Job) {
        presentationTime = Self.round(job.progressTime)
        duration = Self.round(job.progressDuration)
        fraction = job.state == .succeeded
            ? 1 : (job.progressDuration > 0 ? Self.round(min(1, job.progressTime / job.progressDuration), places: 4) : 0)
        if job.state == .succeeded, let seconds = job.transcodeSeconds, seconds > 0 {
            framesPerSecond = Self.round(Double(job.framesEncoded ?? 0) / seconds, places: 1)
            speed = Self.round(job.progressDuration / seconds)
        } else {
            framesPerSecond = 0
            speed = 0
        }
    }

    private static func round(_ value: Double, places: Double = 3) -> Double {
        let scale = pow(10, places)
        return value.isFinite ? (value * scale).rounded() / scale : 0
    }
}
