/// The PostgreSQL schema, as numbered steps applied in order and recorded in `transcoderd_schema`. Nodes starting
/// at once take turns (a transaction-scoped advisory lock), so a step is applied exactly once.
enum PostgresMigrations {
    /// Key of the advisory lock migrations hold (any number no other lock of ours uses).
    static let lockKey: Int64 = 0x7472_616e_7363_6f64 // "transcod"

    static let steps: [String] = [
        """
        CREATE TABLE uploads (
            id TEXT PRIMARY KEY,
            filename TEXT NOT NULL,
            content_type TEXT,
            size BIGINT NOT NULL,
            sha256 TEXT NOT NULL,
            path TEXT NOT NULL,
            tracks TEXT,
            created_at DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
            settings TEXT NOT NULL,
            input_upload TEXT NOT NULL REFERENCES uploads(id),
            watermark_upload TEXT REFERENCES uploads(id),
            output_path TEXT,
            output_size BIGINT,
            output_tracks TEXT,
            output_files TEXT,
            progress_time DOUBLE PRECISION NOT NULL DEFAULT 0,
            progress_duration DOUBLE PRECISION NOT NULL DEFAULT 0,
            error_code TEXT,
            error_message TEXT,
            attempts INTEGER NOT NULL DEFAULT 1,
            priority INTEGER NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            finished_at DOUBLE PRECISION,
            updated_at DOUBLE PRECISION NOT NULL,
            lease TEXT,
            lease_token INTEGER NOT NULL DEFAULT 0,
            lease_expires_at DOUBLE PRECISION,
            cancel_requested BOOLEAN NOT NULL DEFAULT false,
            frames_encoded BIGINT,
            transcode_seconds DOUBLE PRECISION
        );
        CREATE INDEX jobs_queue ON jobs (priority DESC, created_at, id) WHERE state = 'queued';
        CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
        CREATE INDEX jobs_input ON jobs (input_upload);
        CREATE INDEX jobs_watermark ON jobs (watermark_upload) WHERE watermark_upload IS NOT NULL;
        CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE state = 'running';
        CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('succeeded', 'failed', 'canceled');

        -- The store refuses any state change outside the job state machine (staying put included), whoever issues
        -- the UPDATE, as SQLite's trigger does. running → queued is recovery: the worker died or gave the job back.
        CREATE FUNCTION transcoderd_state_machine() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT ((OLD.state = 'queued' AND NEW.state IN ('running', 'canceled')) OR
                    (OLD.state = 'running' AND NEW.state IN ('succeeded', 'failed', 'canceled', 'queued'))) THEN
                RAISE EXCEPTION 'invalid job state transition: % to %', OLD.state, NEW.state USING ERRCODE = 'check_violation';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER jobs_state_machine BEFORE UPDATE OF state ON jobs
            FOR EACH ROW EXECUTE FUNCTION transcoderd_state_machine();

        -- Every node hears of changes through NOTIFY, the payload only the job's id (payloads are capped at
        -- 8000 bytes): a queued job wakes idle workers, a change reaches API nodes' live streams, a cancel request
        -- the worker running the job. Sent at commit, so nobody hears of a change it cannot read yet.
        CREATE FUNCTION transcoderd_announce() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
                IF NEW.state = 'queued' THEN PERFORM pg_notify('transcoderd_queued', NEW.id); END IF;
                PERFORM pg_notify('transcoderd_changed', NEW.id);
            ELSIF NEW.progress_time IS DISTINCT FROM OLD.progress_time THEN
                PERFORM pg_notify('transcoderd_changed', NEW.id);
            END IF;
            IF TG_OP = 'UPDATE' AND NEW.cancel_requested AND NOT OLD.cancel_requested THEN
                PERFORM pg_notify('transcoderd_cancel', NEW.id);
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER jobs_announce AFTER INSERT OR UPDATE ON jobs
            FOR EACH ROW EXECUTE FUNCTION transcoderd_announce();
        """,
        // 2: inputs by URL and webhooks, as in SQLite's step 6: the job's own webhook and the accepting node's
        // server-wide URL, and a delivery row (with the job's row as JSON) added by a trigger in the transaction of
        // every state change a webhook wants (the outbox).
        """
        ALTER TABLE uploads ADD COLUMN source_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_events TEXT;
        ALTER TABLE jobs ADD COLUMN server_webhook_url TEXT;
        ALTER TABLE jobs ADD COLUMN webhook_disabled BOOLEAN NOT NULL DEFAULT false;
        CREATE TABLE webhook_deliveries (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            job_id TEXT NOT NULL,
            event TEXT NOT NULL,
            url TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('job', 'server')),
            created_at DOUBLE PRECISION NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed', 'disabled')),
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at DOUBLE PRECISION NOT NULL,
            claimed_until DOUBLE PRECISION,
            last_status INTEGER,
            last_error TEXT,
            payload TEXT,
            delivered_at DOUBLE PRECISION,
            job TEXT NOT NULL,
            schedule_base INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
        CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id, seq);
        CREATE FUNCTION transcoderd_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.state IS DISTINCT FROM OLD.state AND NEW.state <> 'queued' THEN
                IF NEW.webhook_url IS NOT NULL AND NOT NEW.webhook_disabled
                    AND position(',job.' || NEW.state || ',' IN ',' || NEW.webhook_events || ',') > 0 THEN
                    INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at, job)
                    VALUES ('msg_' || replace(gen_random_uuid()::text, '-', ''), NEW.id, 'job.' || NEW.state, NEW.webhook_url,
                            'job', NEW.updated_at, NEW.updated_at, row_to_json(NEW)::text);
                END IF;
                IF NEW.server_webhook_url IS NOT NULL THEN
                    INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at, job)
                    VALUES ('msg_' || replace(gen_random_uuid()::text, '-', ''), NEW.id, 'job.' || NEW.state,
                            NEW.server_webhook_url, 'server', NEW.updated_at, NEW.updated_at, row_to_json(NEW)::text);
                END IF;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER jobs_webhooks AFTER UPDATE OF state ON jobs
            FOR EACH ROW EXECUTE FUNCTION transcoderd_webhooks();
        """,
        // For stores that grow: the job list filtered by state (newest first), unused uploads by age.
        """
        CREATE INDEX jobs_state_created ON jobs (state, created_at DESC, id DESC);
        CREATE INDEX uploads_created ON uploads (created_at);
        """,
        // Saved progress is announced on a channel of its own: only live streams care, while a change of state
        // also wakes every node's webhook senders (its deliveries are written with it), which progress did, once
        // per running job and second on every node.
        """
        CREATE OR REPLACE FUNCTION transcoderd_announce() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' OR NEW.state IS DISTINCT FROM OLD.state THEN
                IF NEW.state = 'queued' THEN PERFORM pg_notify('transcoderd_queued', NEW.id); END IF;
                PERFORM pg_notify('transcoderd_changed', NEW.id);
            ELSIF NEW.progress_time IS DISTINCT FROM OLD.progress_time THEN
                PERFORM pg_notify('transcoderd_progress', NEW.id);
            END IF;
            IF TG_OP = 'UPDATE' AND NEW.cancel_requested AND NOT OLD.cancel_requested THEN
                PERFORM pg_notify('transcoderd_cancel', NEW.id);
            END IF;
            RETURN NULL;
        END $$;
        """,
        // 5: a running job sent back to the queue (a retry after a crash, a requeue at shutdown, a lease that ran
        // out) while a cancel was asked for is canceled instead. The request lives in the row only until the next
        // claim clears it, and the node that ran the job may record its end before it hears the request's NOTIFY:
        // then only that notice carried the cancel, and a node that missed it ran the job again. Row locks order a
        // request and a requeue: whichever commits second sees the other. Named to fire before the state machine's
        // trigger (alphabetical order), which allows running → canceled.
        """
        CREATE FUNCTION transcoderd_requeue_honours_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.state = 'running' AND NEW.state = 'queued' AND OLD.cancel_requested THEN
                NEW.state := 'canceled';
                NEW.error_code := 'canceled';
                NEW.error_message := 'The job was canceled.';
                NEW.lease := NULL;
                NEW.attempts := OLD.attempts;
                NEW.started_at := OLD.started_at;
                NEW.progress_time := OLD.progress_time;
                NEW.finished_at := extract(epoch from clock_timestamp())::double precision;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER jobs_cancel_requested BEFORE UPDATE OF state ON jobs
            FOR EACH ROW EXECUTE FUNCTION transcoderd_requeue_honours_cancel();
        """,
        // 6: the store's identity, written into the data directory its nodes share (`DataDirectory.claim`).
        """
        CREATE TABLE store_identity (singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton), id TEXT NOT NULL);
        INSERT INTO store_identity (id) VALUES (
            (SELECT string_agg(lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0'), '') FROM generate_series(1, 4)));
        """,
        // 7: the deliveries counted by state (`/metrics`) from an index, not a scan of every row and its body.
        """
        CREATE INDEX webhook_deliveries_state ON webhook_deliveries (state);
        """,
        // 8: delivery ids made without gen_random_uuid(), built in only from PostgreSQL 13: on 11 and 12 the schema
        // installed, and then every claim of a job with a webhook failed in the trigger, so no job ran on any node.
        // Nor with md5(), which a server in FIPS mode refuses (from 14): 32 hex digits of random() instead.
        """
        CREATE FUNCTION transcoderd_random_hex() RETURNS text LANGUAGE sql VOLATILE AS $$
            SELECT string_agg(lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0'), '') FROM generate_series(1, 4)
        $$;
        CREATE OR REPLACE FUNCTION transcoderd_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.state IS DISTINCT FROM OLD.state AND NEW.state <> 'queued' THEN
                IF NEW.webhook_url IS NOT NULL AND NOT NEW.webhook_disabled
                    AND position(',job.' || NEW.state || ',' IN ',' || NEW.webhook_events || ',') > 0 THEN
                    INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at, job)
                    VALUES ('msg_' || transcoderd_random_hex(), NEW.id, 'job.' || NEW.state,
                            NEW.webhook_url, 'job', NEW.updated_at, NEW.updated_at, row_to_json(NEW)::text);
                END IF;
                IF NEW.server_webhook_url IS NOT NULL THEN
                    INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at, job)
                    VALUES ('msg_' || transcoderd_random_hex(), NEW.id, 'job.' || NEW.state,
                            NEW.server_webhook_url, 'server', NEW.updated_at, NEW.updated_at, row_to_json(NEW)::text);
                END IF;
            END IF;
            RETURN NULL;
        END $$;
        """,
        // 9: step 2 as it is now, for a database step 2 made before it was last changed (it gained
        // `uploads.source_url`, `webhook_deliveries.job` and `schedule_base` after a release had run it): without
        // them every upload and delivery read failed, and step 8's trigger every state change of a job with a webhook.
        """
        ALTER TABLE uploads ADD COLUMN IF NOT EXISTS source_url TEXT;
        ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS job TEXT NOT NULL DEFAULT '{}';
        ALTER TABLE webhook_deliveries ALTER COLUMN job DROP DEFAULT;
        ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS schedule_base INTEGER NOT NULL DEFAULT 0;
        """,
    ]

    /// Applies the steps the database has not seen yet, all in one transaction (a node that dies half-way leaves
    /// the schema as it was), under an advisory lock that nodes starting at once wait for. Without the sessions'
    /// statement timeout (60 s): an index built over a large table, or the wait for another node's migration,
    /// took longer, was cancelled and rolled back, and the node refused to start, each restart the same.
    /// A schema already up to date takes no DDL at all: a role that may only read and write the tables (a
    /// migration owner apart, as managed databases have it) can run a node. `CREATE TABLE IF NOT EXISTS` of the
    /// version table needs the CREATE privilege on the schema even when the table is there (PostgreSQL 15 no longer
    /// gives it to everyone on `public`): such a node refused to start.
    static func migrate(_ connection: PostgresConnection) throws(StoreError) {
        try connection.transaction { () throws(StoreError) in
            try connection.execute("SET LOCAL statement_timeout = 0")
            try connection.query("SELECT pg_advisory_xact_lock($1)", [.integer(lockKey)])
            let table = try connection.query("SELECT to_regclass('transcoderd_schema') IS NOT NULL AS present").first?["present"].int
            if table != 1 {
                try connection.execute("CREATE TABLE IF NOT EXISTS transcoderd_schema (version INTEGER NOT NULL)")
            }
            let version = try connection.query("SELECT max(version) AS v FROM transcoderd_schema").first?["v"].int ?? 0
            guard version <= steps.count else {
                throw StoreError(code: "schema_too_new",
                                 message: "The database has schema version \(version); this transcoderd knows up to \(steps.count).")
            }
            for (index, step) in steps.enumerated().dropFirst(version) {
                try connection.execute(step)
                try connection.query("INSERT INTO transcoderd_schema (version) VALUES ($1)", [.integer(Int64(index + 1))])
            }
        }
    }
}
