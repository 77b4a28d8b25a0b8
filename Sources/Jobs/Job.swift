import Foundation
import Pipeline

/// A transcode request and everything the store knows about how it went.
public struct Job: Sendable, Codable, Equatable {
    /// Settings as stored that no longer decode: the text and what is wrong with it.
    public struct UnreadableSettings: Sendable, Codable, Equatable {
        public var text: String
        /// The reading error, naming the key (`settings.video.width: expected ...`).
        public var problem: String
    }

    /// Random UUID, lowercase.
    public var id: String
    public var state: JobState
    /// The settings; the defaults when `unreadableSettings` is set (such a job fails, it never runs with them).
    public var settings: TranscodeSettings
    /// Id of the upload that is the input.
    public var inputUpload: String
    /// Where the finished output is (set when it succeeded).
    public var outputPath: String?
    /// Output size in bytes.
    public var outputSize: Int?
    public var outputTracks: [Track]?
    /// Every file of the output folder, main file included (nil for a job that wrote one file directly into
    /// `outputs/`, before outputs were folders).
    public var outputFiles: [OutputFile]?
    /// Seconds of output written, as last saved (saved at most once a second while running).
    public var progressTime: Double
    /// Expected output duration in seconds (0 until known).
    public var progressDuration: Double
    public var errorCode: String?
    public var errorMessage: String?
    /// Number of the current (or next) attempt, from 1; a crash of the process running it adds one.
    public var attempts: Int
    /// Higher runs first.
    public var priority: Int
    /// Seconds since 1970.
    public var createdAt: Double
    public var startedAt: Double?
    public var finishedAt: Double?
    public var updatedAt: Double
    /// Which worker holds the job while it runs (`host/process-id-instance/worker`).
    public var lease: String?
    /// The fencing number of the latest claim (0 before the first): every claim of the job adds one.
    public var leaseToken = 0
    /// When the running job's lease runs out unless its worker renews it (seconds since 1970).
    public var leaseExpiresAt: Double?
    /// Video frames the successful attempt encoded (nil until the job succeeded).
    public var framesEncoded: Int?
    /// Wall-clock seconds the successful attempt took, from opening the input to closing the output.
    public var transcodeSeconds: Double?
    /// Set when the stored settings no longer decode (written by another version of transcoderd, or edited by hand):
    /// the job then fails with `invalid_settings` instead of running with other settings.
    public var unreadableSettings: UnreadableSettings?
    /// The job's own webhook, if it has one.
    public var webhook: WebhookTarget?

    /// The folder or file a succeeded job's output is: the folder its main file is in, or, for a job from before
    /// outputs were folders, the file itself.
    public var outputRoot: String? { JobOutput.root(path: outputPath, singleFile: outputFiles == nil) }
}

extension Job {
    /// The lease of the claim that made this job running (for the worker that claimed it).
    public var currentLease: Lease? {
        guard state == .running, let lease else { return nil }
        return Lease(jobID: id, worker: lease, token: leaseToken)
    }
}
