import Foundation
import Pipeline
import Locks
import Synchronization

/// Jobs and uploads in one SQLite file. The state machine is enforced by the database itself (a trigger), and a
/// claim is a single `UPDATE … RETURNING`, so no job runs twice at once even with several connections.
///
/// Thread-safe: the connection is behind a mutex, and every method runs one short statement or transaction.
/// Methods block (SQLite I/O); call them from worker threads, not from Swift's cooperative pool.
public final class JobStore: Sendable {
    private let database: LockedValue<Database>
    private let writes = Atomic<Int64>(0)
    /// The database file.
    public let path: String

    /// Opens the store at `path`, creating and migrating the schema as needed.
    public init(path: String) throws(StoreError) {
        let connection = try Database(path: path)
        try Migrations.migrate(connection)
        self.path = path
        database = LockedValue(connection)
    }

    @discardableResult
    private func withDatabase<T: Sendable>(_ body: (Database) throws(StoreError) -> T) throws(StoreError) -> T {
        try database.withLock { (database: inout Database) throws(StoreError) -> T in
            defer { writes.store(database.totalChanges, ordering: .releasing) }
            return try body(database)
        }
    }

    /// A number that grows whenever anything in the store is written, readable without touching SQLite.
    ///
    /// Read it *before* reading rows you want to cache: while it stays the same, those rows are unchanged. It counts
    /// this store's own writes, which are all the writes there are: the data directory lock keeps other processes
    /// out, and the server opens one store.
    public var generation: Int64 { writes.load(ordering: .acquiring) }

    static func now() -> Double { Date().timeIntervalSince1970 }

    // MARK: Uploads

    /// Records an upload whose file is already in place.
    public func insert(_ upload: Upload) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.query(
                "INSERT INTO uploads (id, filename, content_type, size, sha256, path, tracks, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [.text(upload.id), .text(upload.filename), upload.contentType.sqlValue, .integer(Int64(upload.size)),
                 .text(upload.sha256), .text(upload.path), .text(Self.json(upload.tracks)), .real(upload.createdAt)])
        }
    }

    public func upload(id: String) throws(StoreError) -> Upload? {
        try withDatabase { database throws(StoreError) in
            try database.query("SELECT * FROM uploads WHERE id = ?", [.text(id)]).first.map(Self.upload)
        }
    }

    /// Deletes an upload's row; refused (`constraint`) while a job still uses it as its input or its watermark.
    public func deleteUpload(id: String) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.query("DELETE FROM uploads WHERE id = ?", [.text(id)])
        }
    }

    // MARK: Jobs

    /// Queues a new job on an existing upload.
    public func createJob(input: String, settings: TranscodeSettings, priority: Int = 0) throws(StoreError) -> Job {
        let now = Self.now()
        let job = Job(id: UUID().uuidString.lowercased(), state: .queued, settings: settings, inputUpload: input,
                      progressTime: 0, progressDuration: 0, attempts: 1, priority: priority, createdAt: now, updatedAt: now)
        try withDatabase { database throws(StoreError) in
            guard try !database.query("SELECT 1 FROM uploads WHERE id = ?", [.text(input)]).isEmpty else {
                throw StoreError(code: "upload_not_found", message: "No upload has the id \(input).")
            }
            let watermark = settings.filters?.video?.watermark?.upload
            do throws(StoreError) {
                try database.query("""
                    INSERT INTO jobs (id, state, settings, input_upload, watermark_upload, attempts, priority, created_at, updated_at)
                    VALUES (?, 'queued', ?, ?, ?, 1, ?, ?, ?)
                    """,
                    [.text(job.id), .text(Self.json(settings)), .text(input), watermark.map(SQLValue.text) ?? .null,
                     .integer(Int64(priority)), .real(now), .real(now)])
            } catch where error.isConstraint && watermark != nil {
                throw StoreError(code: "watermark_not_found", message: "No upload has the id \(watermark ?? "").",
                                 resultCode: error.resultCode)
            }
        }
        return job
    }

    public func job(id: String) throws(StoreError) -> Job? {
        try withDatabase { database throws(StoreError) in
            try database.query("SELECT * FROM jobs WHERE id = ?", [.text(id)]).first.map(Self.job)
        }
    }

    /// When the job last changed (seconds since 1970), or nil if there is no such job: a cheap check for caches.
    public func lastUpdate(of id: String) throws(StoreError) -> Double? {
        try withDatabase { database throws(StoreError) in
            try database.query("SELECT updated_at FROM jobs WHERE id = ?", [.text(id)]).first?["updated_at"].double
        }
    }

    /// A page of jobs, newest first, optionally in one state; `cursor` is the `next` of the previous page.
    public func jobs(state: JobState? = nil, limit: Int = 50, cursor: String? = nil) throws(StoreError) -> (jobs: [Job], next: String?) {
        var conditions: [String] = []
        var arguments: [SQLValue] = []
        if let state {
            conditions.append("state = ?")
            arguments.append(.text(state.rawValue))
        }
        if let cursor {
            guard let (time, id) = Self.decodeCursor(cursor) else {
                throw StoreError(code: "invalid_cursor", message: "The cursor is not one this server gave out.")
            }
            conditions.append("(created_at < ? OR (created_at = ? AND id < ?))")
            arguments += [.real(time), .real(time), .text(id)]
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let rows = try withDatabase { database throws(StoreError) in
            try database.query("SELECT * FROM jobs \(filter) ORDER BY created_at DESC, id DESC LIMIT ?",
                               arguments + [.integer(Int64(limit + 1))])
        }
        let jobs = rows.prefix(limit).map(Self.job)
        let next = rows.count > limit ? jobs.last.map { Self.encodeCursor(time: $0.createdAt, id: $0.id) } : nil
        return (Array(jobs), next)
    }

    /// Number of jobs in each state.
    public func counts() throws(StoreError) -> [JobState: Int] {
        let rows = try withDatabase { database throws(StoreError) in
            try database.query("SELECT state, count(*) AS n FROM jobs GROUP BY state")
        }
        var counts: [JobState: Int] = [:]
        for row in rows { if let state = row["state"].string.flatMap(JobState.init) { counts[state] = row["n"].int ?? 0 } }
        return counts
    }

    /// Atomically takes the next queued job (highest priority, then oldest) for the worker `lease`.
    public func claimNext(lease: String) throws(StoreError) -> Job? {
        let now = Self.now()
        return try withDatabase { database throws(StoreError) in
            try database.query("""
                UPDATE jobs SET state = 'running', lease = ?, started_at = ?, updated_at = ?, progress_time = 0
                WHERE id = (SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC, created_at, id LIMIT 1)
                RETURNING *
                """, [.text(lease), .real(now), .real(now)]).first.map(Self.job)
        }
    }

    /// Saves a running job's progress (seconds of output written, expected seconds).
    public func saveProgress(id: String, time: Double, duration: Double) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.query(
                "UPDATE jobs SET progress_time = ?, progress_duration = ?, updated_at = ? WHERE id = ? AND state = 'running'",
                [.real(time), .real(duration), .real(Self.now()), .text(id)])
        }
    }

    /// running → succeeded, with the output's place, size and tracks, and the frames and seconds the transcode took.
    @discardableResult
    public func markSucceeded(id: String, outputPath: String, size: Int, tracks: [Track], files: [OutputFile]?,
                              duration: Double, framesEncoded: Int, seconds: Double) throws(StoreError) -> Job {
        try move(id, to: .succeeded, set: [
            ("output_path", .text(outputPath)), ("output_size", .integer(Int64(size))), ("output_tracks", .text(Self.json(tracks))),
            ("output_files", files.map { .text(Self.json($0)) } ?? .null),
            ("progress_time", .real(duration)), ("progress_duration", .real(duration)), ("lease", .null),
            ("frames_encoded", .integer(Int64(framesEncoded))), ("transcode_seconds", .real(seconds)),
        ])
    }

    /// running → failed, with a stable code and a message for people.
    @discardableResult
    public func markFailed(id: String, code: String, message: String) throws(StoreError) -> Job {
        try move(id, to: .failed, set: [("error_code", .text(code)), ("error_message", .text(message)), ("lease", .null)])
    }

    /// queued or running → canceled; with `from`, only if the job is in that state now.
    @discardableResult
    public func markCanceled(id: String, from expected: JobState? = nil) throws(StoreError) -> Job {
        try move(id, to: .canceled, from: expected, set: [("error_code", .text("canceled")), ("error_message", .text("The job was canceled.")),
                                          ("lease", .null)])
    }

    /// running → queued with one more attempt: the process that ran it crashed, and it runs again.
    @discardableResult
    public func retry(id: String) throws(StoreError) -> Job {
        let now = Self.now()
        let row = try withDatabase { database throws(StoreError) -> Row? in
            try database.query("""
                UPDATE jobs SET state = 'queued', attempts = attempts + 1, lease = NULL, started_at = NULL, progress_time = 0,
                    updated_at = ?
                WHERE id = ? AND state = 'running' RETURNING *
                """, [.real(now), .text(id)]).first
        }
        guard let row else { throw StoreError(code: "invalid_transition", message: "The job \(id) is not running.") }
        return Self.job(row)
    }

    /// running → queued without counting an attempt: the process is shutting down and the next start runs it again.
    @discardableResult
    public func requeue(id: String) throws(StoreError) -> Job {
        try move(id, to: .queued, set: [("lease", .null), ("started_at", .null), ("progress_time", .real(0))])
    }

    /// Moves a job to `state` if the state machine allows it (and, with `expected`, only from that state),
    /// setting `columns` too.
    @discardableResult
    public func move(_ id: String, to state: JobState, from expected: JobState? = nil,
                     set columns: [(String, SQLValue)] = []) throws(StoreError) -> Job {
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
        var filter = "id = ?"
        arguments.append(.text(id))
        if let expected {
            filter += " AND state = ?"
            arguments.append(.text(expected.rawValue))
        }
        let row = try withDatabase { database throws(StoreError) -> Row? in
            do throws(StoreError) {
                if let row = try database.query("UPDATE jobs SET \(assignments.joined(separator: ", ")) WHERE \(filter) RETURNING *",
                                                arguments).first {
                    return row
                }
                guard let current = try database.query("SELECT state FROM jobs WHERE id = ?", [.text(id)]).first?["state"].string else {
                    return nil
                }
                throw StoreError(code: "invalid_transition", message: "The job is \(current), not \(expected?.rawValue ?? "?").")
            } catch where error.isConstraint && error.message.contains(Migrations.invalidTransition) {
                let current = try database.query("SELECT state FROM jobs WHERE id = ?", [.text(id)]).first?["state"].string ?? "?"
                throw StoreError(code: "invalid_transition", message: "A \(current) job cannot become \(state.rawValue).",
                                 resultCode: error.resultCode)
            }
        }
        guard let row else { throw StoreError(code: "not_found", message: "No job has the id \(id).") }
        return Self.job(row)
    }

    /// After a crash: jobs left running go back to the queue with one more attempt, or fail with `worker_crashed`
    /// once `maxAttempts` attempts have died. Returns the ids requeued and failed.
    public func recoverOrphans(maxAttempts: Int = 3) throws(StoreError) -> (requeued: [String], failed: [String]) {
        let now = Self.now()
        return try withDatabase { database throws(StoreError) in
            try database.transaction { () throws(StoreError) -> ([String], [String]) in
                let failed = try database.query("""
                    UPDATE jobs SET state = 'failed', error_code = 'worker_crashed',
                        error_message = 'The process running this job stopped unexpectedly ' || attempts || ' times.',
                        lease = NULL, finished_at = ?, updated_at = ?
                    WHERE state = 'running' AND attempts >= ? RETURNING id
                    """, [.real(now), .real(now), .integer(Int64(maxAttempts))]).compactMap { $0["id"].string }
                let requeued = try database.query("""
                    UPDATE jobs SET state = 'queued', attempts = attempts + 1, lease = NULL, started_at = NULL,
                        progress_time = 0, updated_at = ?
                    WHERE state = 'running' RETURNING id
                    """, [.real(now)]).compactMap { $0["id"].string }
                return (requeued, failed)
            }
        }
    }

    /// Finished jobs (succeeded, failed, canceled) that ended before `time` (seconds since 1970).
    public func finishedJobs(before time: Double, limit: Int = 500) throws(StoreError) -> [Job] {
        try withDatabase { database throws(StoreError) in
            try database.query("""
                SELECT * FROM jobs WHERE state IN ('succeeded', 'failed', 'canceled') AND finished_at < ?
                ORDER BY finished_at LIMIT ?
                """, [.real(time), .integer(Int64(limit))]).map(Self.job)
        }
    }

    /// Uploads older than `time` that no job refers to (as its input or its watermark).
    public func unusedUploads(before time: Double) throws(StoreError) -> [Upload] {
        try withDatabase { database throws(StoreError) in
            try database.query("""
                SELECT * FROM uploads u WHERE created_at < ?
                AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.input_upload = u.id)
                AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.watermark_upload = u.id)
                """, [.real(time)]).map(Self.upload)
        }
    }

    /// Deletes a job's row (its files are the caller's to remove).
    public func deleteJob(id: String) throws(StoreError) {
        try withDatabase { database throws(StoreError) in
            try database.query("DELETE FROM jobs WHERE id = ?", [.text(id)])
        }
    }

    /// `PRAGMA integrity_check`: "ok" when the file is sound.
    public func integrityCheck() throws(StoreError) -> String {
        try withDatabase { database throws(StoreError) in
            try database.query("PRAGMA integrity_check").map { $0["integrity_check"].string ?? "" }.joined(separator: "\n")
        }
    }

    // MARK: Rows

    private static func json<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }

    private static func decode<T: Decodable>(_ type: T.Type, _ value: SQLValue) -> T? {
        guard let text = value.string else { return nil }
        return try? JSONDecoder().decode(type, from: Data(text.utf8))
    }

    /// The stored settings, or what keeps them from being read (they were written by another version of transcoderd,
    /// or edited by hand): never the defaults in their place.
    private static func settings(_ value: SQLValue) -> (settings: TranscodeSettings, unreadable: Job.UnreadableSettings?) {
        let text = value.string ?? ""
        do throws(SettingsError) {
            return (try TranscodeSettings.parse(Data(text.utf8)), nil)
        } catch {
            let problem = error.key.isEmpty ? error.message : "settings.\(error.key): \(error.message)"
            return (TranscodeSettings(), Job.UnreadableSettings(text: text, problem: problem))
        }
    }

    private static func upload(_ row: Row) -> Upload {
        Upload(id: row["id"].string ?? "", filename: row["filename"].string ?? "", contentType: row["content_type"].string,
               size: row["size"].int ?? 0, sha256: row["sha256"].string ?? "", path: row["path"].string ?? "",
               tracks: decode([Track].self, row["tracks"]) ?? [], createdAt: row["created_at"].double ?? 0)
    }

    private static func job(_ row: Row) -> Job {
        let settings = settings(row["settings"])
        var job = Job(id: row["id"].string ?? "", state: row["state"].string.flatMap(JobState.init) ?? .failed,
            settings: settings.settings,
            inputUpload: row["input_upload"].string ?? "", outputPath: row["output_path"].string,
            outputSize: row["output_size"].int, outputTracks: decode([Track].self, row["output_tracks"]),
            outputFiles: decode([OutputFile].self, row["output_files"]),
            progressTime: row["progress_time"].double ?? 0, progressDuration: row["progress_duration"].double ?? 0,
            errorCode: row["error_code"].string, errorMessage: row["error_message"].string,
            attempts: row["attempts"].int ?? 1, priority: row["priority"].int ?? 0,
            createdAt: row["created_at"].double ?? 0, startedAt: row["started_at"].double,
            finishedAt: row["finished_at"].double, updatedAt: row["updated_at"].double ?? 0, lease: row["lease"].string,
            framesEncoded: row["frames_encoded"].int, transcodeSeconds: row["transcode_seconds"].double)
        job.unreadableSettings = settings.unreadable
        return job
    }

    /// A page cursor: the last job's creation time (the bits of the Double, 16 hex digits) and its id, e.g.
    /// `41d9b5a1c2f3e4d5-9b2f6c1e-8a59-4f0e-9d0c-3f1f2a7e5b11`. Any string of that form is a valid cursor.
    private static func encodeCursor(time: Double, id: String) -> String {
        let bits = String(time.bitPattern, radix: 16)
        return String(repeating: "0", count: 16 - bits.count) + bits + "-" + id
    }

    private static func decodeCursor(_ cursor: String) -> (Double, String)? {
        let bits = cursor.prefix(16)
        guard bits.count == 16, cursor.dropFirst(16).first == "-", let value = UInt64(bits, radix: 16) else { return nil }
        let id = String(cursor.dropFirst(17))
        guard id.count == 36, id.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) || $0 == 0x2D }) else {
            return nil
        }
        return (Double(bitPattern: value), id)
    }
}
