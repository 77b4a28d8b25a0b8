import Foundation
import Locks
import Pipeline
@testable import Jobs
import Testing
import TestSupport

/// The libpq owner type against a real PostgreSQL server started for the test.
@Suite(.serialized) struct PostgresConnectionTests {
    /// An upload's row (a row is all a job needs here: no file is read), its id.
    private static func uploadRow(in store: PostgresJobStore, root: URL) throws -> String {
        let id = UUID().uuidString.lowercased()
        try store.insert(Upload(id: id, filename: "a.m4a", contentType: nil, size: 1, sha256: String(repeating: "0", count: 64),
                                path: root.appendingPathComponent("a.m4a").path,
                                tracks: try TranscodeSession.probe(path: try Media.path(.audioOnly)), createdAt: Date().timeIntervalSince1970))
        return id
    }

    @Test func valuesGoInAsParametersAndComeBackTyped() throws {
        let server = try PostgresServer()
        let connection = try PostgresConnection(uri: server.uri)
        #expect(connection.isConnected)
        try connection.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n BIGINT, x DOUBLE PRECISION, b BYTEA, f BOOLEAN, note TEXT)")
        // A value that would be SQL if it were spliced in stays a value.
        let hostile = "'); DROP TABLE t; --"
        try connection.query("INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6)",
                             [.text("a"), .integer(-9_007_199_254_740_993), .real(0.1 + 0.2), .blob(Data([0, 255, 10])), .integer(1), .text(hostile)])
        try connection.query("INSERT INTO t (id) VALUES ($1)", [.text("é😀")])
        let rows = try connection.query("SELECT * FROM t ORDER BY id")
        try #require(rows.count == 2)
        #expect(rows[0]["id"] == .text("a") && rows[0]["n"] == .integer(-9_007_199_254_740_993))
        #expect(rows[0]["x"] == .real(0.1 + 0.2), "a double comes back exactly (the server prints 15 digits unless asked)")
        #expect(rows[0]["b"] == .blob(Data([0, 255, 10])) && rows[0]["f"] == .integer(1) && rows[0]["note"] == .text(hostile))
        #expect(rows[1]["id"] == .text("é😀") && rows[1]["n"] == .null && rows[1]["b"] == .null)
    }

    /// The migrations run without the sessions' statement timeout: an index built over a large table, or the wait
    /// for another node's migration, outlasted it, the migration was cancelled and rolled back, and the node
    /// refused to start, each restart the same. Here another node holds the migrations' lock for 6 s against a
    /// timeout of 1 s.
    @Test func migrationsOutlastTheStatementTimeout() throws {
        let fixture = try StoreFixture(.postgres)
        let uri = try #require(fixture.uri)
        let database = try #require(uri.split(separator: "?").first?.split(separator: "/").last.map(String.init))
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        holder.arguments = ["psql", "-X", "-q", "-h", try PostgresServer.shared().directory, "-U", "postgres", "-d", database, "-c",
                            "SELECT pg_advisory_lock(\(PostgresMigrations.lockKey)); SELECT pg_sleep(6)"]
        try Shell.launch(holder)
        defer { holder.waitUntilExit() }
        let connection = try PostgresConnection(uri: uri)
        // That lock in this database (other tests' databases on the shared server take advisory locks of their own).
        let key = UInt64(bitPattern: PostgresMigrations.lockKey)
        #expect(try eventually(10) {
            try connection.query("""
                SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND classid::bigint = $1 AND objid::bigint = $2
                """, [.integer(Int64(key >> 32)), .integer(Int64(key & 0xFFFF_FFFF))]).first?["n"].int == 1
        }, "the other node holds the lock")
        try connection.execute("SET statement_timeout = '1s'")
        let started = Date()
        try PostgresMigrations.migrate(connection)
        #expect(Date().timeIntervalSince(started) > 2, "it waited for the other node")
    }

    /// A database whose step 2 ran as a release had it, before that step gained `uploads.source_url`,
    /// `webhook_deliveries.job` and `schedule_base`, is repaired by step 9: before, every upload row read crashed the
    /// node (a missing column is a precondition failure), and step 8's trigger, which fills `job`, failed every state
    /// change of a job with a webhook.
    @Test func aStepTwoRunBeforeItGainedItsColumnsIsRepaired() throws {
        let uri = try PostgresServer.shared().makeDatabase()
        let old = try PostgresConnection(uri: uri)
        try old.execute(PostgresMigrations.steps[0])
        try old.execute(Self.releasedStepTwo)
        try old.execute("""
            CREATE TABLE transcoderd_schema (version INTEGER NOT NULL);
            INSERT INTO transcoderd_schema (version) VALUES (1), (2);
            INSERT INTO uploads (id, filename, size, sha256, path, created_at) VALUES ('u', 'in.mov', 1, 'x', 'uploads/u', 1);
            INSERT INTO jobs (id, state, settings, input_upload, created_at, updated_at, webhook_url, webhook_events)
                VALUES ('j', 'queued', '{}', 'u', 1, 1, 'http://hooks.example/j', 'job.running,job.succeeded');
            """)
        let store = try PostgresJobStore(uri: uri, root: try Media.scratch().path)
        // Looked at first: without them the reads below stop the test process (a missing column is a precondition
        // failure), rather than fail.
        let columns = try old.query("""
            SELECT column_name::text AS name FROM information_schema.columns WHERE table_name IN ('uploads', 'webhook_deliveries')
            """).compactMap { $0["name"].string }
        try #require(["source_url", "job", "schedule_base"].allSatisfy(columns.contains), "\(columns)")
        #expect(try store.upload(id: "u")?.sourceURL == nil)
        let running = try #require(try store.claimNext(worker: "w", leaseSeconds: 20))
        #expect(running.id == "j")
        let claimed = try store.claimDeliveries(limit: 10, claimSeconds: 30)
        #expect(claimed.count == 1 && claimed.first?.event == "job.running" && claimed.first?.scheduleBase == 0
                && claimed.first?.job?.state == .running, "\(claimed)")
        #expect(try old.query("SELECT max(version) AS v FROM transcoderd_schema").first?["v"].int == PostgresMigrations.steps.count)
    }

    /// Step 2 as a release ran it (238f380), before it gained three columns.
    private static let releasedStepTwo = """
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
            delivered_at DOUBLE PRECISION
        );
        CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
        CREATE INDEX webhook_deliveries_job ON webhook_deliveries (job_id, seq);
        CREATE FUNCTION transcoderd_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.state IS DISTINCT FROM OLD.state AND NEW.state <> 'queued' THEN
                IF NEW.webhook_url IS NOT NULL AND NOT NEW.webhook_disabled
                    AND position(',job.' || NEW.state || ',' IN ',' || NEW.webhook_events || ',') > 0 THEN
                    INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at)
                    VALUES ('msg_' || replace(gen_random_uuid()::text, '-', ''), NEW.id, 'job.' || NEW.state, NEW.webhook_url,
                            'job', NEW.updated_at, NEW.updated_at);
                END IF;
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER jobs_webhooks AFTER UPDATE OF state ON jobs
            FOR EACH ROW EXECUTE FUNCTION transcoderd_webhooks();
        """

    /// A node may run as a role that only reads and writes the tables, the schema migrated by its owner (as managed
    /// databases have it): an up-to-date schema takes no DDL. Every start ran `CREATE TABLE IF NOT EXISTS`, which
    /// needs the CREATE privilege on the schema even for a table that is there, and such a node refused to start.
    @Test func aRoleThatOnlyReadsAndWritesTheTablesRunsANode() throws {
        let server = try PostgresServer.shared()
        let uri = try server.makeDatabase()
        let root = try Media.scratch()
        _ = try PostgresJobStore(uri: uri, root: root.path) // the owner migrates
        let role = "app_" + UUID().uuidString.prefix(8).lowercased()
        let grants = """
            CREATE ROLE \(role) LOGIN;
            REVOKE CREATE ON SCHEMA public FROM PUBLIC;
            GRANT USAGE ON SCHEMA public TO \(role);
            GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \(role);
            GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO \(role);
            """
        let owner = try PostgresConnection(uri: uri)
        try owner.execute(grants)
        let restricted = uri.replacingOccurrences(of: "user=postgres", with: "user=\(role)")
        #expect(restricted != uri)
        // The role really may not create anything: the check would pass for nothing otherwise.
        let probe = try PostgresConnection(uri: restricted)
        #expect { try probe.execute("CREATE TABLE IF NOT EXISTS transcoderd_schema (version INTEGER NOT NULL)") } throws: {
            ($0 as? StoreError)?.sqlState == "42501" // insufficient_privilege
        }
        let store = try PostgresJobStore(uri: restricted, root: root.path)
        let upload = try Self.uploadRow(in: store, root: root)
        let job = try store.createJob(input: upload, settings: TranscodeSettings())
        let claimed = try #require(try store.claimNext(worker: "w", leaseSeconds: 30))
        #expect(claimed.id == job.id && claimed.state == .running)
    }

    /// The schema installs and works where gen_random_uuid() (built in only from PostgreSQL 13) and md5() (refused
    /// by a server in FIPS mode) cannot be called: a role that may not execute them, on a database it owns, makes
    /// the store and claims a job with webhooks, whose trigger writes the deliveries. The trigger made its ids with
    /// gen_random_uuid(), so on 11 and 12 the schema installed and every claim of a job with a webhook failed (no job
    /// ran on any node), and a new store's identity came from md5().
    @Test func theSchemaNeedsNeitherGenRandomUUIDNorMD5() throws {
        let server = try PostgresServer()
        let name = "t_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        for sql in ["CREATE ROLE app LOGIN", "CREATE DATABASE \(name) OWNER app"] {
            try Shell.check("psql", ["-X", "-q", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c", sql])
        }
        try Shell.check("psql", ["-X", "-q", "-h", server.directory, "-U", "postgres", "-d", name, "-c",
                                 "REVOKE EXECUTE ON FUNCTION md5(text), gen_random_uuid() FROM PUBLIC"])
        let uri = "postgresql:///\(name)?host=\(server.directory)&user=app"
        let denied = try PostgresConnection(uri: uri)
        #expect(throws: StoreError.self, "the role may not call them") { try denied.query("SELECT gen_random_uuid()") }
        let root = try Media.scratch()
        let store = try PostgresJobStore(uri: uri, root: root.path, connections: 1)
        let id = try Self.uploadRow(in: store, root: root)
        let job = try store.createJob(input: id, settings: TranscodeSettings(), priority: 100,
                                      webhooks: JobWebhooks(target: WebhookTarget(url: "http://hooks.example/job", events: [.running]),
                                                            serverURL: "http://hooks.example/all"))
        #expect(try store.claimNext(worker: "w", leaseSeconds: 20)?.id == job.id)
        let written = try store.deliveries(jobID: job.id)
        #expect(written.count == 2 && Set(written.map(\.id)).count == 2
                && written.allSatisfy { $0.id.hasPrefix("msg_") && $0.id.count == 36 && $0.id.dropFirst(4).allSatisfy(\.isHexDigit) },
                "\(written.map(\.id))")
        let identity = try denied.query("SELECT id FROM store_identity").first?["id"]
        guard case .text(let text)? = identity else { Issue.record("no identity: \(String(describing: identity))"); return }
        #expect(text.count == 32 && text.allSatisfy(\.isHexDigit), "\(text)")
    }

    @Test func errorsKeepTheServersMessageAndSQLState() throws {
        let server = try PostgresServer()
        let connection = try PostgresConnection(uri: server.uri)
        try connection.execute("CREATE TABLE parent (id INT PRIMARY KEY); CREATE TABLE child (parent INT REFERENCES parent(id))")
        try connection.query("INSERT INTO parent VALUES ($1)", [.integer(1)])
        try connection.query("INSERT INTO child VALUES ($1)", [.integer(1)])
        do {
            try connection.query("INSERT INTO parent VALUES ($1)", [.integer(1)])
            Issue.record("a duplicate key was accepted")
        } catch {
            #expect(error.sqlState == "23505" && error.isConstraint && !error.isStillReferenced, "\(error)")
            #expect(error.code == "postgres_error" && error.message.contains("duplicate key value violates unique constraint"), "\(error)")
            #expect(error.sql == "INSERT INTO parent VALUES ($1)")
        }
        do {
            try connection.query("DELETE FROM parent WHERE id = $1", [.integer(1)])
            Issue.record("a referenced row was deleted")
        } catch {
            #expect(error.isStillReferenced && error.sqlState == "23503", "\(error)")
        }
        // A failed transaction is rolled back whole and its first error rethrown.
        do {
            _ = try connection.transaction { () throws(StoreError) -> Void in
                try connection.query("INSERT INTO parent VALUES ($1)", [.integer(2)])
                try connection.query("SELECT nonsense FROM parent")
            }
            Issue.record("the transaction did not fail")
        } catch {
            #expect(error.sqlState == "42703", "undefined column: \(error)")
        }
        // A transaction whose body caught a statement's error is not committed either.
        do {
            _ = try connection.transaction { () throws(StoreError) -> Void in
                try connection.query("INSERT INTO parent VALUES ($1)", [.integer(3)])
                _ = try? connection.query("SELECT nonsense FROM parent")
            }
            Issue.record("an aborted transaction was reported committed")
        } catch {
            #expect(error.sqlState == "25P02", "\(error)")
        }
        let count = try connection.query("SELECT count(*) AS n FROM parent")
        try #require(count.count == 1)
        #expect(count[0]["n"] == .integer(1), "only the first row is there")
    }

    @Test func aServerThatIsNotThereOrGoesAwaySaysSo() throws {
        do {
            _ = try PostgresConnection(uri: "postgresql://postgres:secret@127.0.0.1:1/postgres?connect_timeout=2")
            Issue.record("connected to nothing")
        } catch {
            #expect(error.code == "store_unavailable" && error.message.contains("Connection refused"), "\(error)")
            #expect(!error.message.contains("secret") && error.message.contains("postgresql://postgres@127.0.0.1:1/postgres"),
                    "the password stays out of the message: \(error)")
        }
        #expect(PostgresConnection.withoutPassword("postgresql://h:5432/db?application_name=a@b&password=secret")
                == "postgresql://h:5432/db?application_name=a@b&password=…")
        let server = try PostgresServer()
        let connection = try PostgresConnection(uri: server.uri)
        try server.stop()
        #expect(throws: StoreError.self, "the server is down") { _ = try PostgresConnection(uri: server.uri) }
        do {
            try connection.query("SELECT 1")
            Issue.record("a query ran on a stopped server")
        } catch {
            #expect(error.code == "store_unavailable", "\(error)")
        }
        #expect(!connection.isConnected)
        #expect(throws: StoreError.self, "a lost connection stays lost") { try connection.query("SELECT 1") }
        try server.start()
        let again = try PostgresConnection(uri: server.uri)
        let one = try again.query("SELECT 1 AS one")
        try #require(one.count == 1)
        #expect(one[0]["one"] == .integer(1))
    }

    /// A statement waits for a connection only when every one is busy: taken round-robin, a lease renewal waited
    /// behind a slow query on its slot (a metrics scrape's counts, a long listing) while another idled, and the
    /// lease could run out under a healthy job.
    @Test func aStatementTakesAFreeConnectionNotOneBusyWithASlowQuery() throws {
        let server = try PostgresServer.shared()
        let uri = try server.makeDatabase()
        let store = try PostgresJobStore(uri: uri, root: try Media.scratch().path, connections: 2)
        _ = try store.rows("SELECT 1", []) // connected before the clock starts (the second connection is made
                                           // when the slow statement holds the first: its cost is counted)
        let slow = Thread { _ = try? store.rows("SELECT pg_sleep(3) AS held_for_the_pool_test", []) }
        slow.start()
        // Until the slow statement holds its connection (asked apart from the pool).
        #expect(eventually(5) {
            let active = try? Shell.check("psql", ["-X", "-A", "-t", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c",
                                                   "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%held_for_the_pool_test%' AND state = 'active' AND pid <> pg_backend_pid()"])
            return active?.trimmingCharacters(in: .whitespacesAndNewlines) == "1"
        })
        var longest = 0.0
        for _ in 0..<4 {
            let started = Date()
            _ = try store.rows("SELECT 1", [])
            longest = max(longest, Date().timeIntervalSince(started))
        }
        #expect(longest < 1.5, "the longest quick statement waited \(longest) s")
    }

    /// A job whose insert committed but whose answer was lost with the link (a network or a failover cutting in
    /// between) is the job made, found by its id: the store answered `store_unavailable`, the API "try again", and a
    /// client that did made a second job beside the first, both run.
    @Test func aJobWhoseAnswerWasLostWithTheLinkIsFoundNotMadeTwice() throws {
        let server = try PostgresServer.shared()
        let uri = try server.makeDatabase()
        let root = try Media.scratch()
        let direct = try PostgresJobStore(uri: uri, root: root.path, connections: 1)
        let upload = try Self.uploadRow(in: direct, root: root)
        let proxy = try PostgresCutProxy(server: server, trigger: "INSERT INTO jobs")
        let store = try PostgresJobStore(uri: proxy.proxied(uri, server: server), root: root.path, connections: 2)
        let job = try store.createJob(input: upload, settings: TranscodeSettings())
        #expect(proxy.hasCut, "the answer to the insert was lost")
        let stored = try direct.jobs(state: nil, limit: 10, cursor: nil).jobs
        #expect(stored.map(\.id) == [job.id] && job.state == .queued, "\(stored.map(\.id)) against \(job.id)")
    }

    /// An upload's row whose insert committed but whose answer was lost is stored, as a job's is: the store said
    /// `store_unavailable`, the server removed the upload's file, and the row stayed without it.
    @Test func anUploadWhoseAnswerWasLostWithTheLinkIsStored() throws {
        let server = try PostgresServer.shared()
        let uri = try server.makeDatabase()
        let root = try Media.scratch()
        let direct = try PostgresJobStore(uri: uri, root: root.path, connections: 1)
        let proxy = try PostgresCutProxy(server: server, trigger: "INSERT INTO uploads")
        let store = try PostgresJobStore(uri: proxy.proxied(uri, server: server), root: root.path, connections: 2)
        let id = try Self.uploadRow(in: store, root: root)
        #expect(proxy.hasCut, "the answer to the insert was lost")
        #expect(try direct.upload(id: id)?.id == id)
    }

    /// A look for a job whose insert lost its answer stops at the first look that fails: the store is away, and
    /// each look would hold the request as long again (30 s more in a partition).
    @Test func theLookForALostAnswersJobStopsAtAFailingLook() {
        let looks = LockedValue(0)
        let found: Int? = PostgresJobStore.madeDespite { () throws(StoreError) -> Int? in
            looks.withLock { $0 += 1 }
            throw StoreError(code: "store_unavailable", message: "away")
        }
        #expect(found == nil && looks.withLock { $0 } == 1)
        let later: Int? = PostgresJobStore.madeDespite { () throws(StoreError) -> Int? in
            looks.withLock { $0 += 1 }
            return looks.withLock { $0 } == 3 ? 7 : nil
        }
        #expect(later == 7, "not there at first, then found (a statement still committing)")
    }

    /// With every connection busy, a statement takes the first one let go, not the one its turn named: two quick
    /// statements asked while one connection ran a 20 s statement and the other one held until the test lets it go,
    /// and the one whose turn named the long one waited for it (a lease renewal waiting out a 60 s statement while
    /// another slot was free).
    @Test func withEveryConnectionBusyAStatementTakesTheFirstLetGo() throws {
        let server = try PostgresServer.shared()
        let uri = try server.makeDatabase()
        let store = try PostgresJobStore(uri: uri, root: try Media.scratch().path, connections: 2)
        _ = try store.rows("SELECT 1", [])
        // The short one waits on a lock this connection (apart from the pool) holds until the quick ones are asked.
        let holder = try PostgresConnection(uri: uri)
        try holder.query("SELECT pg_advisory_lock(4242)")
        for statement in ["SELECT pg_sleep(20)", "SELECT pg_advisory_xact_lock(4242)"] {
            Thread { _ = try? store.rows(statement + " AS held_by_the_pool_test", []) }.start()
        }
        #expect(eventually(10) {
            let active = try? Shell.check("psql", ["-X", "-A", "-t", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c",
                                                   "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%held_by_the_pool_test%' "
                                                   + "AND state = 'active' AND pid <> pg_backend_pid()"])
            return active?.trimmingCharacters(in: .whitespacesAndNewlines) == "2"
        })
        let waits = LockedValue<[Double]>([])
        let done = DispatchGroup()
        for _ in 0..<2 {
            done.enter()
            Thread {
                let started = Date()
                let answered = (try? store.rows("SELECT 1", [])) != nil
                // One refused at once is no quick answer.
                waits.withLock { $0.append(answered ? Date().timeIntervalSince(started) : 99) }
                done.leave()
            }.start()
        }
        usleep(300_000) // both asked, every connection busy
        try holder.query("SELECT pg_advisory_unlock(4242)")
        #expect(done.wait(timeout: .now() + 15) == .success)
        let longest = waits.withLock { $0.max() ?? 99 }
        #expect(longest < 8, "the longest quick statement waited \(longest) s (the long one takes 20)")
    }

    /// A server that no longer takes writes (a failover's old primary back as a standby; here the database made
    /// read-only and its sessions ended) is not connected to, nor kept: once it takes writes again, they succeed.
    /// The store connected to it and kept that connection, every write failing after the server was writable again,
    /// and its ping (`/readyz`) answered all along.
    @Test func aServerThatTakesNoWritesIsNotKept() throws {
        let server = try PostgresServer.shared()
        let uri = try server.makeDatabase()
        let name = try #require(uri.split(separator: "?").first?.split(separator: "/").last)
        let store = try PostgresJobStore(uri: uri, root: try Media.scratch().path, connections: 1)
        let write = "UPDATE jobs SET state = state WHERE false"
        _ = try store.rows(write, [])
        func admin(_ statement: String) throws {
            try Shell.check("psql", ["-X", "-q", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c", statement])
        }
        try admin("ALTER DATABASE \(name) SET default_transaction_read_only = on")
        try admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(name)'")
        for _ in 0..<3 { #expect(throws: StoreError.self) { _ = try store.rows(write, []) } }
        #expect(throws: StoreError.self, "not ready") { try store.ping() }
        try admin("ALTER DATABASE \(name) RESET default_transaction_read_only")
        #expect(eventually(10) { (try? store.rows(write, [])) != nil }, "writes succeed once the server takes them")
    }

    /// A server that turns read-only under a connection (here by its configuration, reloaded) makes the store
    /// replace that connection, and it is not ready until the server takes writes again: its ping answered all along.
    @Test func aConnectionWhoseServerTurnsReadOnlyIsReplaced() throws {
        let server = try PostgresServer() // its own: the setting is the whole server's
        let uri = try server.makeDatabase()
        let store = try PostgresJobStore(uri: uri, root: try Media.scratch().path, connections: 1)
        let write = "UPDATE jobs SET state = state WHERE false"
        _ = try store.rows(write, [])
        func configure(_ statement: String) throws {
            for sql in [statement, "SELECT pg_reload_conf()"] {
                try Shell.check("psql", ["-X", "-q", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c", sql])
            }
        }
        try configure("ALTER SYSTEM SET default_transaction_read_only = on")
        #expect(eventually(5) { (try? store.rows(write, [])) == nil })
        #expect(throws: StoreError.self, "not ready") { try store.ping() }
        try configure("ALTER SYSTEM RESET default_transaction_read_only")
        #expect(eventually(10) { (try? store.rows(write, [])) != nil }, "writes succeed once the server takes them")
    }

    /// A call goes to a connection that is up before a free slot that has none: one the database refuses (here at
    /// its limit for the role; after a restart, one still waiting out its backoff) failed every call that landed on
    /// it, every other one, while a connection served.
    @Test func aCallGoesToAConnectionThatIsUpBeforeASlotWithout() throws {
        let server = try PostgresServer()
        for statement in ["CREATE ROLE app LOGIN CONNECTION LIMIT 1", "CREATE DATABASE app OWNER app"] {
            try Shell.check("psql", ["-X", "-q", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c", statement])
        }
        let uri = "postgresql:///app?host=\(server.directory)&user=app"
        let store = try PostgresJobStore(uri: uri, root: try Media.scratch().path, connections: 2)
        #expect(throws: StoreError.self, "the role's one connection is the store's") { _ = try PostgresConnection(uri: uri) }
        var failures: [String] = []
        for _ in 0..<10 {
            do { _ = try store.rows("SELECT 1", []) } catch { failures.append(error.description) }
        }
        #expect(failures.isEmpty, "\(failures)")
        // With the one connection busy, a call waits for it: it failed at once on the slot the database refused
        // (15 % of a node's reads under three clients, lease renewals among them).
        let slow = LockedValue<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        NamedThread.start("slow query") {
            do { _ = try store.rows("SELECT pg_sleep(2)", []) } catch { slow.withLock { $0 = "\(error)" } }
            done.signal()
        }
        let activity = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND query LIKE 'SELECT pg_sleep%' AND state = 'active'"
        let running = eventually(10) {
            (try? Shell.check("psql", ["-X", "-q", "-t", "-A", "-h", server.directory, "-U", "postgres", "-d", "postgres", "-c", activity]))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == "1"
        }
        try #require(running, "the slow query holds the connection")
        var waited: String?
        do { _ = try store.rows("SELECT 1", []) } catch { waited = error.description }
        #expect(waited == nil, "a call while the one connection was busy: \(waited ?? "")")
        done.wait()
        #expect(slow.withLock { $0 } == nil)
    }
}
