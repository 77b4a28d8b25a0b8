import Foundation
import Pipeline

/// Runs one SQL statement written with `?` placeholders: what `WebhookRows` needs of a store.
protocol RowRunning {
    func rows(_ sql: String, _ arguments: [SQLValue]) throws(StoreError) -> [Row]
}

/// The webhook outbox's statements, the same for both stores (their differences given at init): claims of due
/// deliveries, outcomes of attempts, listings.
struct WebhookRows<Store: RowRunning> {
    let store: Store
    /// Reads the job snapshots rows carry.
    let jobRows: JobRows
    /// The current time as an SQL expression (seconds since 1970): PostgreSQL's clock, or a value from this process.
    let now: () -> String
    /// `FOR UPDATE SKIP LOCKED` where nodes claim at once, else empty.
    let skipLocked: String
    /// Written before `state` where a delivery's other columns find it: `+` for SQLite, whose planner, without
    /// statistics, looked up `state = 'pending'` in the index on `state` for every correlated look-up, so each
    /// pending delivery walked every earlier one (8,000 pending: 4 s a claim, 6 s for `secondsUntilDue`, the
    /// store's one connection held meanwhile and the whole API waiting); PostgreSQL's statistics choose, and it has
    /// no unary plus for text, so empty there.
    let unindexed: String

    /// How a refused delivery ends once a later event of its job got through to the URL.
    static var stale: String { "state = 'failed', last_error = 'A later event of the job reached the URL first.'" }

    /// Whether the pending delivery `row` (an alias) holds back the later ones of its job and URL: unless its URL
    /// refused it outright (a 4xx other than 408, 425 and 429: a receiver that takes terminal events only and
    /// answers 400 to `job.running`), which its retries will not change. Held back behind it, a job's later events
    /// waited out its whole schedule, 41.6 hours.
    static func holdsBack(_ row: String) -> String {
        "NOT (COALESCE(\(row).last_status, 0) BETWEEN 400 AND 499 AND \(row).last_status NOT IN (408, 425, 429))"
    }

    /// Claims up to `limit` due deliveries for `claimSeconds`, each the earliest pending one of its job and URL that
    /// is held back by none before it (so a job's events arrive in order, but past one its URL refused); a claim
    /// adds an attempt, and the attempt count is the claim's token. None to a URL in `skippingURLs`.
    func claim(limit: Int, claimSeconds: Double, skippingURLs: Set<String>) throws(StoreError) -> [WebhookDelivery] {
        let skipped = skippingURLs.sorted()
        return try store.rows(claimSQL(skipping: skipped.count),
                              [.real(claimSeconds)] + skipped.map { .text($0) } + [.integer(Int64(limit))]).map(delivery)
    }

    /// `claim`'s statement: the claim's length in seconds, `skipping` URLs not to claim for, and the limit its
    /// arguments (a few texts at most: a node has a few senders).
    func claimSQL(skipping: Int = 0) -> String {
        let now = now()
        return """
            UPDATE webhook_deliveries SET claimed_until = \(now) + ?, attempts = attempts + 1
            WHERE seq IN (
                SELECT d.seq FROM webhook_deliveries d
                WHERE d.state = 'pending' AND d.next_attempt_at <= \(now) AND (d.claimed_until IS NULL OR d.claimed_until < \(now))
                    \(JobRows.skipping(skipping, column: "d.url")) AND NOT \(heldBackSQL("d"))
                ORDER BY d.next_attempt_at, d.seq LIMIT ? \(skipLocked))
            RETURNING *
            """
    }

    /// Whether the delivery `row` (an alias) waits behind an earlier pending one of its job and URL (`holdsBack`),
    /// or one being sent now, whatever its URL answered before: a refused event whose retry was in flight, and then
    /// got through (a receiver back from a deploy), arrived after the later event (`job.running` after
    /// `job.succeeded`). Looked up by job (its index), never by state.
    private func heldBackSQL(_ row: String) -> String {
        """
        EXISTS (SELECT 1 FROM webhook_deliveries e
                WHERE e.job_id = \(row).job_id AND e.url = \(row).url AND \(unindexed)e.state = 'pending' AND e.seq < \(row).seq
                    AND (\(Self.holdsBack("e")) OR e.claimed_until >= \(now())))
        """
    }

    /// Records how the claimed attempt went; an attempt whose claim was taken over meanwhile records nothing, nor
    /// one whose delivery was sent again (`redeliver` clears the claim; the attempt count alone matched a sender
    /// that had stalled past its claim, and its late outcome ended the delivery the user had just sent again).
    func finish(_ delivery: WebhookDelivery, _ outcome: DeliveryOutcome, payload: Data?) throws(StoreError) {
        let now = now()
        var assignments: [String]
        var arguments: [SQLValue]
        switch outcome {
        case .delivered(let status):
            assignments = ["state = 'delivered'", "last_status = ?", "last_error = NULL", "delivered_at = \(now)"]
            arguments = [.integer(Int64(status))]
        case .retry(let after, let status, let error):
            assignments = ["next_attempt_at = \(now) + ?", "last_status = ?", "last_error = ?"]
            arguments = [.real(after), status.map { .integer(Int64($0)) } ?? .null, .text(error)]
        case .failed(let status, let error):
            assignments = ["state = 'failed'", "last_status = ?", "last_error = ?"]
            arguments = [status.map { .integer(Int64($0)) } ?? .null, .text(error)]
        case .disabled(let status):
            assignments = ["state = 'disabled'", "last_status = ?", "last_error = 'The URL answered 410 Gone: the job''s webhook is off.'"]
            arguments = [.integer(Int64(status))]
        }
        // Once the body is kept, the job's snapshot it was made from is not needed again (every later attempt sends
        // the body): it went only with the job, and every event kept a copy of the job's JSON, file list and all.
        let body: SQLValue = payload.map { .text(String(decoding: $0, as: UTF8.self)) } ?? .null
        let done = try store.rows("""
            UPDATE webhook_deliveries SET \((assignments + ["claimed_until = NULL", "payload = COALESCE(payload, ?)",
                                                          "job = CASE WHEN COALESCE(payload, ?) IS NULL THEN job ELSE '{}' END"]).joined(separator: ", "))
            WHERE seq = ? AND attempts = ? AND state = 'pending' AND claimed_until IS NOT NULL RETURNING seq
            """, arguments + [body, body, .integer(delivery.sequence), .integer(Int64(delivery.attempts))])
        if case .disabled = outcome, !done.isEmpty {
            // A change of the job as shown: its cached JSON is told by `updated_at`.
            _ = try store.rows("UPDATE jobs SET webhook_disabled = true, updated_at = \(now) WHERE id = ?", [.text(delivery.jobID)])
            _ = try store.rows("""
                UPDATE webhook_deliveries SET state = 'disabled', last_error = 'An earlier delivery to the URL answered 410 Gone.'
                WHERE job_id = ? AND url = ? AND scope = 'job' AND \(unindexed)state = 'pending'
                """, [.text(delivery.jobID), .text(delivery.url)])
        }
        if case .retry = outcome, !done.isEmpty {
            // Refused again while a later event got through (it was in flight as that one was delivered, and the
            // update below passed it over): as stale.
            _ = try store.rows("""
                UPDATE webhook_deliveries SET \(Self.stale)
                WHERE seq = ? AND state = 'pending' AND NOT (\(Self.holdsBack("webhook_deliveries")))
                    AND EXISTS (SELECT 1 FROM webhook_deliveries l WHERE l.job_id = webhook_deliveries.job_id
                                AND l.url = webhook_deliveries.url AND l.seq > webhook_deliveries.seq AND \(unindexed)l.state = 'delivered')
                """, [.integer(delivery.sequence)])
        }
        if case .delivered = outcome, !done.isEmpty {
            // An earlier event its URL refused outright, and which held nothing back, is stale once a later one got
            // through: sent after it (a receiver fixed in the meantime), it took the job back (a `job.running` after
            // its `job.succeeded`) for a receiver that follows the state.
            _ = try store.rows("""
                UPDATE webhook_deliveries SET \(Self.stale)
                WHERE job_id = ? AND url = ? AND \(unindexed)state = 'pending' AND seq < ? AND NOT (\(Self.holdsBack("webhook_deliveries")))
                    AND (claimed_until IS NULL OR claimed_until < \(now))
                """, [.text(delivery.jobID), .text(delivery.url), .integer(delivery.sequence)])
        }
        // A deleted job's deliveries stay until they are sent, then go: this one, and those a 410 just turned off
        // (nothing would take them again, and no job row is left for retention to find).
        _ = try store.rows("""
            DELETE FROM webhook_deliveries WHERE job_id = ? AND state <> 'pending'
                AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = webhook_deliveries.job_id)
            """, [.text(delivery.jobID)])
    }

    /// The job's deliveries, oldest first.
    func deliveries(of jobID: String) throws(StoreError) -> [WebhookDelivery] {
        try store.rows("SELECT * FROM webhook_deliveries WHERE job_id = ? ORDER BY seq", [.text(jobID)]).map(delivery)
    }

    /// Sends a delivery again, due now, its retry schedule starting over: nil when the job has no such delivery;
    /// `delivery_in_flight` while an attempt of it is under way.
    func redeliver(jobID: String, id: String) throws(StoreError) -> WebhookDelivery? {
        let now = now()
        if let row = try store.rows("""
            UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = \(now), claimed_until = NULL, delivered_at = NULL,
                schedule_base = attempts
            WHERE job_id = ? AND id = ? AND (claimed_until IS NULL OR claimed_until < \(now)) RETURNING *
            """, [.text(jobID), .text(id)]).first {
            return delivery(row)
        }
        guard try store.rows("SELECT 1 FROM webhook_deliveries WHERE job_id = ? AND id = ?", [.text(jobID), .text(id)]).isEmpty else {
            throw StoreError(code: "delivery_in_flight", message: "An attempt of delivery \(id) is under way; ask again once it ends.")
        }
        return nil
    }

    /// In how many seconds a claim may next find something, by the store's clock (0 or less: now), nil when nothing
    /// is pending: the earliest time among
    /// the deliveries first in line for their job and URL, a claimed one's being when its claim runs out. A delivery
    /// behind another, or one being sent, is no sooner due than that: counting them made idle senders poll every
    /// 10 ms while a receiver was down (its later deliveries wait behind a retry) or a delivery was in flight.
    func secondsUntilDue() throws(StoreError) -> Double? {
        try store.rows(dueSQL, []).first?["due"].double
    }

    /// `secondsUntilDue`'s statement.
    var dueSQL: String {
        """
        SELECT min(CASE WHEN d.claimed_until > d.next_attempt_at THEN d.claimed_until ELSE d.next_attempt_at END) - \(now()) AS due
        FROM webhook_deliveries d
        WHERE d.state = 'pending' AND NOT \(heldBackSQL("d"))
        """
    }

    /// Deliveries in each state (from the index on `state`).
    static var countsSQL: String { "SELECT state, count(*) AS n FROM webhook_deliveries GROUP BY state" }

    /// Deliveries in each state.
    func counts() throws(StoreError) -> [WebhookDelivery.State: Int] {
        var counts: [WebhookDelivery.State: Int] = [:]
        for row in try store.rows(Self.countsSQL, []) {
            if let state = row["state"].string.flatMap(WebhookDelivery.State.init) { counts[state] = row["n"].int ?? 0 }
        }
        return counts
    }

    func delivery(_ row: Row) -> WebhookDelivery {
        WebhookDelivery(sequence: Int64(row["seq"].int ?? 0), id: row["id"].string ?? "", jobID: row["job_id"].string ?? "",
                        event: row["event"].string ?? "", url: row["url"].string ?? "",
                        scope: row["scope"].string.flatMap(WebhookDelivery.Scope.init) ?? .job,
                        createdAt: row["created_at"].double ?? 0,
                        state: row["state"].string.flatMap(WebhookDelivery.State.init) ?? .pending,
                        attempts: row["attempts"].int ?? 0, scheduleBase: row["schedule_base"].int ?? 0,
                        nextAttemptAt: row["next_attempt_at"].double ?? 0,
                        lastStatus: row["last_status"].int, lastError: row["last_error"].string,
                        payload: row["payload"].string.map { Data($0.utf8) }, deliveredAt: row["delivered_at"].double,
                        job: row["job"].string.flatMap(snapshot))
    }

    /// The job row a trigger wrote as a JSON object, read back as a job (nil if it does not read).
    private func snapshot(_ text: String) -> Job? {
        guard case .object(let fields)? = try? JSONValue.parse(Data(text.utf8)), fields["id"] != nil else { return nil }
        var columns: [String: Int] = [:]
        var values: [SQLValue] = []
        for (name, value) in fields {
            columns[name] = values.count
            switch value {
            case .null: values.append(.null)
            case .bool(let flag): values.append(.integer(flag ? 1 : 0))
            case .integer(let number): values.append(.integer(number))
            case .number(let number): values.append(.real(number))
            case .string(let text): values.append(.text(text))
            case .array, .object: values.append(.text(JobRows.json(value)))
            }
        }
        let required = ["state", "settings", "input_upload", "output_path", "output_size", "output_tracks", "output_files", "progress_time",
                        "progress_duration", "error_code", "error_message", "attempts", "priority", "created_at", "started_at", "finished_at",
                        "updated_at", "lease", "frames_encoded", "transcode_seconds", "lease_token", "lease_expires_at", "webhook_url",
                        "webhook_events", "webhook_disabled"]
        guard required.allSatisfy({ columns[$0] != nil }) else { return nil }
        return jobRows.job(Row(columns: columns, values: values))
    }
}
