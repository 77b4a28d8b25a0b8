import Foundation
import Locks
import Pipeline
import Synchronization
import Glibc

/// Jobs and uploads in a PostgreSQL database shared by API and worker nodes. The state machine is enforced by a
/// trigger as in SQLite; claims are `FOR UPDATE SKIP LOCKED` in one short statement; times that leases compare
/// come from the database's clock, so nodes with skewed clocks still agree on who holds what. Changes are
/// announced with NOTIFY (see `PostgresMigrations`) and heard by `watch`.
///
/// Thread-safe: a small pool of connections, each used by one thread at a time; a lost connection is made again
/// with backoff, and meanwhile calls fail with `store_unavailable`. Methods block: call them from worker threads.
public final class PostgresJobStore: JobStore, RowRunning {
    private let pool: PostgresPool
    private let rows: JobRows
    private let reads = Atomic<Int64>(0)
    private let listener = LockedValue<PostgresListener?>(nil)
    /// Where the database is, without the password.
    public let displayURI: String

    /// The database's clock, in seconds since 1970.
    private static let now = "extract(epoch from clock_timestamp())::double precision"

    /// Connects to `uri` (a libpq URI), migrating the schema if needed; file paths inside `root` (the data
    /// directory) are stored relative to it. `connections` is the size of the pool.
    public init(uri: String, root: String, connections: Int = 4) throws(StoreError) {
        let migrated = LockedValue(false)
        pool = PostgresPool(uri: uri, size: connections) { connection throws(StoreError) in
            guard !migrated.withLock({ $0 }) else { return }
            try PostgresMigrations.migrate(connection)
            migrated.withLock { $0 = true }
        }
        rows = JobRows(root: root)
        displayURI = pool.displayURI
        try pool.with(slot: 0) { _ throws(StoreError) in } // connect (and migrate) now: a wrong URI stops start-up
    }

    public var isShared: Bool { true }

    /// Other nodes write the database: nothing read may be assumed current, so every read is a new generation.
    public var generation: Int64 { reads.wrappingAdd(1, ordering: .relaxed).newValue }

    /// Runs one statement written with `?` placeholders (numbered `$1`, `$2`, ... here).
    @discardableResult
    private func query(_ sql: String, _ arguments: [SQLValue] = []) throws(StoreError) -> [Row] {
        let numbered = Self.numbered(sql)
        return try pool.with { connection throws(StoreError) in try connection.query(numbered, arguments) }
    }

    private static func numbered(_ sql: String) -> String {
        var result = ""
        var index = 0
        for character in sql {
            if character == "?" {
                index += 1
                result += "$\(index)"
            } else {
                result.append(character)
            }
        }
        return result
    }

    // MARK: Uploads

    public func insert(_ upload: Upload) throws(StoreError) {
        do throws(StoreError) {
            try query("INSERT INTO uploads (id, filename, content_type, size, sha256, path, tracks, created_at, source_url) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      [.text(upload.id), .text(upload.filename), upload.contentType.sqlValue, .integer(Int64(upload.size)),
                       .text(upload.sha256), .text(rows.stored(upload.path)), .text(JobRows.json(upload.tracks)), .real(upload.createdAt),
                       upload.sourceURL.map(SQLValue.text) ?? .null])
        } catch where error.code == "store_unavailable" {
            // Committed with its answer lost (as `createJob`): told it failed, the server removed the file, and the
            // row stayed, an upload whose bytes were gone (200 to GET, `input_missing` for every job made from it).
            if Self.madeDespite(lookingUp: { () throws(StoreError) in try self.upload(id: upload.id) }) != nil { return }
            throw error
        }
    }

    public func completeFetch(_ upload: Upload) throws(StoreError) {
        let (sql, arguments) = rows.completedFetch(upload)
        guard try !query(sql, arguments).isEmpty else {
            throw StoreError(code: "not_found", message: "Upload \(upload.id) no longer waits for its bytes.")
        }
    }

    public func upload(id: String) throws(StoreError) -> Upload? {
        // No id holds a NUL: none is found. Passed on, it was cut at the NUL (a C string), and found the upload named
        // by what came before it; it is refused now (`StoreError.nulInText`).
        guard !id.utf8.contains(0) else { return nil }
        return try query("SELECT * FROM uploads WHERE id = ?", [.text(id)]).first.map(rows.upload)
    }

    public func uploadFileNames(ids: [String]) throws(StoreError) -> [String: String] {
        try JobRows.uploadFileNames(ids: ids) { sql, arguments throws(StoreError) in try query(sql, arguments) }
    }

    public func deleteUpload(id: String) throws(StoreError) {
        try query("DELETE FROM uploads WHERE id = ?", [.text(id)])
    }

    public func unusedUploads(before time: Double, limit: Int) throws(StoreError) -> [Upload] {
        try query("""
            SELECT * FROM uploads u WHERE created_at < ?
            AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.input_upload = u.id)
            AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.watermark_upload = u.id)
            ORDER BY created_at LIMIT ?
            """, [.real(time), .integer(Int64(limit))]).map(rows.upload)
    }

    // MARK: Jobs for the API

    public func createJob(id: String?, input: String, settings: TranscodeSettings, priority: Int, webhooks: JobWebhooks) throws(StoreError) -> Job {
        let hooks = JobRows.webhookColumns(webhooks)
        guard try !query("SELECT 1 FROM uploads WHERE id = ?", [.text(input)]).isEmpty else {
            throw StoreError(code: "upload_not_found", message: "No upload has the id \(input).")
        }
        let watermark = settings.filters?.video?.watermark?.upload
        let id = id ?? UUID().uuidString.lowercased()
        do throws(StoreError) {
            let row = try query("""
                INSERT INTO jobs (id, state, settings, input_upload, watermark_upload, attempts, priority, created_at, updated_at,
                    \(hooks.map(\.0).joined(separator: ", ")))
                VALUES (?, 'queued', ?, ?, ?, 1, ?, \(Self.now), \(Self.now), ?, ?, ?) RETURNING *
                """, [.text(id), .text(JobRows.json(settings)), .text(input),
                      watermark.map(SQLValue.text) ?? .null, .integer(Int64(priority))] + hooks.map(\.1)).first
            guard let row else { throw StoreError(code: "postgres_error", message: "PostgreSQL returned no row for the new job.") }
            return rows.job(row)
        } catch where error.code == "store_unavailable" {
            // The link went with the statement sent: it may have committed, its answer lost. Told "try again", a
            // client made a second job beside the first, which ran all the same (twice the work, twice the
            // webhooks). Looked for by its id (on another connection), it is this job; not there, none was made.
            if let made = Self.madeDespite(lookingUp: { () throws(StoreError) in try job(id: id) }) { return made }
            throw error
        } catch where error.isStillReferenced && watermark != nil {
            throw StoreError(code: "watermark_not_found", message: "No upload has the id \(watermark ?? "").", sqlState: error.sqlState)
        } catch where error.isStillReferenced {
            throw StoreError(code: "upload_not_found", message: "No upload has the id \(input).", sqlState: error.sqlState)
        } catch where error.isDuplicate {
            // Another unique key (a webhook delivery's id, made by the trigger) is not this job's.
            guard (try? job(id: id)) != nil else { throw error }
            throw StoreError(code: "job_exists", message: "A job has the id \(id) already.", sqlState: error.sqlState)
        }
    }

    /// Pauses before the looks for a row whose insert lost its answer: a statement the server was still running
    /// when the link went commits then (its end is what notices the link).
    static let lostAnswerLooks = [0.1, 0.4, 1.0]

    /// The row an insert whose link was lost made after all, when `lookingUp` finds it; nil when it is not there,
    /// or when a look fails (the store is away: looking again would hold the request as long again, each time).
    static func madeDespite<T>(lookingUp: () throws(StoreError) -> T?) -> T? {
        for pause in lostAnswerLooks {
            usleep(UInt32(pause * 1_000_000))
            do {
                if let found = try lookingUp() { return found }
            } catch {
                return nil
            }
        }
        return nil
    }

    public func job(id: String) throws(StoreError) -> Job? {
        guard !id.utf8.contains(0) else { return nil } // as `upload(id:)`
        return try query("SELECT * FROM jobs WHERE id = ?", [.text(id)]).first.map(rows.job)
    }

    public func lastUpdate(of id: String) throws(StoreError) -> Double? {
        guard !id.utf8.contains(0) else { return nil } // as `upload(id:)`
        return try query("SELECT updated_at FROM jobs WHERE id = ?", [.text(id)]).first?["updated_at"].double
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
        let found = try query("SELECT * FROM jobs \(filter) ORDER BY created_at DESC, id DESC LIMIT ?",
                              arguments + [.integer(Int64(limit + 1))])
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
        var counts: [JobState: Int] = [:]
        for row in try query("SELECT state, count(*) AS n FROM jobs GROUP BY state") {
            if let state = row["state"].string.flatMap(JobState.init) { counts[state] = row["n"].int ?? 0 }
        }
        return counts
    }

    public func cancelQueued(id: String) throws(StoreError) -> Job {
        try move(id, to: .canceled, from: .queued, set: JobRows.canceled)
    }

    public func requestCancel(id: String) throws(StoreError) -> Bool {
        !(try query("UPDATE jobs SET cancel_requested = true WHERE id = ? AND state = 'running' RETURNING id", [.text(id)]).isEmpty)
    }

    public func deleteJob(id: String) throws(StoreError) {
        // Pending deliveries stay until sent (their rows carry the job); the rest go with the job.
        try query("WITH gone AS (DELETE FROM webhook_deliveries WHERE job_id = ? AND state <> 'pending') DELETE FROM jobs WHERE id = ?",
                  [.text(id), .text(id)])
        // Again, once the job is gone: a delivery sent meanwhile (pending in the statement's snapshot) whose sender
        // looked for the job before the delete committed stayed for good, no job row left for retention to find.
        // A sender that looks after this sees no job and removes its own.
        try query("DELETE FROM webhook_deliveries WHERE job_id = ? AND state <> 'pending'", [.text(id)])
    }

    public func finishedJobs(before time: Double, limit: Int) throws(StoreError) -> [JobOutput] {
        try query("""
            SELECT \(JobOutput.columns) FROM jobs WHERE state IN ('succeeded', 'failed', 'canceled') AND finished_at < ?
                AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w WHERE w.job_id = jobs.id AND w.state = 'pending')
            ORDER BY finished_at LIMIT ?
            """, [.real(time), .integer(Int64(limit))]).map(rows.output)
    }

    public func output(of id: String) throws(StoreError) -> JobOutput? {
        try query("SELECT \(JobOutput.columns) FROM jobs WHERE id = ?", [.text(id)]).first.map(rows.output)
    }

    // MARK: Webhooks

    private var webhookRows: WebhookRows<PostgresJobStore> {
        WebhookRows(store: self, jobRows: rows, now: { Self.now }, skipLocked: "FOR UPDATE SKIP LOCKED", unindexed: "")
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

    func rows(_ sql: String, _ arguments: [SQLValue]) throws(StoreError) -> [Row] { try query(sql, arguments) }

    // MARK: Jobs for workers

    public func claimNext(worker: String, leaseSeconds: Double, skipping: [String]) throws(StoreError) -> Job? {
        // One statement, so one short transaction: the row lock lasts as long as the UPDATE, and SKIP LOCKED lets
        // every other node's claim pass the row this one is taking instead of waiting for it.
        try query("""
            UPDATE jobs SET state = 'running', lease = ?, lease_token = lease_token + 1,
                lease_expires_at = \(Self.now) + ?, cancel_requested = false, started_at = \(Self.now),
                updated_at = \(Self.now), progress_time = 0
            WHERE id = (SELECT id FROM jobs WHERE state = 'queued'\(JobRows.skipping(skipping.count))
                        ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
            RETURNING *
            """, [.text(worker), .real(leaseSeconds)] + skipping.map(SQLValue.text)).first.map(rows.job)
    }

    public func runningJobs(leasedTo worker: String) throws(StoreError) -> [Job] {
        try query("SELECT * FROM jobs WHERE state = 'running' AND lease = ? AND lease_expires_at > \(Self.now) ORDER BY started_at",
                  [.text(worker)]).map(rows.job)
    }

    public func renew(_ lease: Lease, leaseSeconds: Double) throws(StoreError) -> LeaseStatus {
        let found = try query("""
            UPDATE jobs SET lease_expires_at = \(Self.now) + ? WHERE id = ? AND state = 'running' AND lease_token = ?
            RETURNING cancel_requested
            """, [.real(leaseSeconds), .text(lease.jobID), .integer(Int64(lease.token))]).first
        guard let found else { return .lost }
        return .held(cancelRequested: found["cancel_requested"].int == 1)
    }

    public func saveProgress(_ lease: Lease, time: Double, duration: Double) throws(StoreError) {
        let changed = try query("""
            UPDATE jobs SET progress_time = ?, progress_duration = ?, updated_at = \(Self.now)
            WHERE id = ? AND state = 'running' AND lease_token = ? RETURNING id
            """, [.real(time), .real(duration), .text(lease.jobID), .integer(Int64(lease.token))])
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
        var assignments = ["state = ?", "updated_at = \(Self.now)"]
        var arguments: [SQLValue] = [.text(state.rawValue)]
        if state.isTerminal { assignments.append("finished_at = \(Self.now)") }
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
        let found: Row?
        do {
            found = try query("UPDATE jobs SET \(assignments.joined(separator: ", ")) WHERE \(filter) RETURNING *", arguments).first
        } catch where error.isConstraint && error.message.contains(Migrations.invalidTransition) {
            let current = try job(id: id)?.state.rawValue ?? "?"
            throw StoreError(code: "invalid_transition", message: "A \(current) job cannot become \(state.rawValue).",
                             sqlState: error.sqlState)
        }
        if let found { return rows.job(found) }
        guard let current = try job(id: id) else { throw StoreError(code: "not_found", message: "No job has the id \(id).") }
        if let lease {
            // Already there under this lease: a write tried again after its answer was lost (the commit went through,
            // the connection did not). A requeue may have been turned into a cancel (migration 5).
            if current.leaseToken == lease.token && (current.state == state || (state == .queued && current.state == .canceled)) {
                return current
            }
            throw JobRows.leaseLost(lease, current: current)
        }
        throw StoreError(code: "invalid_transition", message: "The job is \(current.state.rawValue), not \(expected?.rawValue ?? "?").")
    }

    // MARK: Recovery and sweeps

    public func recoverOrphans(maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String]) {
        try recover(condition: "state = 'running'", maxAttempts: maxAttempts)
    }

    public func recoverExpiredLeases(maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String]) {
        try recover(condition: "state = 'running' AND lease_expires_at < \(Self.now)", maxAttempts: maxAttempts)
    }

    private func recover(condition: String, maxAttempts: Int) throws(StoreError) -> (requeued: [String], failed: [String]) {
        // Every node sweeps: two at once neither move a job twice nor wait on each other (a deadlock, their rows
        // locked in different orders), as each takes only rows no other sweep holds. Each row matches one statement
        // (the cancel asked for, the attempts), whenever its lease runs out between them.
        let candidates = { (filter: String) in "id IN (SELECT id FROM jobs WHERE \(condition) AND \(filter) FOR UPDATE SKIP LOCKED)" }
        return try pool.with { connection throws(StoreError) in
            try connection.transaction { () throws(StoreError) -> ([String], [String]) in
                // A job whose cancel was asked for (the API answered 202) ends canceled, on its last attempt too (the
                // requeue's trigger covers a requeue only). Listed among the requeued, as the trigger's are.
                let canceled = try connection.query(Self.numbered("""
                    UPDATE jobs SET state = 'canceled', \(JobRows.canceled.map { "\($0.0) = ?" }.joined(separator: ", ")),
                        finished_at = \(Self.now), updated_at = \(Self.now)
                    WHERE \(candidates("cancel_requested")) RETURNING id
                    """), JobRows.canceled.map(\.1)).compactMap { $0["id"].string }
                let failed = try connection.query(Self.numbered("""
                    UPDATE jobs SET state = 'failed', error_code = 'worker_crashed',
                        error_message = 'The process running this job stopped unexpectedly ' || attempts || ' times.',
                        lease = NULL, finished_at = \(Self.now), updated_at = \(Self.now)
                    WHERE \(candidates("NOT cancel_requested AND attempts >= ?")) RETURNING id
                    """), [.integer(Int64(maxAttempts))]).compactMap { $0["id"].string }
                let requeued = try connection.query(Self.numbered("""
                    UPDATE jobs SET state = 'queued', attempts = attempts + 1, lease = NULL, started_at = NULL,
                        progress_time = 0, updated_at = \(Self.now)
                    WHERE \(candidates("NOT cancel_requested AND attempts < ?")) RETURNING id
                    """), [.integer(Int64(maxAttempts))]).compactMap { $0["id"].string }
                return (canceled + requeued, failed)
            }
        }
    }

    /// Holds a session advisory lock named after the sweep while `body` runs; another node holding it means the sweep
    /// is being done, and this one is skipped.
    public func exclusively(_ name: String, _ body: () throws(StoreError) -> Void) throws(StoreError) -> Bool {
        let key: [SQLValue] = [.text("transcoderd:" + name)]
        let taken = try pool.with(slot: 0) { connection throws(StoreError) in
            try connection.query("SELECT pg_try_advisory_lock(hashtext($1)) AS taken", key).first?["taken"].int == 1
        }
        guard taken else { return false }
        defer {
            _ = try? pool.with(slot: 0) { connection throws(StoreError) in
                try connection.query("SELECT pg_advisory_unlock(hashtext($1))", key)
            }
        }
        try body()
        return true
    }

    public func watch(_ handler: @escaping @Sendable (StoreNotice) -> Void) {
        stopWatching()
        listener.withLock { $0 = PostgresListener(uri: pool.uri, handler: handler) }
    }

    public func stopWatching() {
        let stopped = listener.withLock { listener -> PostgresListener? in
            defer { listener = nil }
            return listener
        }
        stopped?.stop()
    }

    public func close() {
        stopWatching()
        pool.close()
    }

    deinit { close() }
}
