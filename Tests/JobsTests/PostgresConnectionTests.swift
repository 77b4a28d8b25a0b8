import Foundation
@testable import Jobs
import Testing
import TestSupport

/// The libpq owner type against a real PostgreSQL server started for the test.
@Suite(.serialized) struct PostgresConnectionTests {
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

    /// The schema's functions call nothing that PostgreSQL 11 and 12 lack (its steps need 11's `EXECUTE FUNCTION`),
    /// nor md5(), which a server in FIPS mode refuses: the webhook trigger made its delivery ids with
    /// gen_random_uuid(), built in only from 13, so there the schema installed and every claim of a job with a
    /// webhook then failed, and no job ran on any node.
    @Test func theSchemaCallsNothingPostgreSQL11Lacks() throws {
        let server = try PostgresServer()
        _ = try PostgresJobStore(uri: server.uri, root: try Media.scratch().path, connections: 1)
        let connection = try PostgresConnection(uri: server.uri)
        let functions = try connection.query("SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'transcoderd%' ORDER BY proname")
        #expect(functions.count >= 3, "\(functions)")
        for function in functions {
            guard case .text(let source) = function["prosrc"] else { Issue.record("\(function)"); continue }
            #expect(!source.contains("gen_random_uuid") && !source.contains("md5("), "\(function["proname"])")
        }
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
    }
}
