import Foundation
import Pipeline
import Locks
import Synchronization

/// Jobs and uploads in one SQLite file, for one process: the data directory's lock keeps others out. The state
/// machine is enforced by the database itself (a trigger), and a claim is a single `UPDATE … RETURNING`, so no job
/// runs twice at once even with several connections.
///
/// Thread-safe: the connection is behind a mutex, and every method runs one short statement or transaction.
/// Methods block (SQLite I/O); call them from worker threads, not from Swift's cooperative pool.
public final class SQLiteJobStore: JobStore, RowRunning {
    private let database: LockedValue<Database>
    private let writes = Atomic<Int64>(0)
    private let rows: JobRows
    /// The database file.
    public let path: String

    /// Opens the store at `path`, creating and migrating the schema as needed; file paths inside `root` (the data
    /// directory; by default the database's folder) are stored relative to it.
    public init(path: String, root: String? = nil) throws(StoreError) {
        let connection = try Database(path: path)
        try Migrations.migrate(connection)
        self.path = path
        rows = JobRows(root: root ?? URL(fileURLWithPath: path).deletingLastPathComponent().standardizedFileURL.path)
        // At every open, not only after the migration that asks for it: the migration commits first, and a process
        // that died before (or in) this left absolute paths for good, which a data directory moved later no longer
        // matched (its succeeded outputs were then swept as strays). Paths already relative match nothing.
        try Self.relativize(connection, root: rows.root)
        database = LockedValue(connection)
    }

    /// Paths written by versions that stored them absolute, made relative to the data directory.
    private static func relativize(_ database: Database, root: String) throws(StoreError) {
        let prefix = root + "/"
        let length = Int64(prefix.utf8.count)
        try database.transaction { () throws(StoreError) in
            try database.query("UPDATE uploads SET path = substr(path, ? + 1) WHERE substr(path, 1, ?) = ?",
                               [.integer(length), .integer(length), .text(prefix)])
            try database.query("UPDATE jobs SET output_path = substr(output_path, ? + 1) WHERE substr(output_path, 1, ?) = ?",
                               [.integer(length), .integer(length), .text(prefix)])
        }
    }

    @discardableResult
    private func withDatabase<T: Sendable>(_ body: (Database) throws(StoreError) -> T) throws(StoreError) -> T {
        try database.withLock { (database: inout Database) throws(StoreError) -> T in
            defer { writes.store(database.totalChanges, ordering: .releasing) }
            return try body(database)
        }
    }

    public var isShared: Bool { false }

    /// Counts this store's own writes, which are all the writes there are: the data directory lock keeps other
    /// processes out, and the server opens one store.
    public var generation: Int64 { writes.load(ordering: .acquiring) }

    static func now() -> Double { Date().timeIntervalSince1970 }
    /// The current time as an SQL expression: seconds since 1970, SQLite's clock.
    static let sqlNow = "((julianday('now') - 2440587.5) * 86400.0)"

    // Queries over tables that grow, whose plans a test holds to their indexes.

    /// The job list, newest first, after `filter` (`WHERE state = ?`, a cursor, or nothing).
    static func jobListSQL(filter: String) -> String {
        "SELECT * FROM jobs \(filter) ORDER BY created_at DESC, id DESC LIMIT ?"
    }

    /// Finished jobs, oldest finish first, without pending webhook deliveries. `+state`: walk the finish times in
    /// order (jobs_finished) and stop at the limit, rather than take every finished job by state and sort them all,
    /// which SQLite's planner prefers otherwise; and look a job's deliveries up by job, not every pending one by
    /// state for each job.
    static let finishedJobsSQL = """
        SELECT \(JobOutput.columns) FROM jobs WHERE +state IN ('succeeded', 'failed', 'canceled') AND finished_at < ?
            AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w WHERE w.job_id = jobs.id AND +w.state = 'pending')
        ORDER BY finished_at LIMIT ?
        """

    /// Uploads made before a time that no job uses, oldest first, a batch at a time.
    static let unusedUploadsSQL = """
        SELECT * FROM uploads u WHERE created_at < ?
        AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.input_upload = u.id)
        AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.watermark_upload = u.id)
        ORDER BY created_at LIMIT ?
        """

    /// Statements the connection holds prepared.
    var cachedStatements: Int { database.withLock { $0.cachedStatements } }

    // MARK: Uploads

    public func insert(_ upload: Upload) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.query(
                "INSERT INTO uploads (id, filename, content_type, size, sha256, path, tracks, created_at, source_url) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [.text(upload.id), .text(upload.filename), upload.contentType.sqlValue, .integer(Int64(upload.size)),
                 .text(upload.sha256), .text(rows.stored(upload.path)), .text(JobRows.json(upload.tracks)), .real(upload.createdAt),
                 upload.sourceURL.map(SQLValue.text) ?? .null])
        }
    }

    public func upload(id: String) throws(StoreError) -> Upload? {
        // No id holds a NUL: none is found (the value would be refused).
        guard !id.utf8.contains(0) else { return nil }
        return try withDatabase { database throws(StoreError) in
            try database.query("SELECT * FROM uploads WHERE id = ?", [.text(id)]).first.map(rows.upload)
        }
    }

    public func uploadFileNames(ids: [String]) throws(StoreError) -> [String: String] {
        try JobRows.uploadFileNames(ids: ids) { sql, arguments throws(StoreError) in
            try withDatabase { database throws(StoreError) in try database.query(sql, arguments) }
        }
    }

    public func deleteUpload(id: String) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.query("DELETE FROM uploads WHERE id = ?", [.text(id)])
        }
    }

    public func unusedUploads(before time: Double, limit: Int) throws(StoreError) -> [Upload] {
        try withDatabase { database throws(StoreError) in
            try database.query(Self.unusedUploadsSQL, [.real(time), .integer(Int64(limit))]).map(rows.upload)
        }
    }

    public func completeFetch(_ upload: Upload) throws(StoreError) {
        let (sql, arguments) = rows.completedFetch(upload)
        guard try !self.rows(sql, arguments).isEmpty else {
            throw StoreError(code: "not_found", message: "Upload \(upload.id) no longer waits for its bytes.")
        }
    }

    // MARK: Jobs for the API

    public func createJob(id: String?, input: String, settings: TranscodeSettings, priority: Int, webhooks: JobWebhooks) throws(StoreError) -> Job {
        let now = Self.now()
        var job = Job(id: id ?? UUID().uuidString.lowercased(), state: .queued, settings: settings, inputUpload: input,
                      progressTime: 0, progressDuration: 0, attempts: 1, priority: priority, createdAt: now, updatedAt: now)
        job.webhook = webhooks.target
        let hooks = JobRows.webhookColumns(webhooks)
        try withDatabase { database throws(StoreError) in
            guard try !database.query("SELECT 1 FROM uploads WHERE id = ?", [.text(input)]).isEmpty else {
                throw StoreError(code: "upload_not_found", message: "No upload has the id \(input).")
            }
            let watermark = settings.filters?.video?.watermark?.upload
            do throws(StoreError) {
                try database.query("""
                    INSERT INTO jobs (id, state, settings, input_upload, watermark_upload, attempts, priority, created_at, updated_at,
                        \(hooks.map(\.0).joined(separator: ", ")))
                    VALUES (?, 'queued', ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)
                    """,
                    [.text(job.id), .text(JobRows.json(settings)), .text(input), watermark.map(SQLValue.text) ?? .null,
                     .integer(Int64(priority)), .real(now), .real(now)] + hooks.map(\.1))
            } catch where error.isStillReferenced && watermark != nil {
                throw StoreError(code: "watermark_not_found", message: "No upload has the id \(watermark ?? "").",
                                 resultCode: error.resultCode)
            } catch where error.isDuplicate {
                throw StoreError(code: "job_exists", message: "A job has the id \(job.id) already.", resultCode: error.resultCode)
            }
        }
        return job
    }

    public func job(id: String) throws(StoreError) -> Job? {
        guard !id.utf8.contains(0) else { return nil } // as `upload(id:)`
        return try withDatabase { database throws(StoreError) in
            try database.query("SELECT * FROM jobs WHERE id = ?", [.text(id)]).first.map(rows.job)
        }
    }

    public func lastUpdate(of id: String) throws(StoreError) -> Double? {
        guard !id.utf8.contains(0) else { return nil } // as `upload(id:)`
        return try withDatabase { database throws(StoreError) in
            try database.query("SELECT updated_at FROM jobs WHERE id = ?", [.text(id)]).first?["updated_at"].double
        }
    }

    public func jobs(state: JobState?, limit: Int, cursor: String?) throws(StoreError) -> (jobs: [Job], next: String?) {
        var conditions: [String] = []
        var arguments: [SQLValue] = []
        if let state {
            conditions.append("state = ?")
            arguments.append(.text(state.rawValue))
        }
        if let cursor {
            let after = try JobRows.afterCursor(cursor)
            conditions.append(after.condition)
            arguments += after.arguments
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let found = try withDatabase { database throws(StoreError) in
            try database.query(Self.jobListSQL(filter: filter), arguments + [.integer(Int64(limit + 1))])
        }
        let jobs = found.prefix(limit).map(rows.job)
        let next = found.count > limit ? jobs.last.map { JobRows.encodeCursor(time: $0.createdAt, id: $0.id) } : nil
        return (Array(jobs), next)
    }

    public func ping() throws(StoreError) {
        _ = try rows("SELECT 1", [])
    }

    public func identity() throws(StoreError) -> String {
        guard let id = try rows("SELECT id FROM store_identity", []).first?["id"].string else {
            throw StoreError(code: "storage_error", message: "The store has no identity row.")
        }
        return id
    }

    public func counts() throws(StoreError) -> [JobState: Int] {
        let found = try withDatabase { database throws(StoreError) in
            try database.query("SELECT state, count(*) AS n FROM jobs GROUP BY state")
        }
        var counts: [JobState: Int] = [:]
        for row in found { if let state = row["state"].string.flatMap(JobState.init) { counts[state] = row["n"].int ?? 0 } }
        return counts
    }

    public func cancelQueued(id: String) throws(StoreError) -> Job {
        try move(id, to: .canceled, from: .queued, set: JobRows.canceled)
    }

    public func requestCancel(id: String) throws(StoreError) -> Bool {
        try withDatabase { database throws(StoreError) in
            !(try database.query("UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND state = 'running' RETURNING id",
                                 [.text(id)]).isEmpty)
        }
    }

    public func deleteJob(id: String) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.transaction { () throws(StoreError) in
                // Pending deliveries stay until sent (their rows carry the job); the rest go with the job.
                try database.query("DELETE FROM webhook_deliveries WHERE job_id = ? AND state <> 'pending'", [.text(id)])
                try database.query("DELETE FROM jobs WHERE id = ?", [.text(id)])
            }
        }
    }

    public func finishedJobs(before time: Double, limit: Int) throws(StoreError) -> [JobOutput] {
        try withDatabase { database throws(StoreError) in
            try database.query(Self.finishedJobsSQL, [.real(time), .integer(Int64(limit))]).map(rows.output)
        }
    }

    public func output(of id: String) throws(StoreError) -> JobOutput? {
        try withDatabase { database throws(StoreError) in
            try database.query("SELECT \(JobOutput.columns) FROM jobs WHERE id = ?", [.text(id)]).first.map(rows.output)
        }
    }

    // MARK: Jobs for workers

    public func claimNext(worker: String, leaseSeconds: Double, skipping: [String]) throws(StoreError) -> Job? {
        let now = Self.now()
        return try withDatabase { database throws(StoreError) in
            try database.query("""
                UPDATE jobs SET state = 'running', lease = ?, lease_token = lease_token + 1, lease_expires_at = ?,
                    cancel_requested = 0, started_at = ?, updated_at = ?, progress_time = 0
                WHERE id = (SELECT id FROM jobs WHERE state = 'queued'\(JobRows.skipping(skipping.count))
                            ORDER BY priority DESC, created_at, id LIMIT 1)
                RETURNING *
                """, [.text(worker), .real(now + leaseSeconds), .real(now), .real(now)] + skipping.map(SQLValue.text))
                .first.map(rows.job)
        }
    }

    public func runningJobs(leasedTo worker: String) throws(StoreError) -> [Job] {
        try withDatabase { database throws(StoreError) in
            try database.query("SELECT * FROM jobs WHERE state = 'running' AND lease = ? AND lease_expires_at > ? ORDER BY started_at",
                               [.text(worker), .real(Self.now())]).map(rows.job)
        }
    }

    public func renew(_ lease: Lease, leaseSeconds: Double) throws(StoreError) -> LeaseStatus {
        try withDatabase { database throws(StoreError) -> LeaseStatus in
            let found = try database.query("""
                UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND state = 'running' AND lease_token = ?
                RETURNING cancel_requested
                """, [.real(Self.now() + leaseSeconds), .text(lease.jobID), .integer(Int64(lease.token))]).first
            guard let found else { return .lost }
            return .held(cancelRequested: found["cancel_requested"].int == 1)
        }
    }

    public func saveProgress(_ lease: Lease, time: Double, duration: Double) throws(StoreError) {
        let changed = try withDatabase { database throws(StoreError) in
            try database.query("""
                UPDATE jobs SET progress_time = ?, progress_duration = ?, updated_at = ?
                WHERE id = ? AND state = 'running' AND lease_token = ? RETURNING id
                """, [.real(time), .real(duration), .real(Self.now()), .text(lease.jobID), .integer(Int64(lease.token))])
        }
        if changed.isEmpty { throw JobRows.leaseLost(lease, current: try job(id: lease.jobID)) }
    }

    public func markSucceeded(_ lease: Lease, outputPath: String, size: Int, tracks: [Track], files: [OutputFile]?,
                              duration: Double, framesEncoded: Int, seconds: Double) throws(StoreError) -> Job {
        try move(lease.jobID, to: .succeeded, lease: lease,
                 set: rows.succeeded(outputPath: outputPath, size: size, tracks: tracks, files: files, duration: duration,
                                     framesEncoded: framesEncoded, seconds: seconds))
    }

    public func markFailed(_ lease: Lease, code: String, message: String) throws(StoreError) -> Job {
        try move(lease.jobID, to: .failed, lease: lease, set: JobRows.failed(code: code, message: message))
    }

    public func markCanceled(_ lease: Lease) throws(StoreError) -> Job {
        try move(lease.jobID, to: .canceled, lease: lease, set: JobRows.canceled)
    }

    public func retry(_ lease: Lease) throws(StoreError) -> Job {
        try move(lease.jobID, to: .queued, lease: lease, set: JobRows.requeued, also: ["attempts = attempts + 1"])
    }

    public func requeue(_ lease: Lease) throws(StoreError) -> Job {
        try move(lease.jobID, to: .queued, lease: lease, set: JobRows.requeued)
    }

    /// Moves a job to `state` if the state machine allows it (with `expected`, only from that state; with `lease`,
    /// only while that lease holds the job), setting `columns` too, and the assignments `also` (SQL over the row).
    @discardableResult
    func move(_ id: String, to state: JobState, from expected: JobState? = nil, lease: Lease? = nil,
              set columns: [(String, SQLValue)] = [], also: [String] = []) throws(StoreError) -> Job {
        let now = Self.now()
        var assignments = ["state = ?", "updated_at = ?"]
        var arguments: [SQLValue] = [.text(state.rawValue), .real(now)]
        if state.isTerminal {
            assignments.append("finished_at = ?")
            arguments.append(.real(now))
        }
        for (column, value) in columns {
            assignments.append("\(column) = ?")
            arguments.append(value)
        }
        assignments += also
        var filter = "id = ?"
        arguments.append(.text(id))
        if let expected {
            filter += " AND state = ?"
            arguments.append(.text(expected.rawValue))
        }
        if let lease {
            filter += " AND state = 'running' AND lease_token = ?"
            arguments.append(.integer(Int64(lease.token)))
        }
        let row = try withDatabase { database throws(StoreError) -> Row? in
            do throws(StoreError) {
                if let row = try database.query("UPDATE jobs SET \(assignments.joined(separator: ", ")) WHERE \(filter) RETURNING *",
                                                arguments).first {
                    return row
                }
                guard let current = try database.query("SELECT * FROM jobs WHERE id = ?", [.text(id)]).first else { return nil }
                if let lease {
                    // Already there under this lease: a write tried again after its answer was lost.
                    let job = rows.job(current)
                    if job.state == state && job.leaseToken == lease.token { return current }
                    throw JobRows.leaseLost(lease, current: job)
                }
                throw StoreError(code: "invalid_transition",
                                 message: "The job is \(current["state"].string ?? "?"), not \(expected?.rawValue ?? "?").")
            } catch where error.isConstraint && error.message.contains(Migrations.invalidTransition) {
                let current = try database.query("SELECT state FROM jobs WHERE id = ?", [.text(id)]).first?["state"].string ?? "?"
                throw StoreError(code: "invalid_transition", message: "A \(current) job cannot become \(state.rawValue).",
                                 resultCode: error.resultCode)
            }
        }
        guard let row else { throw StoreError(code: "not_found", message: "No job has the id \(id).") }
        return rows.job(row)
    }

    // MARK: Webhooks

    var webhookRows: WebhookRows<SQLiteJobStore> {
        // SQLite's own clock in seconds since 1970 (to the millisecond), not this process's time written into the
        // SQL: a statement's text must stay the same from one call to the next, or each call prepares (and caches)
        // a new one; the senders' claims every 2 s grew the cache without end.
        WebhookRows(store: self, jobRows: rows, now: { Self.sqlNow }, skipLocked: "", unindexed: "+")
    }

    public func claimDeliveries(limit: Int, claimSeconds: Double, skippingURLs: Set<String>) throws(StoreError) -> [WebhookDelivery] {
        try webhookRows.claim(limit: limit, claimSeconds: claimSeconds, skippingURLs: skippingURLs)
    }

    public func finishDelivery(_ delivery: WebhookDelivery, _ outcome: DeliveryOutcome, payload: Data?) throws(StoreError) {
        try webhookRows.finish(delivery, outcome, payload: payload)
    }

    public func deliveries(jobID: String) throws(StoreError) -> [WebhookDelivery] { try webhookRows.deliveries(of: jobID) }

    public func redeliver(jobID: String, deliveryID: String) throws(StoreError) -> WebhookDelivery? {
        try webhookRows.redeliver(jobID: jobID, id: deliveryID)
    }

    public func deliveryCounts() throws(StoreError) -> [WebhookDelivery.State: Int] { try webhookRows.counts() }

    public func secondsUntilNextDelivery() throws(StoreError) -> Double? { try webhookRows.secondsUntilDue() }

    func rows(_ sql: String, _ arguments: [SQLValue]) throws(StoreError) -> [Row] {
        try withDatabase { database throws(StoreError) in try database.query(sql, arguments) }
    }

    // MARK: Recovery and sweeps

    public func recoverOrphans(maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String]) {
        try recover(condition: "state = 'running'", [], maxAttempts: maxAttempts)
    }

    public func recoverExpiredLeases(maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String]) {
        try recover(condition: "state = 'running' AND lease_expires_at < ?", [.real(Self.now())], maxAttempts: maxAttempts)
    }

    private func recover(condition: String, _ arguments: [SQLValue], maxAttempts: Int) throws(StoreError)
        -> (requeued: [String], failed: [String]) {
        let now = Self.now()
        return try withDatabase { database throws(StoreError) in
            try database.transaction { () throws(StoreError) -> ([String], [String]) in
                // A job whose cancel was asked for (the API answered 202) ends canceled, not run again nor failed: the
                // process that would have recorded it is gone. Among the requeued, as a shared store's trigger has it.
                let canceled = try database.query("""
                    UPDATE jobs SET state = 'canceled', \(JobRows.canceled.map { "\($0.0) = ?" }.joined(separator: ", ")),
                        finished_at = ?, updated_at = ?
                    WHERE \(condition) AND cancel_requested = 1 RETURNING id
                    """, JobRows.canceled.map(\.1) + [.real(now), .real(now)] + arguments).compactMap { $0["id"].string }
                let failed = try database.query("""
                    UPDATE jobs SET state = 'failed', error_code = 'worker_crashed',
                        error_message = 'The process running this job stopped unexpectedly ' || attempts || ' times.',
                        lease = NULL, finished_at = ?, updated_at = ?
                    WHERE \(condition) AND cancel_requested = 0 AND attempts >= ? RETURNING id
                    """, [.real(now), .real(now)] + arguments + [.integer(Int64(maxAttempts))]).compactMap { $0["id"].string }
                let requeued = try database.query("""
                    UPDATE jobs SET state = 'queued', attempts = attempts + 1, lease = NULL, started_at = NULL,
                        progress_time = 0, updated_at = ?
                    WHERE \(condition) AND cancel_requested = 0 AND attempts < ? RETURNING id
                    """, [.real(now)] + arguments + [.integer(Int64(maxAttempts))]).compactMap { $0["id"].string }
                return (canceled + requeued, failed)
            }
        }
    }

    /// One process uses the file: nobody else can be sweeping.
    public func exclusively(_ name: String, _ body: () throws(StoreError) -> Void) throws(StoreError) -> Bool {
        try body()
        return true
    }

    /// Nobody else writes the file: nothing to watch.
    public func watch(_ handler: @escaping @Sendable (StoreNotice) -> Void) {}

    public func stopWatching() {}

    public func close() {}

    /// `PRAGMA integrity_check`: "ok" when the file is sound.
    public func integrityCheck() throws(StoreError) -> String {
        try withDatabase { database throws(StoreError) in
            try database.query("PRAGMA integrity_check").map { $0["integrity_check"].string ?? "" }.joined(separator: "\n")
        }
    }
}
