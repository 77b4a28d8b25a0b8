import Foundation
import Jobs
import Locks
import Pipeline

/// The `GET /v1/jobs/{id}/events` stream: the current state first, then `progress` events at most every 250 ms
/// and a `state` event on every change; it ends after a terminal state.
///
/// It is made by the handler, on a pool thread: it subscribes to the job's events first, then the handler reads the
/// job and hands it to `deliverSnapshot`, so no change can fall between the two; the loop only attaches `send` in
/// `start` and never touches the store. Events that arrive before `start` wait in a short list.
final class JobEventStream: EventSource {
    /// Minimum spacing of progress events, in seconds.
    static let progressInterval = 0.25

    private struct State {
        var lastState: JobState?
        /// Where the latest state seen stands in the job's life (`order`), sent or not.
        var lastOrder = (claim: 0, step: -1)
        /// When the last progress event was sent (a clock that a change of the system's time does not move).
        var lastProgress: ContinuousClock.Instant?
        var ended = false
        /// Set by `start`; until then, events are kept in `pending`.
        var send: (@Sendable (String?) -> Void)?
        var pending: [String?] = []
    }

    private let jobID: String
    private let events: JobEvents
    private let key: UInt64
    private let state = LockedValue(State())
    private let render: @Sendable (Job) -> Data

    /// Subscribes to `jobID`'s events; `render` turns a job into its JSON (it runs on the thread that publishes).
    init(jobID: String, queue: JobQueue, render: @escaping @Sendable (Job) -> Data) {
        self.jobID = jobID
        events = queue.events
        self.render = render
        let state = self.state
        key = queue.events.subscribe(jobID) { event in Self.deliver(event, to: state, render: render) }
    }

    /// The job as read after subscribing, and its live progress. It goes by the same rule as every state: dropped
    /// when a state event that came in meanwhile is as new or newer (the stream never goes back), sent when what came
    /// first is older (a retry's late `queued` published after another worker's claim, which this read has seen).
    /// The progress is read after the state is rendered, whose JSON carries the progress of that moment: read before
    /// and sent after it, the stream's first progress went back (10.967 s in the state, then 10.7).
    func deliverSnapshot(_ job: Job, live: () -> TranscodeProgress?) {
        let delivered = Self.deliver(.state(job), to: state, render: render)
        if delivered, let progress = live() { Self.deliver(.progress(progress), to: state, render: render) }
    }

    /// Events decided and waiting for `start` (for tests that stage a race).
    var eventsWaiting: Int { state.withLock { $0.pending.count } }

    func start(send: @escaping @Sendable (String?) -> Void) -> @Sendable () -> Void {
        state.withLock { state in
            for text in state.pending { send(text) }
            state.pending = []
            state.send = send
        }
        return { [self] in stop() }
    }

    private func stop() {
        state.withLock { $0.ended = true }
        events.unsubscribe(jobID, key)
    }

    /// Decides whether `event` goes out and returns whether it did. The JSON is made before the lock is taken
    /// (rendering a job reads the store; the loop takes this lock too), and everything is sent under the lock, so the
    /// loop receives events in the order decided.
    @discardableResult
    private static func deliver(_ event: JobEvent, to state: LockedValue<State>,
                                render: @Sendable (Job) -> Data) -> Bool {
        switch event {
        case .progress, .fetching:
            // Progress comes at the pipeline's (or the download's) pace: look whether one is due before encoding it.
            let due = { (state: State) in
                !state.ended && state.lastState == .running
                    && state.lastProgress.map { ($0.duration(to: .now)).inSeconds >= Self.progressInterval } ?? true
            }
            guard state.withLock({ due($0) }) else { return false }
            let report: ProgressReport
            switch event {
            case .fetching(let fetch): report = ProgressReport(fetch: fetch)
            case .progress(let progress): report = ProgressReport(progress)
            default: return false
            }
            let text = Self.event("progress", JSON.encode(report))
            return state.withLock { state -> Bool in
                guard due(state) else { return false }
                state.lastProgress = ContinuousClock.now
                emit(text, into: &state)
                return true
            }
        case .gone:
            // The stream ends without a last state: an EventSource reconnects and is told 404, which stops it.
            return state.withLock { state -> Bool in
                guard !state.ended else { return false }
                state.ended = true
                emit(nil, into: &state)
                return true
            }
        case .state(let job):
            // The last event carries an id, which an EventSource sends back when it reconnects (it does, 3 s after
            // any stream ends): the server then answers 204, which stops it, instead of the end over and over.
            let text = Self.event("state", render(job), id: job.state.isTerminal ? Self.endID : nil)
            return state.withLock { state -> Bool in
                // A state from before one already seen is stale, though it differs from what was sent: a retry's
                // `queued`, published by the worker that failed after another had claimed the job again and published
                // `running` (the same state as the first attempt's, not sent). It went out, and the stream showed a
                // running job as queued, without its progress.
                let order = Self.order(job)
                guard !state.ended, order >= state.lastOrder else { return false }
                state.lastOrder = order
                guard job.state != state.lastState else { return false }
                state.lastState = job.state
                emit(text, into: &state)
                if job.state.isTerminal {
                    state.ended = true
                    emit(nil, into: &state)
                }
                return true
            }
        }
    }

    /// Where a state stands in its job's life, in an order no clock decides: the claim it follows (the lease token,
    /// which every claim raises), then running, back in the queue (a retry or a requeue, which keep the token), ended.
    /// Queued before any claim is (0, 1).
    static func order(_ job: Job) -> (claim: Int, step: Int) {
        let step = switch job.state {
        case .running: 0
        case .queued: 1
        default: 2
        }
        return (job.leaseToken, step)
    }

    private static func emit(_ text: String?, into state: inout State) {
        if let send = state.send { send(text) } else { state.pending.append(text) }
    }

    /// The id of a stream's last event (the job's terminal state).
    static let endID = "end"

    static func event(_ name: String, _ data: Data, id: String? = nil) -> String {
        (id.map { "id: \($0)\n" } ?? "") + "event: \(name)\ndata: \(String(decoding: data, as: UTF8.self))\n\n"
    }

    deinit { events.unsubscribe(jobID, key) }
}
