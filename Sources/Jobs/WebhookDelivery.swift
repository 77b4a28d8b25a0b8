import Foundation

/// One event on its way to one webhook URL: a row of the outbox, written in the transaction of the state change it
/// announces, sent at least once. Its `id` is the `webhook-id` header, the same on every attempt.
public struct WebhookDelivery: Sendable, Equatable {
    public enum State: String, Sendable, Codable {
        /// To be sent (again) at `nextAttemptAt`.
        case pending
        /// A 2xx answer came.
        case delivered
        /// Every attempt of the schedule failed, or the answer said not to try again.
        case failed
        /// The job's URL answered 410 Gone: its webhook is off.
        case disabled
    }

    /// Where the URL came from: the job's own webhook or the server-wide one.
    public enum Scope: String, Sendable, Codable {
        case job, server
    }

    /// Order of creation (the outbox's sequence).
    public let sequence: Int64
    /// `msg_` and 32 hex digits.
    public let id: String
    public let jobID: String
    public let event: String
    public let url: String
    public let scope: Scope
    /// When the state changed (seconds since 1970): the payload's `timestamp`.
    public let createdAt: Double
    public let state: State
    /// Attempts started (a claim counts one; it is also the claim's token).
    public let attempts: Int
    /// Attempts made before the latest redelivery: the retry schedule counts from there.
    public let scheduleBase: Int
    public let nextAttemptAt: Double
    public let lastStatus: Int?
    public let lastError: String?
    /// The body sent at the first attempt, sent again as it was on every retry.
    public let payload: Data?
    public let deliveredAt: Double?
    /// The job as the state change left it (its row, written with the delivery): what the payload shows.
    public let job: Job?
}

/// How an attempt to deliver ended, as the store records it.
public enum DeliveryOutcome: Sendable, Equatable {
    /// A 2xx answer with this status.
    case delivered(status: Int)
    /// Try again `after` seconds from now, by the store's clock (the one claims go by: a node's clock may differ).
    case retry(after: Double, status: Int?, error: String)
    /// No more attempts.
    case failed(status: Int?, error: String)
    /// 410 from a job's own URL: the delivery and the job's other pending ones to it stop, the job's webhook is off.
    case disabled(status: Int)
}
