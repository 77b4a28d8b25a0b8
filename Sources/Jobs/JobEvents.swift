import Foundation
import Pipeline
import Locks

/// Something that happened to a job, for live watchers.
public enum JobEvent: Sendable {
    /// The running job wrote more output (called at the pipeline's rate).
    case progress(TranscodeProgress)
    /// The job changed state; carries the job as stored.
    case state(Job)
    /// The job's input is being downloaded from its URL (before the transcode starts).
    case fetching(FetchProgress)
    /// The job was deleted (by another node: this one saw no last state): nothing more will come.
    case gone
}

/// How far the download of an input given by URL is.
public struct FetchProgress: Sendable, Equatable {
    /// Bytes received so far.
    public var bytes: Int64
    /// Bytes expected, when the server said.
    public var totalBytes: Int64?

    public init(bytes: Int64, totalBytes: Int64?) {
        self.bytes = bytes
        self.totalBytes = totalBytes
    }
}

/// In-memory fan-out of job events to subscribers. Handlers run on the publishing (worker) thread and must be
/// quick: hand the event to your own queue.
public final class JobEvents: Sendable {
    public typealias Handler = @Sendable (JobEvent) -> Void

    private struct State {
        var subscribers: [String: [UInt64: Handler]] = [:]
        var nextKey: UInt64 = 0
        /// Told of every state change, here or (when heard of) on another node: the webhook dispatcher's wake-up.
        var changeWatchers: [@Sendable () -> Void] = []
    }

    private let state = LockedValue(State())

    public init() {}

    /// Starts delivering `jobID`'s events to `handler`; returns the key to `unsubscribe` with.
    public func subscribe(_ jobID: String, _ handler: @escaping Handler) -> UInt64 {
        state.withLock { state in
            state.nextKey += 1
            state.subscribers[jobID, default: [:]][state.nextKey] = handler
            return state.nextKey
        }
    }

    public func unsubscribe(_ jobID: String, _ key: UInt64) {
        state.withLock { state in
            state.subscribers[jobID]?[key] = nil
            if state.subscribers[jobID]?.isEmpty == true { state.subscribers[jobID] = nil }
        }
    }

    /// Whether anyone here watches `jobID`.
    public func hasSubscribers(_ jobID: String) -> Bool { state.withLock { $0.subscribers[jobID] != nil } }

    /// The jobs someone here watches.
    public var subscribedIDs: [String] { state.withLock { Array($0.subscribers.keys) } }

    /// Number of live subscriptions, over all jobs.
    public var count: Int { state.withLock { $0.subscribers.values.reduce(0) { $0 + $1.count } } }

    /// Calls `handler` (quick, on the publishing thread) whenever some job changed state.
    public func watchChanges(_ handler: @escaping @Sendable () -> Void) {
        state.withLock { $0.changeWatchers.append(handler) }
    }

    func publish(_ jobID: String, _ event: JobEvent) {
        let handlers = state.withLock { Array(($0.subscribers[jobID] ?? [:]).values) }
        for handler in handlers { handler(event) }
        if case .state = event { changed() }
    }

    /// Tells the change watchers that some job changed (or a webhook delivery was asked for again).
    public func changed() {
        for watcher in state.withLock({ $0.changeWatchers }) { watcher() }
    }
}
