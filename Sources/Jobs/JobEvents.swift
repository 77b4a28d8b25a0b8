import Foundation
import Pipeline
import Locks

/// Something that happened to a job, for live watchers.
public enum JobEvent: Sendable {
    /// The running job wrote more output (called at the pipeline's rate).
    case progress(TranscodeProgress)
    /// The job changed state; carries the job as stored.
    case state(Job)
}

/// In-memory fan-out of job events to subscribers. Handlers run on the publishing (worker) thread and must be
/// quick: hand the event to your own queue.
public final class JobEvents: Sendable {
    public typealias Handler = @Sendable (JobEvent) -> Void

    private let subscribers = LockedValue<[String: [UUID: Handler]]>([:])

    public init() {}

    /// Starts delivering `jobID`'s events to `handler`; returns the key to `unsubscribe` with.
    public func subscribe(_ jobID: String, _ handler: @escaping Handler) -> UUID {
        let key = UUID()
        subscribers.withLock { $0[jobID, default: [:]][key] = handler }
        return key
    }

    public func unsubscribe(_ jobID: String, _ key: UUID) {
        subscribers.withLock { all in
            all[jobID]?[key] = nil
            if all[jobID]?.isEmpty == true { all[jobID] = nil }
        }
    }

    /// Number of live subscriptions, over all jobs.
    public var count: Int { subscribers.withLock { $0.values.reduce(0) { $0 + $1.count } } }

    func publish(_ jobID: String, _ event: JobEvent) {
        let handlers = subscribers.withLock { Array(($0[jobID] ?? [:]).values) }
        for handler in handlers { handler(event) }
    }
}
