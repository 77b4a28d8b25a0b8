/// The schema, as numbered steps applied in order and recorded in `PRAGMA user_version`.
enum Migrations {
    /// The message of the state machine trigger's refusal, which `JobStore` turns into `invalid_transition`.
    static let invalidTransition = "invalid job state transition"

    /// Step n (1-based) brings the schema from version n-1 to n.
    static let steps: [String] = [
        """
        CREATE TABLE uploads (
            id TEXT PRIMARY KEY,
            filename TEXT NOT NULL,
            content_type TEXT,
            size INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            path TEXT NOT NULL,
            tracks TEXT,
            created_at REAL NOT NULL
        );
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
            settings TEXT NOT NULL,
            input_upload TEXT NOT NULL REFERENCES uploads(id),
            output_path TEXT,
            output_size INTEGER,
            output_tracks TEXT,
            progress_time REAL NOT NULL DEFAULT 0,
            progress_duration REAL NOT NULL DEFAULT 0,
            error_code TEXT,
            error_message TEXT,
            attempts INTEGER NOT NULL DEFAULT 1,
            priority INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            updated_at REAL NOT NULL,
            lease TEXT
        );
        CREATE INDEX jobs_queue ON jobs (state, priority DESC, created_at);
        CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
        CREATE INDEX jobs_input ON jobs (input_upload);
        -- The store refuses any state change outside the job state machine (staying put included), whoever
        -- issues the UPDATE. running → queued is recovery: the process died or stopped before the job ended.
        CREATE TRIGGER jobs_state_machine BEFORE UPDATE OF state ON jobs
        WHEN NOT (
            (OLD.state = 'queued' AND NEW.state IN ('running', 'canceled')) OR
            (OLD.state = 'running' AND NEW.state IN ('succeeded', 'failed', 'canceled', 'queued'))
        )
        BEGIN
            SELECT RAISE(ABORT, 'invalid job state transition');
        END;
        """,
        // Frames and seconds of a successful transcode, so a finished job still reports its rates.
        """
        ALTER TABLE jobs ADD COLUMN frames_encoded INTEGER;
        ALTER TABLE jobs ADD COLUMN transcode_seconds REAL;
        """,
        // The watermark image a job's settings name, as a reference the database keeps: such an upload cannot be
        // deleted (by the API or by retention) while a job refers to it, as for an input.
        """
        ALTER TABLE jobs ADD COLUMN watermark_upload TEXT REFERENCES uploads(id);
        UPDATE jobs SET watermark_upload = json_extract(settings, '$.filters.video.watermark.upload')
        WHERE json_valid(settings) AND json_extract(settings, '$.filters.video.watermark.upload') IN (SELECT id FROM uploads);
        CREATE INDEX jobs_watermark ON jobs (watermark_upload) WHERE watermark_upload IS NOT NULL;
        """,
        // 4: every file of a job's output folder (a ladder's playlists and segments, thumbnails), as JSON.
        """
        ALTER TABLE jobs ADD COLUMN output_files TEXT;
        """,
        // 5: leases. The fencing number of the latest claim, when the claim runs out unless renewed, and a request
        // to stop the job for whichever worker runs it.
        """
        ALTER TABLE jobs ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE jobs ADD COLUMN lease_expires_at REAL;
        ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
        """,
        // 6: inputs by URL (an upload row waits, without bytes, for a worker to fetch them) and webhooks. A job's own webhook (URL and the events it wants) and the server-wide URL of the node that
        // accepted it; every state change a webhook wants adds a delivery row in the same transaction (a trigger:
        // the outbox), which a dispatcher sends at least once, in order per job and URL.
        """
        ALTER TABLE uploads ADD COLUMN source_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_events TEXT;
        ALTER TABLE jobs ADD COLUMN server_webhook_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_disabled INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE webhook_deliveries (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            job_id TEXT NOT NULL,
            event TEXT NOT NULL,
            url TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('job', 'server')),
            created_at REAL NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed', 'disabled')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            claimed_until REAL,
            last_status INTEGER,
            last_error TEXT,
            payload TEXT,
            delivered_at REAL,
            -- The job's row as the state change left it: the payload shows the job as it was at the event.
            job TEXT NOT NULL,
            -- Attempts before the latest redelivery: the retry schedule counts from there.
            schedule_base INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
        CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id, seq);
        \(webhookTrigger)
        """,
        // For stores that grow: the job list filtered by state (newest first, without sorting every job of that
        // state), retention by finish time, and unused uploads by age.
        """
        CREATE INDEX jobs_state_created ON jobs (state, created_at DESC, id DESC);
        CREATE INDEX jobs_finished ON jobs (finished_at);
        CREATE INDEX uploads_created ON uploads (created_at);
        """,
        // The store's identity, written into the data directory it works on (`DataDirectory.claim`): a start of a
        // store on a folder another store's files are in refuses, instead of sweeping them all as strays.
        """
        CREATE TABLE store_identity (singleton INTEGER PRIMARY KEY CHECK (singleton = 1), id TEXT NOT NULL);
        INSERT INTO store_identity (singleton, id) VALUES (1, lower(hex(randomblob(16))));
        """,
        // The deliveries counted by state (`/metrics`, every scrape) from an index, not a scan of every row: rows
        // keep their bodies and stay as long as their jobs, and the scan held the store's one connection.
        """
        CREATE INDEX webhook_deliveries_state ON webhook_deliveries (state);
        """,
        // 10: step 6 as it is now, for a database step 6 made before it was last changed (it gained
        // `uploads.source_url`, `webhook_deliveries.job` and `schedule_base`, and a new trigger, after a release had
        // run it): the columns missing are added first (`repairs`), then the trigger is made again.
        """
        DROP TRIGGER IF EXISTS jobs_webhooks;
        \(webhookTrigger)
        """,
    ]

    /// Columns a step adds first where they are missing (SQLite's ADD COLUMN has no IF NOT EXISTS): by step number,
    /// table, column and its definition.
    static let repairs: [Int: [(table: String, column: String, definition: String)]] = [
        10: [("uploads", "source_url", "TEXT"),
             ("webhook_deliveries", "job", "TEXT NOT NULL DEFAULT '{}'"),
             ("webhook_deliveries", "schedule_base", "INTEGER NOT NULL DEFAULT 0")],
    ]

    /// Every state change a webhook wants adds a delivery row in the same transaction (the outbox), with the job row
    /// as JSON.
    private static let webhookTrigger = """
        CREATE TRIGGER jobs_webhooks AFTER UPDATE OF state ON jobs
        WHEN NEW.state <> OLD.state AND NEW.state <> 'queued'
        BEGIN
            -- One row per URL that wants the event (the job's own first), each with the job row as JSON.
            INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at, job)
            SELECT 'msg_' || lower(hex(randomblob(16))), NEW.id, 'job.' || NEW.state, target.url, target.scope,
                NEW.updated_at, NEW.updated_at, json_object(
                    'id', NEW.id, 'state', NEW.state, 'settings', NEW.settings, 'input_upload', NEW.input_upload,
                    'watermark_upload', NEW.watermark_upload, 'output_path', NEW.output_path, 'output_size', NEW.output_size, 'output_tracks', NEW.output_tracks,
                    'output_files', NEW.output_files, 'progress_time', NEW.progress_time, 'progress_duration', NEW.progress_duration, 'error_code', NEW.error_code,
                    'error_message', NEW.error_message, 'attempts', NEW.attempts, 'priority', NEW.priority, 'created_at', NEW.created_at,
                    'started_at', NEW.started_at, 'finished_at', NEW.finished_at, 'updated_at', NEW.updated_at, 'lease', NEW.lease,
                    'lease_token', NEW.lease_token, 'lease_expires_at', NEW.lease_expires_at, 'cancel_requested', NEW.cancel_requested, 'frames_encoded', NEW.frames_encoded,
                    'transcode_seconds', NEW.transcode_seconds, 'webhook_url', NEW.webhook_url, 'webhook_events', NEW.webhook_events, 'server_webhook_url', NEW.server_webhook_url,
                    'webhook_disabled', NEW.webhook_disabled)
            FROM (
                SELECT 1 AS rank, NEW.webhook_url AS url, 'job' AS scope
                WHERE NEW.webhook_url IS NOT NULL AND NEW.webhook_disabled = 0
                    AND instr(',' || NEW.webhook_events || ',', ',job.' || NEW.state || ',') > 0
                UNION ALL
                SELECT 2, NEW.server_webhook_url, 'server' WHERE NEW.server_webhook_url IS NOT NULL
            ) AS target
            ORDER BY target.rank;
        END;
        """

    /// Applies the steps the database has not seen yet, each in its own transaction; returns the version it had.
    @discardableResult
    static func migrate(_ database: Database) throws(StoreError) -> Int {
        let version = try database.query("PRAGMA user_version").first?["user_version"].int ?? 0
        guard version <= steps.count else {
            throw StoreError(code: "schema_too_new",
                             message: "The database has schema version \(version); this transcoderd knows up to \(steps.count).")
        }
        for (index, step) in steps.enumerated().dropFirst(version) {
            try database.transaction { () throws(StoreError) in
                for repair in repairs[index + 1] ?? [] {
                    let present = try database.query("SELECT 1 FROM pragma_table_info('\(repair.table)') WHERE name = '\(repair.column)'")
                    if present.isEmpty {
                        try database.execute("ALTER TABLE \(repair.table) ADD COLUMN \(repair.column) \(repair.definition)")
                    }
                }
                try database.execute(step)
                try database.execute("PRAGMA user_version = \(index + 1)")
            }
        }
        return version
    }
}
