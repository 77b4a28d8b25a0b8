import Foundation
import Jobs
import Pipeline
import Locks

/// The `GET /v1/jobs/{id}/events` stream: the current state first, then `progress` events at most every 250 ms
/// and a `state` event on every change; it ends after a terminal state.
struct JobEventStream: EventSource {
    let jobID: String
    let queue: JobQueue
    let render: @Sendable (Job) -> Data

    /// Minimum spacing of progress events, in seconds.
    static let progressInterval = 0.25

    private struct State {
        var lastState: JobState?
        var lastProgress = Date.distantPast
        var ended = false
    }

    func start(send: @escaping @Sendable (String?) -> Void) -> @Sendable () -> Void {
        let state = LockedValue(State())
        let render = self.render
        // Everything is sent under the lock, so the loop receives events in the order they were decided.
        let deliver: @Sendable (JobEvent) -> Void = { event in
            state.withLock { state in
                guard !state.ended else { return }
                switch event {
                case .progress(let progress):
                    let now = Date()
                    guard state.lastState == .running, now.timeIntervalSince(state.lastProgress) >= Self.progressInterval else { return }
                    state.lastProgress = now
                    send(Self.event("progress", JSON.encode(ProgressReport(progress))))
                case .state(let job):
                    guard job.state != state.lastState else { return }
                    state.lastState = job.state
                    send(Self.event("state", render(job)))
                    if job.state.isTerminal {
                        state.ended = true
                        send(nil)
                    }
                }
            }
        }
        let key = queue.events.subscribe(jobID, deliver)
        if let job = try? queue.store.job(id: jobID) {
            deliver(.state(job))
            if let progress = queue.liveProgress(of: jobID) { deliver(.progress(progress)) }
        } else {
            state.withLock { state in
                state.ended = true
                send(nil)
            }
        }
        let events = queue.events
        let id = jobID
        return { events.unsubscribe(id, key) }
    }

    static func event(_ name: String, _ data: Data) -> String {
        "event: \(name)\ndata: \(String(decoding: data, as: UTF8.self))\n\n"
    }
}
