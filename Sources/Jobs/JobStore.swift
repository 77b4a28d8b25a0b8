import Foundation
import Pipeline

/// Where jobs and uploads are kept: a SQLite file for one machine (`SQLiteJobStore`), or a PostgreSQL database that
/// API and worker nodes share (`PostgresJobStore`). Both enforce the job state machine in the database itself, both
/// run the same conformance tests.
///
/// A claim is a lease: the worker's name, a fencing token (one more on every claim of the job) and an expiry the
/// worker pushes forward with `renew`. Every write a worker makes about its job carries the lease and is refused with
/// `lease_lost` once the job was given to someone else, so a worker that was paused or cut off can never overwrite
/// the result of the one that took its job over.
///
/// Methods block (database I/O): call them from worker threads, never from an event loop or the cooperative pool.
public protocol JobStore: AnyObject, Sendable {
    /// Whether other processes use the store at once (worker and API nodes of a cluster): then jobs found running at
    /// start belong to someone else, and only expired leases are recovered.
    var isShared: Bool { get }

    /// A number that changes whenever this process may see something new in the store: read it before reading rows
    /// you cache; while it stays the same, those rows are unchanged. A shared store, which other nodes write, changes
    /// it on every read.
    var generation: Int64 { get }

    // MARK: Uploads

    /// Records an upload whose file is already in place.
    func insert(_ upload: Upload) throws(StoreError)
    func upload(id: String) throws(StoreError) -> Upload?
    /// The name of the file in `uploads/` that the row of each of `ids` (those that have one) points at: for the
    /// stray sweep, a few queries for thousands of files rather than one each.
    func uploadFileNames(ids: [String]) throws(StoreError) -> [String: String]
    /// Records the fetched bytes of an input given by URL (size, hash, path, tracks) on its waiting row.
    func completeFetch(_ upload: Upload) throws(StoreError)
    /// Deletes an upload's row; refused (`constraint`, `isStillReferenced`) while a job still uses it.
    func deleteUpload(id: String) throws(StoreError)
    /// Uploads older than `time` (seconds since 1970) that no job refers to (as its input or its watermark).
    func unusedUploads(before time: Double, limit: Int) throws(StoreError) -> [Upload]

    // MARK: Jobs for the API

    /// Queues a new job on an existing upload (`upload_not_found`, `watermark_not_found` otherwise), with the id
    /// given (a new one for nil; `job_exists` when a job has it); its state changes go to `webhooks`.
    func createJob(id: String?, input: String, settings: TranscodeSettings, priority: Int, webhooks: JobWebhooks) throws(StoreError) -> Job
    func job(id: String) throws(StoreError) -> Job?
    /// When the job last changed (seconds since 1970), or nil if there is no such job: a cheap check for caches.
    func lastUpdate(of id: String) throws(StoreError) -> Double?
    /// A page of jobs, newest first, optionally in one state; `cursor` is the `next` of the previous page.
    func jobs(state: JobState?, limit: Int, cursor: String?) throws(StoreError) -> (jobs: [Job], next: String?)
    /// Number of jobs in each state.
    func counts() throws(StoreError) -> [JobState: Int]
    /// Returns once the store answers a query that reads no rows (a readiness probe: `counts` reads every job).
    func ping() throws(StoreError)
    /// The store's identity, made once when its schema was: the data directory it works on is marked with it.
    func identity() throws(StoreError) -> String
    /// queued → canceled, only if the job is queued now (`invalid_transition` otherwise).
    func cancelQueued(id: String) throws(StoreError) -> Job
    /// Asks whichever worker runs the job to stop it (it records the cancellation itself); false when the job is not
    /// running.
    func requestCancel(id: String) throws(StoreError) -> Bool
    /// Deletes a job's row (its files are the caller's to remove) and its finished webhook deliveries; pending ones
    /// are still sent (they carry the job as it was) and go once they end.
    func deleteJob(id: String) throws(StoreError)
    /// Finished jobs (succeeded, failed, canceled) that ended before `time` (seconds since 1970), oldest first; not
    /// those with webhook deliveries still pending (retention waits for them).
    func finishedJobs(before time: Double, limit: Int) throws(StoreError) -> [JobOutput]
    /// Where a job's output lies (nil when there is no such job).
    func output(of id: String) throws(StoreError) -> JobOutput?

    // MARK: Jobs for workers

    /// Atomically takes the next queued job (highest priority, then oldest) for `worker`, leased for `leaseSeconds`,
    /// but none of the jobs `skipping` names.
    func claimNext(worker: String, leaseSeconds: Double, skipping: [String]) throws(StoreError) -> Job?
    /// The running jobs whose lease names `worker` and has not run out: a claim whose answer was lost (the link cut
    /// after it committed) is found here (one whose lease ran out meanwhile is the lease sweep's).
    func runningJobs(leasedTo worker: String) throws(StoreError) -> [Job]
    /// Pushes the lease's expiry `leaseSeconds` from now: `.lost` once the job is no longer this lease's.
    func renew(_ lease: Lease, leaseSeconds: Double) throws(StoreError) -> LeaseStatus
    /// Saves a running job's progress (seconds of output written, expected seconds).
    func saveProgress(_ lease: Lease, time: Double, duration: Double) throws(StoreError)
    /// running → succeeded, with the output's place, size and tracks, and the frames and seconds it took.
    func markSucceeded(_ lease: Lease, outputPath: String, size: Int, tracks: [Track], files: [OutputFile]?,
                       duration: Double, framesEncoded: Int, seconds: Double) throws(StoreError) -> Job
    /// running → failed, with a stable code and a message for people.
    func markFailed(_ lease: Lease, code: String, message: String) throws(StoreError) -> Job
    /// running → canceled: the worker stopped the job because it was asked to.
    func markCanceled(_ lease: Lease) throws(StoreError) -> Job
    /// running → queued with one more attempt: the process running it crashed, and it runs again. A shared store
    /// cancels a job whose cancel was requested instead (the job returned says so): the node that asked cannot
    /// know whether the holder heard it. One process alone hears every request itself.
    func retry(_ lease: Lease) throws(StoreError) -> Job
    /// running → queued without counting an attempt: the worker is shutting down and another start runs it (or
    /// canceled, as `retry`).
    func requeue(_ lease: Lease) throws(StoreError) -> Job

    // MARK: Webhooks (the outbox: rows written with the state changes they announce)

    /// Claims due deliveries (each the earliest pending one of its job and URL) for `claimSeconds`, none to a URL in
    /// `skippingURLs` (ones this node already has as many attempts under way to as it allows one URL).
    func claimDeliveries(limit: Int, claimSeconds: Double, skippingURLs: Set<String>) throws(StoreError) -> [WebhookDelivery]
    /// Records how a claimed attempt went (nothing, if its claim was taken over, or the delivery sent again,
    /// meanwhile); `payload` is the body sent, kept for the retries (nil: none was made, the next attempt makes it).
    func finishDelivery(_ delivery: WebhookDelivery, _ outcome: DeliveryOutcome, payload: Data?) throws(StoreError)
    /// A job's deliveries, oldest first.
    func deliveries(jobID: String) throws(StoreError) -> [WebhookDelivery]
    /// Makes a delivery pending again, due now, its retry schedule starting over; nil when the job has none with that
    /// id, `delivery_in_flight` while an attempt of it is under way.
    func redeliver(jobID: String, deliveryID: String) throws(StoreError) -> WebhookDelivery?
    /// Deliveries in each state.
    func deliveryCounts() throws(StoreError) -> [WebhookDelivery.State: Int]
    /// In how many seconds the next pending delivery is due, by the store's clock (0 or less: now); nil when none is
    /// pending.
    func secondsUntilNextDelivery() throws(StoreError) -> Double?

    // MARK: Recovery and sweeps

    /// Every job left running goes back to the queue with one more attempt, or fails with `worker_crashed` once
    /// `maxAttempts` attempts have died: for a store no other process uses, at start.
    func recoverOrphans(maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String])
    /// The same for running jobs whose lease expired (their worker died, or stopped renewing).
    func recoverExpiredLeases(maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String])
    /// Runs `body` unless another process is running the sweep called `name` now (then returns false): one node at a
    /// time does the cluster-wide chores.
    func exclusively(_ name: String, _ body: () throws(StoreError) -> Void) throws(StoreError) -> Bool
    /// Calls `handler` (on a thread of the store's) with what other processes changed: jobs queued, jobs changed,
    /// cancellations asked for. A store no other process uses never calls it.
    func watch(_ handler: @escaping @Sendable (StoreNotice) -> Void)
    /// Stops calling the handler given to `watch`.
    func stopWatching()
    /// Stops watching and closes what the store holds open.
    func close()
}

extension JobStore {
    /// Due deliveries to any URL.
    public func claimDeliveries(limit: Int, claimSeconds: Double) throws(StoreError) -> [WebhookDelivery] {
        try claimDeliveries(limit: limit, claimSeconds: claimSeconds, skippingURLs: [])
    }

    /// The next queued job, whichever it is.
    public func claimNext(worker: String, leaseSeconds: Double) throws(StoreError) -> Job? {
        try claimNext(worker: worker, leaseSeconds: leaseSeconds, skipping: [])
    }

    public func createJob(input: String, settings: TranscodeSettings, priority: Int = 0) throws(StoreError) -> Job {
        try createJob(id: nil, input: input, settings: settings, priority: priority, webhooks: JobWebhooks())
    }

    public func createJob(input: String, settings: TranscodeSettings, priority: Int, webhooks: JobWebhooks) throws(StoreError) -> Job {
        try createJob(id: nil, input: input, settings: settings, priority: priority, webhooks: webhooks)
    }

    public func jobs(state: JobState? = nil, limit: Int = 50, cursor: String? = nil) throws(StoreError) -> (jobs: [Job], next: String?) {
        try jobs(state: state, limit: limit, cursor: cursor)
    }

    public func finishedJobs(before time: Double) throws(StoreError) -> [JobOutput] { try finishedJobs(before: time, limit: 500) }
}

/// A worker's hold on a running job: refused writes (`lease_lost`) tell it the job was given to someone else.
public struct Lease: Sendable, Equatable, CustomStringConvertible {
    public let jobID: String
    /// Who holds it (`host/pid-instance/worker`).
    public let worker: String
    /// The fencing number: one more on every claim of the job, so an older holder's writes can be told apart.
    public let token: Int

    public init(jobID: String, worker: String, token: Int) {
        self.jobID = jobID
        self.worker = worker
        self.token = token
    }

    public var description: String { "\(worker) (token \(token))" }
}

/// What renewing a lease found.
public enum LeaseStatus: Sendable, Equatable {
    /// Still this worker's; `cancelRequested` when someone asked for the job to stop.
    case held(cancelRequested: Bool)
    /// The job is no longer this lease's (taken over, or ended by someone else).
    case lost
}

/// A change another process made to the store, announced by the database.
public enum StoreNotice: Sendable, Equatable {
    /// A job was queued (new, or back in the queue).
    case queued(String)
    /// A job was made or changed state.
    case changed(String)
    /// A running job saved its progress (nothing else changed).
    case progressed(String)
    /// Someone asked for a running job to stop.
    case cancel(String)
    /// The listener is listening, for the first time or again after the link was lost: notices sent before (a job
    /// queued while a node was starting, or while the link was down) were missed, so look at the store.
    case listening
    /// The listener cannot listen (why): notices are missed until it can (`listening`). Said at its first failure,
    /// then once a minute while it goes on failing.
    case unheard(String)
}
