import Foundation
import Pipeline

/// What both stores write and read the same way: rows into `Job` and `Upload`, JSON columns, page cursors, and file
/// paths kept relative to the data directory (nodes of a cluster may mount shared storage at different places).
struct JobRows: Sendable {
    /// The data directory, without a trailing slash.
    let root: String

    init(root: String) {
        root.hasSuffix("/") && root.count > 1 ? (self.root = String(root.dropLast())) : (self.root = root)
    }

    /// A path as stored: relative to the data directory when it is inside it, else as given.
    func stored(_ path: String) -> String {
        path.hasPrefix(root + "/") ? String(path.dropFirst(root.count + 1)) : path
    }

    /// A stored path as this process reaches it.
    func resolved(_ path: String) -> String {
        path.hasPrefix("/") || path.isEmpty ? path : root + "/" + path
    }

    static func json<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }

    static func decode<T: Decodable>(_ type: T.Type, _ value: SQLValue) -> T? {
        guard let text = value.string else { return nil }
        return try? JSONDecoder().decode(type, from: Data(text.utf8))
    }

    /// The stored settings, or what keeps them from being read (they were written by another version of transcoderd,
    /// or edited by hand): never the defaults in their place.
    static func settings(_ value: SQLValue) -> (settings: TranscodeSettings, unreadable: Job.UnreadableSettings?) {
        let text = value.string ?? ""
        do throws(SettingsError) {
            return (try TranscodeSettings.parse(Data(text.utf8)), nil)
        } catch {
            let problem = error.key.isEmpty ? error.message : "settings.\(error.key): \(error.message)"
            return (TranscodeSettings(), Job.UnreadableSettings(text: text, problem: problem))
        }
    }

    func upload(_ row: Row) -> Upload {
        Upload(id: row["id"].string ?? "", filename: row["filename"].string ?? "", contentType: row["content_type"].string,
               size: row["size"].int ?? 0, sha256: row["sha256"].string ?? "", path: resolved(row["path"].string ?? ""),
               tracks: Self.decode([Track].self, row["tracks"]) ?? [], createdAt: row["created_at"].double ?? 0,
               sourceURL: row["source_url"].string)
    }

    func job(_ row: Row) -> Job {
        let settings = Self.settings(row["settings"])
        var job = Job(id: row["id"].string ?? "", state: row["state"].string.flatMap(JobState.init) ?? .failed,
            settings: settings.settings,
            inputUpload: row["input_upload"].string ?? "", outputPath: row["output_path"].string.map(resolved),
            outputSize: row["output_size"].int, outputTracks: Self.decode([Track].self, row["output_tracks"]),
            outputFiles: Self.decode([OutputFile].self, row["output_files"]),
            progressTime: row["progress_time"].double ?? 0, progressDuration: row["progress_duration"].double ?? 0,
            errorCode: row["error_code"].string, errorMessage: row["error_message"].string,
            attempts: row["attempts"].int ?? 1, priority: row["priority"].int ?? 0,
            createdAt: row["created_at"].double ?? 0, startedAt: row["started_at"].double,
            finishedAt: row["finished_at"].double, updatedAt: row["updated_at"].double ?? 0, lease: row["lease"].string,
            framesEncoded: row["frames_encoded"].int, transcodeSeconds: row["transcode_seconds"].double)
        job.leaseToken = row["lease_token"].int ?? 0
        job.leaseExpiresAt = row["lease_expires_at"].double
        job.unreadableSettings = settings.unreadable
        job.webhook = Self.target(row)
        return job
    }

    /// A row of `JobOutput.columns`.
    func output(_ row: Row) -> JobOutput {
        JobOutput(id: row["id"].string ?? "", state: row["state"].string.flatMap(JobState.init) ?? .failed,
                  outputRoot: JobOutput.root(path: row["output_path"].string.map(resolved), singleFile: row["single_file"] == .integer(1)))
    }

    /// The columns a new job's webhooks set.
    static func webhookColumns(_ webhooks: JobWebhooks) -> [(String, SQLValue)] {
        [
            ("webhook_url", webhooks.target.map { .text($0.url) } ?? .null),
            ("webhook_events", webhooks.target.map { .text($0.events.map(\.rawValue).joined(separator: ",")) } ?? .null),
            ("server_webhook_url", webhooks.serverURL.map(SQLValue.text) ?? .null),
        ]
    }

    /// A job's own webhook as stored.
    static func target(_ row: Row) -> WebhookTarget? {
        guard let url = row["webhook_url"].string else { return nil }
        var target = WebhookTarget(url: url, events: (row["webhook_events"].string ?? "").split(separator: ",")
            .compactMap { WebhookEvent(rawValue: String($0)) })
        target.disabled = row["webhook_disabled"].int == 1
        return target
    }


    /// A page cursor: the last job's creation time (the bits of the Double, 16 hex digits) and its id, e.g.
    /// `41d9b5a1c2f3e4d5-9b2f6c1e-8a59-4f0e-9d0c-3f1f2a7e5b11`. Any string of that form whose time is a finite
    /// number is a valid cursor (a NaN compared as true on PostgreSQL, as NULL on SQLite: two stores, two pages).
    static func encodeCursor(time: Double, id: String) -> String {
        let bits = String(time.bitPattern, radix: 16)
        return String(repeating: "0", count: 16 - bits.count) + bits + "-" + id
    }

    /// The condition of the jobs after `cursor` in the list's order, with its arguments: as one comparison of
    /// both columns, which the (created_at DESC, id DESC) index seeks to; spelled out as `a < ? OR (a = ? AND
    /// b < ?)` SQLite walked the index from the newest job and dropped every one before the cursor, a deep
    /// page tens of milliseconds under the store's lock at 300,000 jobs.
    static func afterCursor(_ cursor: String) throws(StoreError) -> (condition: String, arguments: [SQLValue]) {
        let (time, id) = try decodeCursor(cursor)
        return ("(created_at, id) < (?, ?)", [.real(time), .text(id)])
    }

    /// The condition leaving out `count` values of `column` given as arguments (a claim's `skipping` job ids), empty
    /// for none.
    static func skipping(_ count: Int, column: String = "id") -> String {
        count == 0 ? "" : " AND \(column) NOT IN (\(placeholders(count)))"
    }

    /// `count` parameters, `?, ?, …`.
    static func placeholders(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ", ")
    }

    /// Ids asked at once by `uploadFileNames` (well under SQLite's and PostgreSQL's limits on parameters).
    static let idsPerQuery = 500

    /// The statement reading the paths of `count` uploads by id.
    static func uploadPathsSQL(count: Int) -> String {
        "SELECT id, path FROM uploads WHERE id IN (\(placeholders(count)))"
    }

    /// `uploadFileNames` by `query` (a store's way to run a statement), `idsPerQuery` ids at a time.
    static func uploadFileNames(ids: [String], query: (String, [SQLValue]) throws(StoreError) -> [Row]) throws(StoreError) -> [String: String] {
        var names: [String: String] = [:]
        for start in stride(from: 0, to: ids.count, by: idsPerQuery) {
            let chunk = Array(ids[start..<min(ids.count, start + idsPerQuery)])
            for row in try query(uploadPathsSQL(count: chunk.count), chunk.map(SQLValue.text)) {
                guard let id = row["id"].string, let path = row["path"].string else { continue }
                names[id] = URL(fileURLWithPath: path).lastPathComponent
            }
        }
        return names
    }

    static func decodeCursor(_ cursor: String) throws(StoreError) -> (Double, String) {
        let bits = cursor.prefix(16)
        let id = String(cursor.dropFirst(17))
        // Hex digits only: UInt64(_:radix:) takes a sign too (`+000…` read as time 0: an empty page, not a 400).
        let isHex = { (byte: UInt8) in (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) }
        guard bits.count == 16, bits.utf8.allSatisfy(isHex), cursor.dropFirst(16).first == "-", let value = UInt64(bits, radix: 16), id.count == 36,
              id.utf8.allSatisfy({ isHex($0) || $0 == 0x2D }),
              Double(bitPattern: value).isFinite else {
            throw StoreError(code: "invalid_cursor", message: "The cursor is not one this server gave out.")
        }
        return (Double(bitPattern: value), id)
    }

    /// The statement recording a fetched input's bytes on its waiting upload row (only while it still waits).
    func completedFetch(_ upload: Upload) -> (String, [SQLValue]) {
        ("""
            UPDATE uploads SET filename = ?, content_type = ?, size = ?, sha256 = ?, path = ?, tracks = ?
            WHERE id = ? AND sha256 = '' RETURNING id
            """,
         [.text(upload.filename), upload.contentType.map(SQLValue.text) ?? .null, .integer(Int64(upload.size)), .text(upload.sha256),
          .text(stored(upload.path)), .text(Self.json(upload.tracks)), .text(upload.id)])
    }

    // MARK: What each end of a running job sets (both stores write the same columns)

    func succeeded(outputPath: String, size: Int, tracks: [Track], files: [OutputFile]?, duration: Double,
                   framesEncoded: Int, seconds: Double) -> [(String, SQLValue)] {
        [
            ("output_path", .text(stored(outputPath))), ("output_size", .integer(Int64(size))),
            ("output_tracks", .text(Self.json(tracks))), ("output_files", files.map { .text(Self.json($0)) } ?? .null),
            ("progress_time", .real(duration)), ("progress_duration", .real(duration)), ("lease", .null),
            ("frames_encoded", .integer(Int64(framesEncoded))), ("transcode_seconds", .real(seconds)),
        ]
    }

    static func failed(code: String, message: String) -> [(String, SQLValue)] {
        [("error_code", .text(code)), ("error_message", .text(message)), ("lease", .null)]
    }

    static let canceled: [(String, SQLValue)] = [
        ("error_code", .text("canceled")), ("error_message", .text("The job was canceled.")), ("lease", .null),
    ]

    /// Back in the queue (a retry adds `attempts = attempts + 1`).
    static let requeued: [(String, SQLValue)] = [("lease", .null), ("started_at", .null), ("progress_time", .real(0))]

    /// The error for a worker's write that matched no row: the job is gone, or its lease moved on.
    static func leaseLost(_ lease: Lease, current: Job?) -> StoreError {
        guard let current else { return StoreError(code: "not_found", message: "No job has the id \(lease.jobID).") }
        let now = current.state == .running ? "held by \(current.lease ?? "?") with token \(current.leaseToken)"
            : current.state.rawValue
        return StoreError(code: "lease_lost",
                          message: "The job is no longer this worker's (lease token \(lease.token)); it is \(now).")
    }
}
