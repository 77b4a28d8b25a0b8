import Dispatch
import Foundation
import Outbound
import Locks
import Logging
import Pipeline

/// Runs queued jobs on N worker threads (not Swift's cooperative pool), with crash recovery at start, cancellation,
/// a stall watchdog, retention and a graceful stop.
public final class JobQueue: Sendable {
    /// How the queue behaves; every number has a unit in its name or comment.
    public struct Configuration: Sendable {
        /// Worker threads; one x264 job already uses every core, so 1 by default.
        public var workers = 1
        /// A running job whose output has not advanced for this many seconds is failed with `stalled`.
        public var stallTimeout = 120.0
        /// Finished jobs (rows and files) are deleted this many hours after they end; nil keeps them.
        public var retentionHours: Double?
        /// Attempts a job may die in (its process crashing, or the server's) before it fails with `worker_crashed`.
        public var maxAttempts = 3
        /// Seconds between two progress writes to SQLite for one job.
        public var progressSaveInterval = 1.0
        /// Seconds an idle worker waits before looking at the store again (jobs from other processes).
        public var pollInterval = 1.0
        /// Seconds a claim lasts unless its worker renews it; a shared store gives a job whose lease ran out to
        /// another worker.
        public var leaseSeconds = 20.0
        /// Seconds between two renewals of the leases of running jobs.
        public var heartbeatInterval = 5.0
        /// On a shared store: seconds after its creation that a job whose settings this node cannot read (a newer
        /// node wrote them, in a rolling upgrade) is failed here rather than left to the others: a day for the nodes
        /// to be replaced; settings edited by hand, or a rollback, do not leave it queued for ever.
        public var unreadableSettingsGrace = 86_400.0
        /// Seconds between two sweeps of a shared data directory for what no job owns (folders of attempts whose
        /// node died, outputs of deleted jobs); one node at a time does it.
        public var straySweepInterval = 600.0
        /// Seconds a job whose process could not be started waits before it goes back to the queue, doubled at each
        /// attempt (1 s, then 2 s): a shortage of processes or memory for a moment does not spend every attempt.
        public var unavailableBackoff = 1.0
        /// Seconds a job whose input's URL failed for now (503, a reset connection) waits before it goes back to the
        /// queue, doubled at each attempt, at most a minute.
        public var fetchBackoff = 5.0
        /// Hours after its last bytes that an unfinished resumable (tus) upload is deleted (checked every minute).
        public var tusExpiryHours = 24.0
        /// Seconds to wait before each new try when the store refuses to record how a job ended (a full disk, a
        /// locked file); after the last, a transcode that succeeded is recorded as failed (`store_error`) instead.
        public var recordRetryDelays: [Double] = [0.2, 0.5, 1, 2, 4]
        /// Downloads inputs given by URL (under the outbound address policy); nil: such jobs fail.
        public var fetcher: URLFetcher?
        /// Probes a fetched input before it is used (a sandboxed child in the server); nil: in this process.
        public var prober: (any MediaProber)?

        public init() {}
    }

    /// What this process's workers have done, for metrics.
    public struct Statistics: Sendable {
        /// Upper bounds of the transcode duration histogram, in seconds.
        public static let durationBuckets: [Double] = [1, 5, 10, 30, 60, 300, 900, 3600]
        /// Jobs that ended, by final state.
        public var finished: [String: Int] = [:]
        /// Video frames encoded by successful jobs.
        public var framesEncoded = 0
        /// Cumulative counts of successful transcodes per duration bucket.
        public var durationBuckets = [Int](repeating: 0, count: Statistics.durationBuckets.count)
        public var durationCount = 0
        /// Seconds.
        public var durationSum = 0.0
    }

    /// Why a running job's cancellation token fired. `leaseLost`: the store said the job is another worker's now,
    /// nothing more is written about it; `leaseExpired`: the store could not be reached while the lease ran out,
    /// so the job goes back to the queue if the lease is still ours when the store answers again.
    /// `givenBack`: the job goes back to the queue without an attempt counted, for another node (this one cannot
    /// see the shared folder, or read the job's settings).
    private enum StopReason { case canceled, stalled, shuttingDown, leaseLost, leaseExpired, givenBack }

    private struct Running {
        let lease: Lease
        /// When the store last confirmed the lease; a clock that counts a suspended machine's time (the lease ran on
        /// in the store meanwhile) and that setting the wall clock does not move.
        var renewedAt: ContinuousClock.Instant
        let token: CancellationToken
        var reason: StopReason?
        /// When the job last advanced, for the stall watchdog: a clock that neither a wall-clock step (NTP, a VM
        /// restored) nor a suspended machine moves. With `Date()` a step forward of a few minutes failed, as stalled
        /// and for good, a job the watchdog looked at before its next progress (one in a slow phase surely, any one
        /// now and then), and a laptop's sleep longer than the stall timeout failed them all on waking.
        var lastAdvance: SuspendingClock.Instant
        var lastTime: Double
        /// Steps of the work after the last sample reported so far (`TranscodeProgress.finishing`), and of the
        /// check of a checkpoint before the first (`verifying`): they advance too.
        var lastFinishing = 0
        var lastVerifying = 0
        var progress: TranscodeProgress?
        /// While the input is being fetched from its URL.
        var fetch: FetchProgress?
        /// Set once the job's end is being recorded: a renewal refused from then on is that end, not a takeover.
        var ending = false
        /// A cancel that came while the end was being recorded, too late for it: if that end sends the job back to
        /// the queue (a crashed attempt retried, a shutdown), the job is canceled there instead of running again.
        var lateCancel = false
        /// When the watchdog stopped it for making no progress.
        var stalledAt: SuspendingClock.Instant?
        /// Its lease is no longer renewed: the attempt is stuck (see `heartbeat`).
        var leaseGivenUp = false

        /// Whether the job is another attempt's, or will be: its lease was lost, or is no longer renewed. What the
        /// store says of the job is then relayed to this node's streams, as for a job running elsewhere: a stuck
        /// attempt's entry, which never ends, kept them from the other node's progress and end for good.
        var isOvertaken: Bool { reason == .leaseLost || leaseGivenUp }
    }

    /// What a cancel did to a job registered here.
    private enum Signal {
        /// Its attempt was told to stop.
        case signaled
        /// Its end was being recorded: noted as a late cancel (see `Running.lateCancel`), for the attempt with this
        /// lease token.
        case ending(token: Int)
        /// No worker here runs it.
        case notRunning
    }

    private struct State {
        var running: [String: Running] = [:]
        /// Jobs whose cancellation arrived after a worker claimed them and before it registered them here: the
        /// worker cancels them as it registers them.
        var pendingCancels: Set<String> = []
        /// Cancel requests heard for jobs not running here (yet), with when: a job claimed here just before the
        /// request is canceled as it registers, not at its first renewal.
        var heardCancels: [String: Date] = [:]
        var stopping = false
        /// No job is claimed any more (the node is going away), though running ones go on: `stopTakingJobs`.
        var takesNoJobs = false
        /// On a shared store: the store's mark in the data directory did not read back (a mount gone stale or
        /// away), so no job is claimed until it does (`sharedFolderIsHere`).
        var sharedFolderLost = false
        /// When a look at the mark last came back (a read on a hard mount gone away never does).
        var sharedFolderCheckedAt: ContinuousClock.Instant?
        /// The store's identity, read at `start`: what its mark in the data directory says.
        var identity: String?
        /// On a shared store: jobs whose settings this node cannot read (written by a newer version, in a rolling
        /// upgrade), given back and not claimed here again until their grace is over, with when it is (seconds since
        /// 1970). Never dropped to make room: a job dropped was claimed again, and past the bound they were claimed in
        /// turn for ever, the jobs behind them never; a job past `maxUnreadable` fails instead.
        var unreadable: [String: Double] = [:]
        /// The stop's grace is over, whatever it was: `endGrace`.
        var graceEnded = false
        var started = false
        /// Workers between asking the store for a job and registering the one it gave (or hearing there is none):
        /// a job they claimed is in neither the store's queue nor `running` meanwhile.
        var claiming = 0
    }

    public let store: any JobStore
    public let directory: DataDirectory
    public let events: JobEvents
    public let configuration: Configuration
    public let logger: Logger
    private let runner: any JobRunner
    private let state = LockedValue(State())
    private let stats = LockedValue(Statistics())
    /// Wakes one idle worker. Only workers wait on it: when the watchdog shared it, a job's signal often woke the
    /// watchdog instead, and the job waited out a worker's `pollInterval` (up to a second) before it started.
    private let wake = DispatchSemaphore(value: 0)
    /// Signals of `wake` not yet taken, at most one per worker.
    private let wakes: LockedValue<WakeCount>
    /// Wakes the watchdog early, to stop.
    private let watchdogWake = DispatchSemaphore(value: 0)
    /// Wakes the sweeper early, to stop.
    private let sweeperWake = DispatchSemaphore(value: 0)
    /// Wakes the heartbeat early, to stop. Its own: waiting on the state's condition would wake it at every job's end.
    private let heartbeatWake = DispatchSemaphore(value: 0)
    private let finished = DispatchGroup()
    private let instance = UUID().uuidString.prefix(8).lowercased()
    /// The last state a live stream here was told of, for jobs running on other nodes.
    private let remoteStates = LockedValue<[String: JobState]>([:])

    public init(store: any JobStore, directory: DataDirectory, runner: any JobRunner = TranscodeRunner(),
                events: JobEvents = JobEvents(), configuration: Configuration = Configuration(),
                logger: Logger = .disabled) {
        self.store = store
        self.directory = directory
        self.runner = runner
        self.events = events
        self.configuration = configuration
        wakes = LockedValue(WakeCount(workers: configuration.workers))
        self.logger = logger
    }

    /// Recovers what a previous process left (jobs left running, stray outputs), then starts the workers, the
    /// watchdog and the sweeper. Returns the ids recovery requeued and failed; their new states are published like
    /// any other change.
    @discardableResult
    public func start() throws(StoreError) -> (requeued: [String], failed: [String]) {
        // Before anything here is swept: a folder of another store's files is refused, not emptied.
        let identity = try store.identity()
        try directory.claim(by: identity, shared: store.isShared) { () throws(StoreError) in try store.counts().values.reduce(0, +) }
        // Just read by `claim`: seen now, until the watch looks again.
        state.withLock { state in
            state.identity = identity
            state.sharedFolderCheckedAt = .now
        }
        // A store of our own: whatever is running was left by a process that died. A shared one: other nodes' jobs,
        // recovered only when their leases run out (by the sweeper).
        let recovered = store.isShared ? ([], []) : try store.recoverOrphans(maxAttempts: configuration.maxAttempts)
        published(recovered)
        if !store.isShared {
            try removeStrayOutputs()
            removePartialUploads()
            removeUnrecordedUploads()
        }
        store.watch { [weak self] notice in self?.heard(notice) }
        state.withLock { $0.started = true }
        let host = ProcessInfo.processInfo.hostName.prefix(40)
        for index in 0..<configuration.workers {
            spawn(name: "worker-\(index)") { [self] in work(worker: "\(host)/\(getpid())-\(instance)/\(index)") }
        }
        spawn(name: "watchdog") { [self] in watch() }
        spawn(name: "sweeper") { [self] in sweepPeriodically() }
        if store.isShared {
            // Not waited for at a stop: a read held on a hard mount that went away would hold the stop too.
            NamedThread.start("folder-watch") { [self] in
                while !stopping {
                    _ = sharedFolderIsHere()
                    _ = state.wait(timeout: Self.folderCheckInterval) { $0.stopping }
                }
            }
        }
        if configuration.workers > 0 { spawn(name: "heartbeat") { [self] in heartbeat() } }
        return recovered
    }

    /// Publishes the new states of jobs recovery moved, and logs those that failed for good.
    private func published(_ recovered: (requeued: [String], failed: [String])) {
        for id in recovered.requeued + recovered.failed {
            if let job = try? store.job(id: id) { events.publish(id, .state(job)) }
        }
        for id in recovered.failed {
            logger.error("job failed: its process stopped unexpectedly too many times",
                         ["job_id": .string(id), "attempts": .int(configuration.maxAttempts)])
        }
        if !recovered.requeued.isEmpty { jobQueued() }
    }

    /// What another node did to the store: a queued job wakes a worker here, a cancel request reaches the job if it
    /// runs here, a change of a job running elsewhere reaches the live streams watching it here.
    private func heard(_ notice: StoreNotice) {
        switch notice {
        case .queued:
            jobQueued()
        case .cancel(let id):
            if case .notRunning = signalCancel(id) {
                state.withLock { state in
                    let now = Date()
                    state.heardCancels = state.heardCancels.filter { now.timeIntervalSince($0.value) < 30 }
                    state.heardCancels[id] = now
                }
            }
        case .changed(let id):
            events.changed()
            relay(id)
        case .progressed(let id):
            // Only live streams care: the change watchers (webhook senders) wait for a change of state.
            relay(id)
        case .listening:
            jobQueued()
            for id in events.subscribedIDs { relay(id) }
        case .unheard(let reason):
            logger.warning("not listening to the store: jobs queued, changed or canceled on other nodes are missed here "
                           + "until it can (live progress of their jobs stops; claims and cancels still come by polling)",
                           ["error": .string(reason)])
        }
    }

    /// Tells this node's subscribers of a job that runs on another node what changed: its state, or its progress.
    private func relay(_ id: String) {
        guard events.hasSubscribers(id), state.withLock({ $0.running[id].map(\.isOvertaken) ?? true }) else {
            if !events.hasSubscribers(id) { remoteStates.withLock { _ = $0.removeValue(forKey: id) } }
            return
        }
        let found: Job?
        do {
            found = try store.job(id: id)
        } catch {
            return // the store is away: the next change, or the listener's return, relays again
        }
        guard let job = found else {
            // Deleted on another node, which deletes a queued job's row as it cancels it: no state follows, and the
            // streams here would wait for one for ever.
            remoteStates.withLock { _ = $0.removeValue(forKey: id) }
            events.publish(id, .gone)
            return
        }
        let changed = remoteStates.withLock { states -> Bool in
            defer { states[id] = job.state.isTerminal ? nil : job.state }
            return states[id] != job.state
        }
        if changed || job.state != .running {
            events.publish(id, .state(job))
        } else {
            let elapsed = job.startedAt.map { max(0, Date().timeIntervalSince1970 - $0) } ?? 0
            events.publish(id, .progress(TranscodeProgress(presentationTime: job.progressTime, duration: job.progressDuration,
                                                           framesEncoded: 0, elapsed: elapsed)))
        }
    }

    /// Whether the queue is up and not stopping (with no workers: an API-only node).
    public var isReady: Bool { state.withLock { $0.started && !$0.stopping } }

    /// Whether this node sees the data directory its store's other nodes share (as last read, every few seconds, on
    /// a thread of its own: a read here, on a request's thread, could hang on a hard mount gone away): always, for a
    /// store of its own. Not ready without it: uploads sent here would fail, or land where no other node looks.
    public var seesSharedFolder: Bool {
        guard store.isShared else { return true }
        return state.withLock { state in
            guard !state.sharedFolderLost, let checked = state.sharedFolderCheckedAt else { return false }
            return ContinuousClock.now - checked < .seconds(Self.folderCheckInterval * 6)
        }
    }

    /// Seconds between two looks at the shared folder's mark by its watch.
    static let folderCheckInterval = 5.0

    /// Tells an idle worker that a job was queued.
    public func jobQueued() {
        if wakes.withLock({ $0.signal() }) { wake.signal() }
    }

    /// Waits for `jobQueued` (or a stop) at most `pollInterval`.
    private func waitForWake() {
        if wake.wait(timeout: .now() + configuration.pollInterval) == .success { wakes.withLock { $0.taken() } }
    }

    /// The newest progress of a running job, fresher than the store's once-a-second copy (not of an attempt here
    /// whose lease is lost or given up: the job runs elsewhere, or will).
    public func liveProgress(of id: String) -> TranscodeProgress? {
        state.withLock { $0.running[id].flatMap { $0.isOvertaken ? nil : $0.progress } }
    }

    /// How far the download of a job's input given by URL is, while a worker here fetches it.
    public func liveFetch(of id: String) -> FetchProgress? {
        state.withLock { $0.running[id].flatMap { $0.isOvertaken ? nil : $0.fetch } }
    }

    /// Counters since start.
    public var statistics: Statistics { stats.withLock { $0 } }

    /// Jobs running now.
    public var runningCount: Int { state.withLock { $0.running.count } }

    /// Whether no job runs here and no worker is claiming one. With the store's count of queued jobs read first, a
    /// process that stops when both say nothing is left cannot stop with a job just claimed.
    public var isIdle: Bool { state.withLock { $0.running.isEmpty && $0.claiming == 0 } }

    /// Cancels a job: a queued one at once, a running one within a second (its partial output removed first).
    /// Returns the job as it is now; throws `invalid_transition` if it had already finished.
    @discardableResult
    public func cancel(id: String) throws(StoreError) -> Job {
        var signaled = false
        while true {
            switch signalCancel(id) {
            case .signaled:
                signaled = true
                // Stored too: if this attempt's end cannot be written (the database away until the lease runs out, or
                // the process killed first), whoever recovers the job cancels it rather than run it again: a node
                // of a shared store, or this store's next start.
                // Not running in the store any more (sent back to the queue meanwhile): as its state says, below.
                if !storeCancelRequest(id) { break }
                guard let job = try store.job(id: id) else { throw Self.notFound(id) }
                return job
            case .ending(let token):
                // The end this attempt records decides: wait for it; a job it sent back to the queue it cancels. An end
                // the store keeps refusing is not waited for again: the cancel stays noted, for that end.
                // Stored first, while the job is still running in the store: an end that sends it back to the queue
                // is then canceled in the same write (the store's rule), where noted only here the job was queued
                // for a moment, and on a shared store another node could claim it and announce it running again.
                storeCancelRequest(id)
                let ended = state.wait(timeout: 60) { $0.running[id]?.lease.token != token }
                guard let job = try store.job(id: id) else { throw Self.notFound(id) }
                if job.state == .canceled || !ended { return job }
                continue
            case .notRunning:
                break
            }
            guard let job = try store.job(id: id) else { throw Self.notFound(id) }
            switch job.state {
            case .queued:
                do throws(StoreError) {
                    let canceled = try store.cancelQueued(id: id)
                    // Counted as a worker's end is: only canceled running jobs were, and under a backlog, when most
                    // cancels find a job queued, the rate read near zero.
                    stats.withLock { $0.finished[JobState.canceled.rawValue, default: 0] += 1 }
                    removeCheckpoints(of: id) // of an attempt interrupted before
                    events.publish(id, .state(canceled))
                    return canceled
                } catch where error.code == "invalid_transition" {
                    continue // claimed meanwhile: cancel it as a running job
                }
            case .running where store.isShared:
                // Its worker may be on another node: the request reaches it through the store (NOTIFY, and the
                // next lease renewal at the latest), and the worker records the cancellation.
                guard try store.requestCancel(id: id) else { continue }
                if case .ending = signalCancel(id) { continue } // waited for as above, at the loop's start
                return job
            case .running:
                // Claimed by one of our workers that has not registered it yet: it cancels the job as it does.
                let pending = state.withLock { state -> Bool in
                    guard state.running[id] == nil else { return false }
                    state.pendingCancels.insert(id)
                    return true
                }
                guard pending else { continue }
                // Or it had just ended (and left `running`) when the job was read: then nothing is pending.
                guard let now = try store.job(id: id), !now.state.isTerminal else {
                    state.withLock { _ = $0.pendingCancels.remove(id) }
                    continue
                }
                // Stored too, for the next start should this process die before the worker records it.
                storeCancelRequest(id)
                return job
            case .canceled where signaled:
                // This cancel reached its worker, which recorded it before the store heard the request: done, not a
                // 409 for a job that "had already finished".
                return job
            default:
                throw StoreError(code: "invalid_transition", message: "The job has already finished (\(job.state.rawValue)).")
            }
        }
    }

    /// Notes a cancel in the store (`requestCancel`); false only when the store says the job is not running. A
    /// store that fails is logged, and does not fail the cancel: the attempt here was told either way.
    @discardableResult
    private func storeCancelRequest(_ id: String) -> Bool {
        do throws(StoreError) {
            return try store.requestCancel(id: id)
        } catch {
            logger.warning("storing a cancel request failed", ["job_id": .string(id), "error": .string(error.description)])
            return true
        }
    }

    /// Fires a registered job's cancellation, or notes it as late when the job's end is being recorded.
    private func signalCancel(_ id: String) -> Signal {
        state.withLock { state -> Signal in
            guard var running = state.running[id] else { return .notRunning }
            if running.ending {
                running.lateCancel = true
                state.running[id] = running
                return .ending(token: running.lease.token)
            }
            // A cancel outranks a shutdown that has not ended the attempt yet: sent back to the queue, the job ran
            // again at the next start though the cancel was answered 202.
            if running.reason == nil || running.reason == .shuttingDown { running.reason = .canceled }
            state.running[id] = running
            running.token.cancel()
            return .signaled
        }
    }

    private static func notFound(_ id: String) -> StoreError {
        StoreError(code: "not_found", message: "No job has the id \(id).")
    }

    /// Waits until the job is in a terminal state, or `timeout` seconds have passed; returns the job as it is then
    /// (nil if it does not exist). Woken by the job's own state events, not by polling the store.
    public func waitUntilFinished(id: String, timeout: Double) throws(StoreError) -> Job? {
        let ended = LockedValue<Job?>(nil)
        let key = events.subscribe(id) { event in
            guard case .state(let job) = event, job.state.isTerminal else { return }
            ended.withLock { $0 = job }
            ended.notifyAll()
        }
        defer { events.unsubscribe(id, key) }
        // Read after subscribing: an end published before this read is in the store, one after it wakes the wait.
        guard let current = try store.job(id: id) else { return nil }
        if current.state.isTerminal { return current }
        _ = ended.wait(timeout: timeout) { $0 != nil }
        if let job = ended.withLock({ $0 }) { return job }
        return try store.job(id: id)
    }

    /// Claims no more jobs from now on; running ones go on. A server calls it when asked to stop, before its HTTP
    /// requests drain: a job claimed in those seconds had only what was left of the grace, and was sent back to the
    /// queue half done where another node, or the next start, could have taken it whole.
    public func stopTakingJobs() {
        state.withLock { $0.takesNoJobs = true }
    }

    /// Ends the grace of a stop under way, or of the next one, at once: the running jobs go back to the queue now
    /// (an operator's second Ctrl-C or SIGTERM).
    public func endGrace() {
        state.withLock { $0.graceEnded = true }
        state.notifyAll()
    }

    /// Stops taking jobs, lets running ones finish for up to `grace` seconds (or until `endGrace`), then sends the
    /// rest back to the queue for the next start, and waits for the threads to end.
    public func stop(grace: Double) {
        let started = state.withLock { state -> Bool in
            state.stopping = true
            return state.started
        }
        state.notifyAll()
        if started {
            for _ in 0..<configuration.workers { jobQueued() }
            watchdogWake.signal()
            sweeperWake.signal()
            heartbeatWake.signal()
        }
        _ = state.wait(timeout: grace) { $0.running.isEmpty || $0.graceEnded }
        state.withLock { state in
            for (id, var running) in state.running {
                running.reason = running.reason ?? .shuttingDown // a cancel or a stall already decided keeps its reason
                state.running[id] = running
                running.token.cancel()
            }
        }
        finished.wait()
        store.stopWatching()
    }

    // MARK: Threads

    private func spawn(name: String, _ body: @escaping @Sendable () -> Void) {
        finished.enter()
        let started = NamedThread.start(name) { [finished] in
            body()
            finished.leave()
        }
        // Counted and never started, it held `stop` for ever.
        if !started {
            finished.leave()
            logger.error("starting a thread failed", ["thread": .string(name)])
        }
    }

    private var stopping: Bool { state.withLock { $0.stopping } }

    private func work(worker: String) {
        // A claim that failed may still have been made: its answer lost with the link (a network, a proxy or a
        // failover cutting in after the statement committed). The job then stayed running under this worker's name,
        // renewed by no one, until its lease ran out and cost it an attempt (with --max-attempts 1, failed without
        // having run): it is looked for before the next claim, and run.
        var claimMayHaveBeenMade = false
        while !stopping {
            if state.withLock({ $0.takesNoJobs }) {
                waitForWake()
                continue
            }
            if store.isShared, !sharedFolderIsHere() {
                waitForWake()
                continue
            }
            let job: Job?
            state.withLock { $0.claiming += 1 }
            do {
                let now = Date().timeIntervalSince1970
                let skipping = state.withLock { state -> [String] in
                    // Past its grace a job is claimed again, and fails here.
                    state.unreadable = state.unreadable.filter { $0.value > now }
                    return Array(state.unreadable.keys)
                }
                var lost: Job?
                if claimMayHaveBeenMade {
                    let found = try store.runningJobs(leasedTo: worker)
                    lost = found.first
                    // Two claims in a row that lost their answers: the next one is looked for after this job.
                    claimMayHaveBeenMade = found.count > 1
                    if let lost {
                        logger.warning("a claim whose answer was lost took a job: it runs here", ["job_id": .string(lost.id), "worker": .string(worker)])
                    }
                }
                if let lost {
                    job = lost
                } else {
                    job = try store.claimNext(worker: worker, leaseSeconds: configuration.leaseSeconds, skipping: skipping)
                }
            } catch {
                logger.error("claiming the next job failed", ["worker": .string(worker), "error": .string(error.description)])
                claimMayHaveBeenMade = true
                job = nil
            }
            guard let job else {
                state.withLock { $0.claiming -= 1 }
                waitForWake()
                continue
            }
            process(job) // registers it, and counts this claim done
        }
    }

    /// Jobs given back for their settings that a node remembers not to claim again (each claim names them).
    static let maxUnreadable = 1000

    /// Notes that this node leaves job `id` to others until `graceEnds`; false when it already leaves
    /// `maxUnreadable` jobs that are still queued (those that left the queue, run by a newer node or deleted, are
    /// forgotten first: counted, a thousand jobs given back over a day failed the next one for good).
    private func leaveToOthers(_ id: String, until graceEnds: Double) -> Bool {
        if state.withLock({ $0.unreadable.count >= Self.maxUnreadable }) {
            let ids = state.withLock { Array($0.unreadable.keys) }
            var gone: [String] = []
            for other in ids {
                guard let job = try? store.job(id: other) else { continue } // the store away: kept
                if job.state != .queued { gone.append(other) }
            }
            state.withLock { state in gone.forEach { state.unreadable.removeValue(forKey: $0) } }
        }
        return state.withLock { state in
            guard state.unreadable.count < Self.maxUnreadable else { return false }
            state.unreadable[id] = graceEnds
            return true
        }
    }

    /// The jobs this node leaves to nodes that can read their settings (see `Configuration.unreadableSettingsGrace`).
    public var jobsLeftToOthers: [String] { state.withLock { Array($0.unreadable.keys) } }

    /// On a shared store: whether the data directory still holds the store's mark (read from the disk), logged
    /// when that changes. Without it the folder here is not the cluster's (a network mount gone stale, unmounted,
    /// never remounted after a restart of its server) and this node takes no job.
    private func sharedFolderIsHere() -> Bool {
        guard let identity = state.withLock({ $0.identity }) else { return true }
        let text = try? String(contentsOfFile: directory.storeIdentityPath, encoding: .utf8)
        let here = text?.trimmingCharacters(in: .whitespacesAndNewlines) == identity
        let changed = state.withLock { state -> Bool in
            defer {
                state.sharedFolderLost = !here
                state.sharedFolderCheckedAt = .now
            }
            return state.sharedFolderLost == here
        }
        if changed && !here {
            logger.error("the shared data directory is not here (its store-id cannot be read): this node takes no job until it is back, "
                         + "and a job that failed here meanwhile goes back to the queue", ["path": .string(directory.storeIdentityPath)])
        } else if changed {
            logger.info("the shared data directory is back: this node takes jobs again", ["path": .string(directory.storeIdentityPath)])
        }
        return here
    }

    private func process(_ claimed: Job) {
        let id = claimed.id
        guard let lease = claimed.currentLease else {
            state.withLock { $0.claiming -= 1 }
            return
        }
        let token = CancellationToken()
        state.withLock { state in
            state.claiming -= 1
            // An earlier attempt here whose lease ran out while it ran (a renewal held up by the store) and that the
            // store gave to this one: it is not the job's any more. It stops, and its entry is this one's now: what it
            // still does (progress, its end) leaves this attempt alone (`ownEntry`).
            if let earlier = state.running[id], earlier.lease.token != lease.token { earlier.token.cancel() }
            var running = Running(lease: lease, renewedAt: .now, token: token, lastAdvance: .now, lastTime: -1)
            if state.pendingCancels.remove(id) != nil || state.heardCancels.removeValue(forKey: id) != nil {
                running.reason = .canceled
                token.cancel()
            } else if state.stopping {
                // Claimed while `stop` ran: its sweep of running jobs may already be past, so go back to the queue
                // now rather than run unseen (stop would wait for this thread forever).
                running.reason = .shuttingDown
                token.cancel()
            }
            state.running[id] = running
        }
        // What earlier attempts left (partial folders of a worker that died or lost its lease): nobody else may
        // write them now, and an old holder that still does finds its folder gone and fails, its writes refused.
        // Once registered: the heartbeat renews the lease meanwhile (a big folder on slow storage takes a while),
        // and each folder removed counts as progress for the watchdog.
        for path in directory.leftovers(of: claimed) {
            removeFile(path, of: "job_id", id)
            _ = ownEntry(id, token: lease.token) { $0.lastAdvance = .now }
        }
        events.publish(id, .state(claimed))
        logger.info("job started", ["job_id": .string(id), "attempt": .int(claimed.attempts)])
        let outcome: Result<TranscodeResult, MediaError>
        var givesBack = false
        let graceEnds = claimed.createdAt + configuration.unreadableSettingsGrace
        if let unreadable = claimed.unreadableSettings, store.isShared, Date().timeIntervalSince1970 < graceEnds,
           leaveToOthers(id, until: graceEnds) {
            // In a rolling upgrade a newer node may have written settings this version does not know (a new key): it
            // failed such jobs for good though a newer node could run them. Given back, and left to the others.
            logger.warning("the job's settings cannot be read by this version of transcoderd (a newer node's?): "
                           + "it goes back to the queue for a node that can read them", ["job_id": .string(id), "problem": .string(unreadable.problem)])
            givesBack = true
            outcome = .failure(MediaError(code: "invalid_settings", message: unreadable.problem))
        } else if let unreadable = claimed.unreadableSettings {
            // Running with other settings than the ones asked for would be a silent lie.
            outcome = .failure(MediaError(code: "invalid_settings",
                                          message: "The job's stored settings can no longer be read: \(unreadable.problem)"))
        } else {
            outcome = execute(claimed, lease: lease, token: token)
        }
        if case .failure(let error) = outcome, Self.isTransient(error), claimed.attempts < configuration.maxAttempts {
            // No process could be started (none or no memory left for a moment), or the store failed what the job
            // needed before it ran (a failover, a locked file): wait before the job goes back to the queue, still
            // holding it (the heartbeat renews the lease), or every attempt is spent in a few milliseconds.
            // Doubling, at most 8 s; the wait is not a stall; a cancel or a shutdown ends it (a shutdown sends the
            // job back without spending an attempt).
            // A URL that failed waits longer (5 s, 10 s, … at most a minute): a server restarting or shedding load;
            // or as long as its `Retry-After` asks, if longer, up to a minute (the three attempts were spent in 15 s
            // on a server that said to come back in 30; longer, the worker would sit idle for others' jobs).
            let (base, longest) = error.passing ? (configuration.fetchBackoff, 60.0) : (configuration.unavailableBackoff, 8.0)
            let seconds = max(min(longest, base * Double(1 << min(10, max(0, claimed.attempts - 1)))),
                              min(error.retryAfter ?? 0, Self.longestRetryAfter))
            Self.pause(seconds, endingWhen: { token.isCanceled || self.stopping }) {
                _ = ownEntry(id, token: lease.token) { $0.lastAdvance = .now }
            }
            if stopping { _ = ownEntry(id, token: lease.token) { $0.reason = $0.reason ?? .shuttingDown } }
        }
        // A later attempt here took the job over: this one's end is not to be written.
        var reason = ownEntry(id, token: lease.token) { running -> StopReason? in
            running.ending = true
            return running.reason
        } ?? .leaseLost
        // A failure on a node that no longer sees the shared folder is the node's, not the job's: it goes back to
        // the queue, its attempt not counted, for a node that does. A mount gone stale or away failed every job
        // of the cluster this node claimed, for good, in milliseconds each (`input_missing`).
        if case .failure = outcome, reason == nil, store.isShared, givesBack || !sharedFolderIsHere() {
            reason = .givenBack
        }
        if case .failure = outcome {
            // Before the end is recorded: a job sent back to the queue may be claimed again at once, and the files
            // of its next attempt must not be mistaken for this one's. Only this attempt's own folders: another
            // worker may hold the job by now.
            for path in [directory.outputDirectory(for: claimed)] + directory.partialOutputs(for: claimed) {
                removeFile(path, of: "job_id", id)
            }
        }
        var recorded: Recorded = reason == .leaseLost ? .leaseLost : record(outcome, of: claimed, lease: lease, reason: reason)
        // A cancel that came while the end was recorded: a job that end sent back to the queue is canceled there,
        // before it leaves `running` (a `cancel` waits for that, and then finds it canceled).
        var lateCanceled = false
        if case .stored(let job) = recorded, job.state == .queued, state.withLock({ $0.running[id]?.lateCancel == true }),
           let canceled = try? store.cancelQueued(id: id) {
            recorded = .stored(canceled)
            lateCanceled = true
        }
        let (stopping, late) = state.withLock { state -> (Bool, Bool) in
            // Only this attempt's entry: the job, back in the queue, may be another worker's attempt by now.
            guard state.running[id]?.lease.token == lease.token else { return (state.stopping, false) }
            let late = state.running[id]?.lateCancel == true
            state.running.removeValue(forKey: id)
            return (state.stopping, late)
        }
        state.notifyAll()
        if stopping { heartbeatWake.signal() }
        let final: Job?
        switch recorded {
        case .stored(let job): final = job
        case .leaseLost, .notRecorded: final = nil
        }
        // A success not stored goes, unless a shared store may have stored it after all (its answer lost, the store
        // gone until the lease ran out): the stray sweep removes it once the store shows it is not the job's output.
        let maybeStored = if case .notRecorded = recorded, store.isShared { true } else { false }
        if case .success = outcome, final?.state != .succeeded, !maybeStored {
            removeFile(directory.outputDirectory(for: claimed), of: "job_id", id)
        }
        // Checkpoints serve the job's next attempt; once it has ended (or is gone) they have served.
        if let final, final.state.isTerminal { removeCheckpoints(of: id) }
        if case .leaseLost = recorded {
            logger.error("job given up: its lease moved on to another worker, which owns the job and its result now; "
                         + "this attempt's output was discarded", ["job_id": .string(id), "lease_token": .int(lease.token)])
            // The other worker's changes were not relayed while this attempt's entry stood (a job running here is
            // this node's to publish): its streams here learn the job's state from the store now.
            relay(id)
            return
        }
        // A late cancel that came after the look above: the job is canceled as any other once its end is published.
        let cancelAfter = late && !lateCanceled && final?.state == .queued
        if final?.state == .queued, !cancelAfter { jobQueued() } // retried after a crash: a worker takes it again
        guard let final else {
            // Not recorded (the store away): on a shared store, another node may have moved the job meanwhile.
            if store.isShared { relay(id) }
            return
        }
        stats.withLock { stats in
            guard final.state.isTerminal else { return }
            stats.finished[final.state.rawValue, default: 0] += 1
            if final.state == .succeeded, case .success(let result) = outcome {
                // Saturating: a child's count is bounded (`JobMessage.bounded`), not a sum of many.
                let (sum, overflow) = stats.framesEncoded.addingReportingOverflow(result.framesEncoded)
                stats.framesEncoded = overflow ? .max : sum
                for (index, bound) in Statistics.durationBuckets.enumerated() where result.elapsed <= bound {
                    stats.durationBuckets[index] += 1
                }
                stats.durationCount += 1
                stats.durationSum += result.elapsed
            }
        }
        switch final.state {
        case .failed:
            logger.info("job failed", ["job_id": .string(id), "code": .string(final.errorCode ?? ""),
                                       "message": .string(final.errorMessage ?? "")])
        case .queued:
            logger.info("job back in the queue", ["job_id": .string(id), "attempts": .int(final.attempts)])
        default:
            logger.info("job ended", ["job_id": .string(id), "state": .string(final.state.rawValue)])
        }
        events.publish(id, .state(final))
        if cancelAfter { _ = try? cancel(id: id) }
    }

    /// What recording a job's end came to.
    private enum Recorded {
        /// The job as stored now.
        case stored(Job)
        /// The store refused: the lease had moved on to another worker.
        case leaseLost
        /// Nothing could be written (the lease runs out, and the job is recovered).
        case notRecorded
    }

    /// Records how the job ended, trying again while the store refuses. A success that cannot be recorded is recorded
    /// as a failure (`store_error`), so the job never stays `running` with nobody running it. On a shared store that
    /// cannot be reached, the end is tried again until the lease would have run out (a database restart loses
    /// nothing), and after that the job is left to the lease: another node runs it again. With a store of its own,
    /// nobody else will record the end: the last write is tried until it goes through or the queue stops (the next
    /// start's recovery then sends the job back to the queue).
    private func record(_ outcome: Result<TranscodeResult, MediaError>, of job: Job, lease: Lease, reason: StopReason?) -> Recorded {
        let attempt = { () throws(StoreError) -> Job in try self.write(outcome, of: job, lease: lease, reason: reason) }
        let renewedAt = ownEntry(job.id, token: lease.token) { $0.renewedAt } ?? .now
        let leaseEnd = store.isShared ? renewedAt + .seconds(configuration.leaseSeconds) : nil
        // Only a finished transcode has a fallback (recorded as failed, its output discarded): a failure is the last
        // write, and so is a cancel, a stall or a requeue, which the fallback turned into a `store_error` failure
        // for good (a cancel the user asked for, a job that was to run again). With a store of its own nobody else
        // will record them: tried until they go through or the queue stops.
        let succeeded = if case .success = outcome { true } else { false }
        let persistent = !store.isShared && !succeeded && reason != .shuttingDown
        switch retrying(job.id, what: "recording the end of the job", until: leaseEnd, persistent: persistent, attempt) {
        case .success(let final):
            return .stored(final)
        case .failure(let error) where error.code == "lease_lost":
            return .leaseLost
        case .failure(let error):
            guard succeeded, reason != .shuttingDown, !Self.isPermanent(error),
                  !(store.isShared && error.code == "store_unavailable") else { break }
            let message = "The transcode ended but the job store could not record it (\(error.message)); the output was discarded. "
                + "Submit the job again."
            let fallback = retrying(job.id, what: "recording the job as failed", persistent: !store.isShared) { () throws(StoreError) -> Job in
                try self.store.markFailed(lease, code: "store_error", message: message)
            }
            switch fallback {
            case .success(let failed): return .stored(failed)
            case .failure(let error) where error.code == "lease_lost": return .leaseLost
            case .failure: break
            }
        }
        logger.error("the job's end could not be recorded", ["job_id": .string(job.id)])
        return .notRecorded
    }

    /// A failure that says nothing of the job: no process could be started for it, the store failed before it ran,
    /// or its input's URL failed for now. The job waits a moment (`unavailableBackoff` or `fetchBackoff`, doubling)
    /// and goes back to the queue.
    private static func isTransient(_ error: MediaError) -> Bool {
        error.code == "worker_unavailable" || error.code == "store_error" || error.passing
    }

    /// A store that failed what a job needs before it runs (after `recordRetryDelays`), which is not the job's fault:
    /// `store_error`, a job that goes back to the queue up to its limit of attempts, as a crash does. A refusal
    /// that cannot change keeps its own code.
    private static func storeFailure(_ error: StoreError, while what: String) -> MediaError {
        guard !isPermanent(error) else { return MediaError(code: error.code, message: error.message) }
        return MediaError(code: "store_error", message: "The job store failed while \(what): \(error.message)")
    }

    /// A refusal that trying again cannot change: the job is gone, the state machine refuses the move, or the job
    /// is another worker's now.
    private static func isPermanent(_ error: StoreError) -> Bool {
        // `invalid_text`: a value the store refuses now will be refused again (tried on, a job's end never came).
        error.code == "not_found" || error.code == "invalid_transition" || error.code == "lease_lost" || error.code == "invalid_text"
    }

    /// Runs `body` until it succeeds or `recordRetryDelays` are used up (or, with `deadline`, until then, once a
    /// second after the delays; `persistent`, until the queue stops, at the last delay), logging each failure. A
    /// refusal that cannot change (the job is gone, the state machine refuses the move, the job is another
    /// worker's) is not tried again.
    private func retrying<T>(_ id: String, what: String, until deadline: ContinuousClock.Instant? = nil, persistent: Bool = false,
                             unless canceled: CancellationToken? = nil,
                             _ body: () throws(StoreError) -> T) -> Result<T, StoreError> {
        var delays = configuration.recordRetryDelays[...]
        while true {
            do throws(StoreError) {
                return .success(try body())
            } catch {
                let permanent = Self.isPermanent(error)
                var delay = delays.popFirst()
                if delay == nil, let deadline, ContinuousClock.now < deadline { delay = min(1, (deadline - .now).inSeconds) }
                if delay == nil, persistent, !stopping { delay = configuration.recordRetryDelays.last ?? 1 }
                logger.error("\(what) failed", ["job_id": .string(id), "error": .string(error.description),
                                                  "retrying": .string(delay == nil || permanent ? "no" : "yes")])
                guard !permanent, let delay else { return .failure(error) }
                guard let canceled else {
                    Thread.sleep(forTimeInterval: delay)
                    continue
                }
                // A job asked to stop (a cancel, a shutdown, a lost lease) does not wait out the tries.
                Self.pause(delay, endingWhen: { canceled.isCanceled })
                if canceled.isCanceled { return .failure(error) }
            }
        }
    }

    /// Sleeps `seconds` in steps of 50 ms, ending early once `stop` says so; `step` runs before each.
    private static func pause(_ seconds: Double, endingWhen stop: () -> Bool, step: () -> Void = {}) {
        let until = SuspendingClock.now + .seconds(seconds)
        while SuspendingClock.now < until, !stop() {
            step()
            usleep(50_000)
        }
    }

    private func execute(_ job: Job, lease: Lease, token: CancellationToken) -> Result<TranscodeResult, MediaError> {
        var upload: Upload
        switch retrying(job.id, what: "reading the job's input upload", unless: token,
                        { () throws(StoreError) in try store.upload(id: job.inputUpload) }) {
        case .success(let found?): upload = found
        case .success(nil):
            return .failure(MediaError(code: "input_missing", message: "The job's input upload \(job.inputUpload) no longer exists."))
        case .failure(let error): return .failure(Self.storeFailure(error, while: "reading the job's input upload"))
        }
        if upload.awaitsFetch {
            do throws(MediaError) {
                upload = try fetchInput(upload, of: job, token: token)
            } catch {
                return .failure(error)
            }
        }
        guard FileManager.default.fileExists(atPath: upload.path) else {
            return .failure(MediaError(code: "input_missing", message: "The input file of upload \(upload.id) has vanished from the data directory."))
        }
        var job = job
        if let id = job.settings.filters?.video?.watermark?.upload {
            // The pipeline takes the watermark as a file: find the upload it names.
            let image: Upload?
            switch retrying(job.id, what: "reading the watermark's upload", unless: token,
                            { () throws(StoreError) in try store.upload(id: id) }) {
            case .success(let found): image = found
            case .failure(let error): return .failure(Self.storeFailure(error, while: "reading the watermark's upload"))
            }
            guard let image, FileManager.default.fileExists(atPath: image.path) else {
                return .failure(MediaError(code: "input_missing", message: "filters.video.watermark.upload: the upload \(id) no longer exists."))
            }
            job.settings.filters?.video?.watermark?.imagePath = image.path
        }
        var lastSaved: SuspendingClock.Instant?
        var resumeLogged = false
        do throws(MediaError) {
            let checkpoint = directory.adoptCheckpoint(for: job)
            return .success(try runner.run(job, input: upload, outputDirectory: directory.outputDirectory(for: job),
                                           checkpointDirectory: checkpoint, cancellation: token) { progress in
                let now = SuspendingClock.now
                if !resumeLogged, let seconds = progress.resumedFrom {
                    resumeLogged = true
                    logger.info("job resumed from its checkpoint", ["job_id": .string(job.id), "seconds": .double(seconds)])
                }
                let own: Bool? = ownEntry(job.id, token: lease.token) { running -> Bool in
                    if progress.presentationTime > running.lastTime {
                        running.lastTime = progress.presentationTime
                        running.lastAdvance = now
                    }
                    if let steps = progress.finishing, steps > running.lastFinishing {
                        running.lastFinishing = steps
                        running.lastAdvance = now
                    }
                    if let steps = progress.verifying, steps > running.lastVerifying {
                        running.lastVerifying = steps
                        running.lastAdvance = now
                    }
                    running.progress = progress
                    return !running.isOvertaken
                }
                guard let own else { return } // a later attempt here has the job
                // One whose lease is lost or given up winds down unheard: its streams follow the job's new attempt.
                if own { events.publish(job.id, .progress(progress)) }
                // While a checkpoint is checked the time is 0, and not saved (the claim zeroed the store's; the
                // first time past the checkpoint is saved as the attempt goes on). Nor once the attempt is no longer
                // this node's: its writes are refused, and cut off from the store each waited out the connect
                // timeout, holding the worker for as long as the partition lasted.
                if own, progress.verifying == nil && lastSaved.map({ now - $0 >= .seconds(configuration.progressSaveInterval) }) ?? true {
                    lastSaved = now
                    do throws(StoreError) {
                        try store.saveProgress(lease, time: progress.presentationTime, duration: progress.duration)
                    } catch where error.code == "lease_lost" {
                        stop(lease, .leaseLost, because: error.message)
                    } catch {
                        logger.warning("saving progress failed", ["job_id": .string(job.id), "error": .string(error.description)])
                    }
                }
            })
        } catch {
            return .failure(error)
        }
    }

    /// Downloads the job's input from its URL into the upload waiting for it: streamed to a temporary file (SHA-256
    /// on the way), probed, flushed and renamed into place, then recorded. Progress goes to live watchers; a
    /// download that advances keeps the stall watchdog away; canceling the job stops it. Nothing stays on failure.
    private func fetchInput(_ waiting: Upload, of job: Job, token: CancellationToken) throws(MediaError) -> Upload {
        guard let fetcher = configuration.fetcher, let url = waiting.sourceURL else {
            throw MediaError(code: "fetch_unavailable", message: "This node cannot fetch inputs given by URL.")
        }
        let temporary = directory.uploads.appendingPathComponent(DataDirectory.partialUploadName("fetch-\(job.id)-\(job.leaseToken)")).path
        unlink(temporary)
        defer { unlink(temporary) }
        let started = FetchProgress(bytes: 0, totalBytes: nil)
        ownEntry(job.id, token: job.leaseToken) { $0.fetch = started }
        events.publish(job.id, .fetching(started))
        defer { ownEntry(job.id, token: job.leaseToken) { $0.fetch = nil } }
        logger.info("fetching the input", ["job_id": .string(job.id), "url": .string(RedactedURL.text(url))])
        let fetched: URLFetcher.Fetched
        do {
            fetched = try fetcher.fetch(url, to: temporary) { [self] bytes, total in
                let progress = FetchProgress(bytes: bytes, totalBytes: total)
                let advanced = ownEntry(job.id, token: job.leaseToken) { running -> Bool in
                    // A download is alive while it reports (about once a second): its own stall timeout, not the
                    // job's, tells when it is stuck, and fails it as passing (tried again). Counted only when bytes
                    // came, a server slow to answer (its first byte later than --stall-timeout) failed the job for
                    // good as stalled.
                    running.lastAdvance = .now
                    guard running.fetch != progress else { return false }
                    running.fetch = progress
                    return !running.isOvertaken
                } ?? false
                if advanced { events.publish(job.id, .fetching(progress)) }
                return !token.isCanceled
            }
        } catch {
            // A connection that failed or stalled, or an answer that says "later" (408, 429, 5xx), may go better in
            // a moment, as a webhook's does: the job is tried again, up to its attempts.
            let passing = ["connection_failed", "stalled"].contains(error.code)
                || error.code == "http_status" && error.status.map { [408, 425, 429].contains($0) || (500...599).contains($0) } == true
            throw MediaError(code: error.code, message: error.message, passing: passing, retryAfter: error.retryAfter)
        }
        // The probe (bounded by --probe-timeout, which may be longer than --stall-timeout) and the flush to disk
        // (gigabytes, on slow storage) have no bytes to count: the job is alive meanwhile, beaten once a second.
        let heartbeat = DispatchSource.makeTimerSource(queue: .global())
        heartbeat.schedule(deadline: .now(), repeating: 1)
        heartbeat.setEventHandler { [self] in _ = ownEntry(job.id, token: job.leaseToken) { $0.lastAdvance = .now } }
        heartbeat.resume()
        defer { heartbeat.cancel() }
        let tracks = try (configuration.prober ?? InProcessProber()).probe(path: temporary)
        guard tracks.contains(where: { $0.mediaType == .video || $0.mediaType == .audio }) else {
            throw MediaError(code: "no_media_tracks", message: "The file at the URL has neither a video nor an audio track.")
        }
        var upload = waiting
        // A name of this attempt's own (the first claim's is the upload's id): an earlier holder of the job that is
        // still fetching (paused, its lease run out and taken over) must neither replace the file another attempt
        // records nor, failing to record its own, remove it.
        upload.path = directory.uploadPath(id: waiting.id) + (job.leaseToken > 1 ? ".\(job.leaseToken)" : "")
        try FileDurability.syncFile(atPath: temporary)
        guard rename(temporary, upload.path) == 0 else {
            throw MediaError(code: "storage_error", message: "Storing the fetched input failed: \(String(cString: strerror(errno))).")
        }
        try FileDurability.syncDirectory(containing: upload.path)
        upload.size = Int(fetched.size)
        upload.sha256 = fetched.sha256
        upload.tracks = tracks
        upload.contentType = fetched.contentType
        // Named as the answer names it (Content-Disposition), as `POST /v1/uploads` with a URL does, not after the
        // URL, and cleaned as every upload's name is (another server's text: no path, no control characters).
        if let name = fetched.filename { upload.filename = Upload.cleanFilename(name) }
        if case .failure(let error) = retrying(job.id, what: "recording the fetched input", unless: token,
                                               { () throws(StoreError) in try store.completeFetch(upload) }) {
            // Another attempt recorded the same URL's bytes first (or this one did, its answer lost): they are the
            // input. The file goes only when the store says the input is another one: a store that failed may have
            // recorded this very file before its answer was lost, and removing it left the job an input it lacks.
            var recorded: Upload?
            var answered = true
            do throws(StoreError) { recorded = try store.upload(id: upload.id) } catch { answered = false }
            if answered, recorded?.path != upload.path { unlink(upload.path) }
            if let recorded, !recorded.sha256.isEmpty, access(recorded.path, R_OK) == 0,
               error.code == "not_found" || recorded.path == upload.path {
                logger.info(recorded.path == upload.path ? "input fetched" : "input fetched by another attempt",
                            ["job_id": .string(job.id), "upload_id": .string(upload.id)])
                return recorded
            }
            throw Self.storeFailure(error, while: "recording the fetched input")
        }
        logger.info("input fetched", ["job_id": .string(job.id), "upload_id": .string(upload.id), "bytes": .int(upload.size)])
        return upload
    }

    private func write(_ outcome: Result<TranscodeResult, MediaError>, of job: Job, lease: Lease,
                       reason: StopReason?) throws(StoreError) -> Job {
        switch (outcome, reason) {
        case (.success(let result), _):
            return try store.markSucceeded(lease, outputPath: result.path, size: result.size, tracks: result.tracks,
                                           files: result.files, duration: result.duration, framesEncoded: result.framesEncoded,
                                           seconds: result.elapsed)
        case (.failure, .canceled?):
            return try store.markCanceled(lease)
        case (.failure, .stalled?):
            return try store.markFailed(lease, code: "stalled",
                                        message: "The job made no progress for \(Int(configuration.stallTimeout)) seconds and was stopped.")
        case (.failure, .shuttingDown?), (.failure, .leaseLost?), (.failure, .leaseExpired?), (.failure, .givenBack?):
            return try store.requeue(lease)
        case (.failure(let error), nil) where error.code == "worker_crashed" || Self.isTransient(error):
            // A crash may not happen again (a one-off signal, a memory spike), nor a child that could not start, nor
            // a store that failed before the job ran: the job runs again, up to its limit.
            guard job.attempts >= configuration.maxAttempts else {
                let what = switch error.code {
                case "worker_crashed": "the job's process crashed; it runs again"
                case "store_error": "the job store failed before the job ran; it runs again"
                case "worker_unavailable": "no process could be started for the job; it runs again"
                default: "fetching the job's input failed for now; it runs again"
                }
                logger.error(what, ["job_id": .string(job.id), "attempt": .int(job.attempts), "error": .string(error.message)])
                return try store.retry(lease)
            }
            return try store.markFailed(lease, code: error.code,
                                        message: "\(shown(error, of: job.id)) (attempt \(job.attempts) of \(configuration.maxAttempts))")
        case (.failure(let error), nil):
            return try store.markFailed(lease, code: error.code, message: shown(error, of: job.id))
        }
    }

    /// A failure's message as the job shows it to API clients and webhook receivers: paths inside the data
    /// directory from it, not from the machine's root (`jobs/…/output.mp4`, not `/srv/transcoderd/data/jobs/…`).
    /// The log line of the failure keeps them whole.
    private func shown(_ error: MediaError, of id: String) -> String {
        // No NUL: neither store keeps one (a failure that could not be recorded left its job running).
        let message = error.message.contains("\u{0}") ? error.message.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : error.message
        let root = directory.root.path
        guard root.count > 1, message.contains(root + "/") else { return message }
        logger.info("the job's failure names a path in the data directory", ["job_id": .string(id), "error": .string(message)])
        return message.replacingOccurrences(of: root + "/", with: "")
    }

    /// Stops jobs that made no progress for `stallTimeout`. On a thread of its own: while the sweeps ran on it (a
    /// stray sweep is a store round trip per entry of `outputs/`, a retention backlog many deletions), a hung job
    /// kept its worker past its timeout.
    private func watch() {
        while !stopping {
            _ = watchdogWake.wait(timeout: .now() + min(1, configuration.stallTimeout / 4))
            let now = SuspendingClock.now
            state.withLock { state in
                for (id, var running) in state.running where running.reason == nil
                    && now - running.lastAdvance > .seconds(configuration.stallTimeout) {
                    running.reason = .stalled
                    running.stalledAt = now
                    state.running[id] = running
                    running.token.cancel(immediately: true) // SIGKILL at once: a stalled child is not asked to tidy up
                }
            }
        }
    }

    /// The periodic chores: recovering expired leases (shared store), stray files, expired resumable uploads,
    /// retention.
    private func sweepPeriodically() {
        var lastSweep: SuspendingClock.Instant?
        var lastLeaseSweep: SuspendingClock.Instant?
        var lastStraySweep: SuspendingClock.Instant?
        var lastTusSweep: SuspendingClock.Instant?
        while !stopping {
            _ = sweeperWake.wait(timeout: .now() + min(1, configuration.pollInterval))
            // Intervals on a clock the wall clock's steps do not move (set back an hour, the sweeps of dead nodes'
            // leases waited that hour); the sweeps themselves are given the wall time, which rows and files carry.
            let now = SuspendingClock.now, wall = Date()
            if store.isShared {
                // On every node, not one at a time: a node that stops (paused, cut off) while it holds a sweep's
                // lock keeps it as long as its session lives, and every dead node's jobs would stay running. Row
                // locks keep two nodes from moving the same job.
                chore("leases", every: configuration.pollInterval, last: &lastLeaseSweep, now: now, exclusive: false,
                      failing: "recovering jobs whose lease ran out failed") { () throws(StoreError) in
                    published(try store.recoverExpiredLeases(maxAttempts: configuration.maxAttempts))
                }
                chore("strays", every: configuration.straySweepInterval, last: &lastStraySweep, now: now,
                      failing: "removing stray outputs failed") { () throws(StoreError) in
                    try removeStrayOutputs()
                    try removeStrayUploads(now: wall.timeIntervalSince1970)
                }
            }
            chore("tus", every: min(60, configuration.tusExpiryHours * 900), last: &lastTusSweep, now: now,
                  failing: "the resumable upload sweep failed") { () throws(StoreError) in
                let expired = TusUploads(directory: directory, expiryHours: configuration.tusExpiryHours)
                    .sweep(at: wall.timeIntervalSince1970) { stopping }
                if !expired.isEmpty { logger.info("expired resumable uploads deleted", ["count": .int(expired.count)]) }
            }
            if let hours = configuration.retentionHours {
                // One node at a time: two deleting the same rows and files would trip over each other.
                // As often as a quarter of the retention, at most every minute: every 60 s, `--retention-hours
                // 0.001` (3.6 s) kept jobs a minute.
                chore("retention", every: min(60, hours * 900), last: &lastSweep, now: now, failing: "the retention sweep failed") { () throws(StoreError) in
                    try sweep(olderThan: wall.timeIntervalSince1970 - hours * 3600)
                }
            }
        }
    }

    /// One of the sweeper's periodic chores: runs `body` when `interval` seconds have passed since `last`, on one
    /// node at a time (the store's `exclusively`) unless not `exclusive`; a failure is logged with `message`.
    private func chore(_ name: String, every interval: Double, last: inout SuspendingClock.Instant?, now: SuspendingClock.Instant,
                       exclusive: Bool = true, failing message: String, _ body: () throws(StoreError) -> Void) {
        if let last, now - last < .seconds(interval) { return }
        last = now
        do {
            if exclusive { _ = try store.exclusively(name, body) } else { try body() }
        } catch {
            logger.error(message, ["error": .string(error.description)])
        }
    }

    /// Renews the leases of the jobs running here every `heartbeatInterval`. A lease another worker holds now stops
    /// its job here without a word written; a cancel request stops it as a cancellation; a store that cannot be
    /// reached keeps the jobs running until their leases would have run out, then gives them up.
    private func heartbeat() {
        // Until the queue stops and its last job is gone: jobs finishing in a shutdown's grace still need their leases.
        while true {
            _ = heartbeatWake.wait(timeout: .now() + configuration.heartbeatInterval)
            if state.withLock({ $0.stopping && $0.running.isEmpty }) { break }
            // Ending jobs too: a failed job's folder is removed before its end is recorded, which for a long ladder
            // on slow shared storage can outlast the lease (a refused renewal of an ending job stops nothing).
            // Not an attempt the watchdog stopped that has not ended a stall timeout and a lease later (its thread
            // held in a call that does not return, a hard mount gone): renewed, its job stayed running here for
            // ever, which no other node takes over; its lease now runs out, and fencing refuses whatever it writes
            // if it comes back. Counted from the stop, not from its last progress: removing a failed job's files
            // advances nothing, and a slow removal is not stuck.
            let stuckFor = Duration.seconds(configuration.stallTimeout + configuration.leaseSeconds)
            let now = SuspendingClock.now
            let (leases, stuck) = state.withLock { state in
                var leases: [(Lease, ContinuousClock.Instant)] = [], stuck: [Lease] = []
                for (id, running) in state.running {
                    guard store.isShared, let stalledAt = running.stalledAt, now - stalledAt > stuckFor else {
                        leases.append((running.lease, running.renewedAt))
                        continue
                    }
                    if !running.leaseGivenUp {
                        state.running[id]?.leaseGivenUp = true
                        stuck.append(running.lease)
                    }
                }
                return (leases, stuck)
            }
            for lease in stuck {
                logger.error("a job's attempt stopped as stalled has not ended: its lease is no longer renewed, so that another node takes the job over",
                             ["job_id": .string(lease.jobID), "lease_token": .int(lease.token)])
            }
            for (lease, renewedAt) in leases {
                do throws(StoreError) {
                    switch try store.renew(lease, leaseSeconds: configuration.leaseSeconds) {
                    case .held(let cancelRequested):
                        ownEntry(lease.jobID, token: lease.token) { $0.renewedAt = .now }
                        if cancelRequested { _ = signalCancel(lease.jobID) }
                    case .lost:
                        stop(lease, .leaseLost, because: "its lease (token \(lease.token)) is another worker's now")
                        relay(lease.jobID)
                    }
                } catch {
                    logger.warning("renewing a job's lease failed", ["job_id": .string(lease.jobID), "error": .string(error.description)])
                    // Only a shared store gives the job to someone else; with a store of our own, the job keeps
                    // running and its end is recorded once the store answers again.
                    if store.isShared, ContinuousClock.now - renewedAt >= .seconds(configuration.leaseSeconds) {
                        stop(lease, .leaseExpired, because: "its lease ran out while the store could not be reached")
                    }
                }
            }
        }
    }

    /// Runs `body` on the entry of job `id`'s attempt with lease `token`, if it is still the one registered here (a
    /// later attempt here may have replaced it, see `process`); nil when it is not.
    @discardableResult
    private func ownEntry<T>(_ id: String, token: Int, _ body: (inout Running) -> T) -> T? {
        state.withLock { state in
            guard var running = state.running[id], running.lease.token == token else { return nil }
            let result = body(&running)
            state.running[id] = running
            return result
        }
    }

    /// Stops the run of `lease` here (not a later claim of the same job here) because it lost or may have lost the
    /// job: another worker has it, or will once the lease is out.
    private func stop(_ lease: Lease, _ reason: StopReason, because why: String) {
        let stopped = ownEntry(lease.jobID, token: lease.token) { running -> Bool in
            guard !running.ending, running.reason != .leaseLost else { return false }
            running.reason = reason
            running.token.cancel()
            return true
        } ?? false
        if stopped {
            logger.error("stopping a job this node no longer holds", ["job_id": .string(lease.jobID), "reason": .string(why)])
        }
    }

    /// Jobs retention reads at a time.
    static let retentionBatch = 500
    /// The longest a job waits, holding its worker, for an input URL's server that asked (`Retry-After`), seconds.
    static let longestRetryAfter = 60.0

    /// Deletes finished jobs that ended before `time` (seconds since 1970), with their outputs, and uploads no job
    /// uses any more that are older than `time`. Queued and running jobs are never touched. A row goes first and its
    /// file only once the row is gone: an upload a new job took meanwhile stays (the store refuses its deletion), and
    /// one item that fails is logged and passed over.
    public func sweep(olderThan time: Double) throws(StoreError) {
        try sweep(olderThan: time, batch: Self.retentionBatch)
    }

    func sweep(olderThan time: Double, batch size: Int) throws(StoreError) {
        let jobs = try deleteInBatches(of: size, read: { limit throws(StoreError) in try store.finishedJobs(before: time, limit: limit) }) { job in
            do throws(StoreError) {
                try store.deleteJob(id: job.id)
                if let path = job.outputRoot { removeFile(path, of: "job_id", job.id) }
                removeCheckpoints(of: job.id)
                return true
            } catch {
                logger.error("retention could not delete a job", ["job_id": .string(job.id), "error": .string(error.description)])
                return false
            }
        }
        let uploads = try deleteInBatches(of: size, read: { limit throws(StoreError) in try store.unusedUploads(before: time, limit: limit) }) { upload in
            do throws(StoreError) {
                try store.deleteUpload(id: upload.id)
                removeFile(upload.path, of: "upload_id", upload.id)
                return true
            } catch where error.isStillReferenced {
                return false // a job started using it after it was listed
            } catch {
                logger.error("retention could not delete an upload", ["upload_id": .string(upload.id), "error": .string(error.description)])
                return false
            }
        }
        if jobs + uploads > 0 { logger.info("retention deleted", ["jobs": .int(jobs), "uploads": .int(uploads)]) }
    }

    /// Reads `size` items at a time and deletes each (`delete` says whether it did), batch after batch while they come
    /// full (more than a batch since the last sweep) and a batch deletes something (one that deletes nothing would be
    /// read again as it was), until a stop; how many it deleted. All at once, a first sweep over 200,000 uploads held
    /// the store's connection for seconds (every request waiting) and a stop waited minutes for it; a stop now ends
    /// the sweep between batches, and the next start takes it up.
    private func deleteInBatches<Item>(of size: Int, read: (Int) throws(StoreError) -> [Item],
                                       delete: (Item) -> Bool) throws(StoreError) -> Int {
        var total = 0
        while !stopping {
            let batch = try read(size)
            var deleted = 0
            for item in batch where delete(item) { deleted += 1 }
            total += deleted
            if batch.count < size || deleted == 0 { break }
        }
        return total
    }

    /// Removes files in `outputs/` that are not the output of a succeeded job: partial files of a process that died,
    /// and outputs of jobs that will run again (on a shared store: only those of jobs that ended or are gone).
    private func removeStrayOutputs() throws(StoreError) {
        try removeStrayCheckpoints()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.outputs.path)) ?? []
        for name in names {
            let id = String(name.prefix { $0 != "." })
            let path = directory.outputs.appendingPathComponent(name).path
            let job = try store.output(of: id)
            // On a shared store, a queued or running job's folders are its workers' (a claim clears earlier ones).
            if store.isShared, let job, !job.state.isTerminal { continue }
            if job?.state != .succeeded || job?.outputRoot != path { removeFile(path, of: "job_id", id) }
        }
    }

    /// With a store of its own, at start: the partial uploads and fetched inputs a process that died left in
    /// `uploads/`, all of them (the data directory's lock makes this process the only one writing there). Before any
    /// worker starts: a worker's fetch is named like them, and the server's sweep, once it came after the workers,
    /// deleted a fetch under way, failing its job.
    private func removePartialUploads() {
        let removed = DataDirectory.removePartialUploads(in: directory.uploads, olderThan: 0)
        if removed > 0 { logger.info("removed partial uploads of a previous process", ["files": .int(removed)]) }
    }

    /// With a store of its own, at start: upload files no upload row points at. An upload's file is moved into place
    /// before its row is written, and its row deleted before its file: a process that died between the two left the
    /// file for good. Named `<id>` (an upload) or `<id>.<lease token>` (an input a job's attempt fetched). Not the
    /// bytes of a resumable upload whose completion died after moving them there: its description is still in
    /// `tus/`, and the completion is finished from them. A store that cannot tell (it fails for now) leaves the files
    /// alone: this is tidying, and the process starts all the same.
    private func removeUnrecordedUploads() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.uploads.path)) ?? []
        do throws(StoreError) {
            try removeUnrecorded(names.compactMap { name in
                DataDirectory.uploadID(ofFile: name).map { (directory.uploads.appendingPathComponent(name).path, $0) }
            })
        } catch {
            logger.error("removing upload files without a row failed", ["error": .string(error.description)])
        }
    }

    /// On shared storage, removes what nodes that died left in `uploads/` (a store of its own: all of them at start,
    /// `removePartialUploads` and `removeUnrecordedUploads`): files last written `DataDirectory.abandonedUploadAge` (an hour) ago or more,
    /// partial ones and inputs their upload does not point at: a later attempt's fetch, and a bare `<id>` (a first
    /// attempt's fetch whose recording failed, a node that died between an upload's file and its row), which was
    /// kept for good; not a resumable upload's.
    private func removeStrayUploads(now: Double) throws(StoreError) {
        let stale = directory.staleUploadFiles(olderThan: DataDirectory.abandonedUploadAge, now: now)
        for path in stale.partial { removeFile(path, of: "upload_id", URL(fileURLWithPath: path).lastPathComponent) }
        try removeUnrecorded(stale.unrecorded)
    }

    /// Removes the input `files` (of the uploads named) that no upload row points at, but a resumable upload's bare
    /// `<id>` (its completion is finished from its description in `tus/`). The rows are read 500 ids a query.
    private func removeUnrecorded(_ files: [(path: String, upload: String)]) throws(StoreError) {
        let tus = TusUploads(directory: directory, expiryHours: configuration.tusExpiryHours)
        let recorded = try store.uploadFileNames(ids: Array(Set(files.map(\.upload))))
        for file in files {
            let name = URL(fileURLWithPath: file.path).lastPathComponent
            if name == file.upload, FileManager.default.fileExists(atPath: tus.infoPath(file.upload)) { continue }
            // Looked at again, alone, before it goes: recorded since the batch was read (a fetch completing).
            if recorded[file.upload] == name { continue }
            if try isRecorded(name, upload: file.upload) { continue }
            removeFile(file.path, of: "upload_id", file.upload)
        }
    }

    /// Whether upload `id`'s row points at the file named `name` in `uploads/`.
    private func isRecorded(_ name: String, upload id: String) throws(StoreError) -> Bool {
        guard let recorded = try store.upload(id: id) else { return false }
        return URL(fileURLWithPath: recorded.path).lastPathComponent == name
    }

    /// Removes checkpoint folders of jobs that have ended or are gone (a queued or running job's are its next
    /// attempt's).
    private func removeStrayCheckpoints() throws(StoreError) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.checkpoints.path)) ?? []
        for id in Set(names.map { String($0.prefix { $0 != "." }) }) {
            if let job = try store.output(of: id), !job.state.isTerminal { continue }
            removeCheckpoints(of: id)
        }
    }

    /// Removes every checkpoint folder of job `id`.
    func removeCheckpoints(of id: String) {
        for folder in directory.checkpointFolders(of: id) { removeFile(folder.path, of: "job_id", id) }
    }

    /// Removes a file or an output folder the queue owns: one already gone is fine, any other failure is logged with whose it is
    /// (`field` is `job_id` or `upload_id`).
    private func removeFile(_ path: String, of field: String, _ id: String) {
        guard let problem = OutputRemoval.remove(path) else { return }
        logger.error("removing a file failed", [field: .string(id), "path": .string(path), "error": .string(problem)])
    }
}
