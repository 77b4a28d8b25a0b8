import CSQLite
import Foundation

/// Owns one SQLite connection (`sqlite3*`); closed in `deinit`.
///
/// Not Sendable: a connection is confined to one thread at a time; `JobStore` keeps it behind a mutex.
final class Database {
    fileprivate(set) var handle: OpaquePointer?
    let path: String
    /// Prepared statements by SQL text. SQL must not carry values in its text (bind them): every distinct text is
    /// a statement kept here. As a backstop, the cache is emptied once it holds `maxCachedStatements`.
    private var statements: [String: Statement] = [:]
    static let maxCachedStatements = 512

    /// Statements held prepared now.
    var cachedStatements: Int { statements.count }

    /// Opens (creating if needed) the database at `path`, in WAL mode with `synchronous=FULL` and a busy timeout.
    init(path: String, busyTimeout: Duration = .seconds(5)) throws(StoreError) {
        self.path = path
        // A new file is the owner's alone (its journals take its mode): it holds webhook and input URLs whose
        // secrets the API shows as REDACTED. `:memory:` and existing files are left as they are.
        if path != ":memory:" {
            let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if descriptor >= 0 { close(descriptor) }
        }
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &handle, flags, nil)
        guard result == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw StoreError(code: "store_unavailable", message: "Opening the database \(path) failed: \(message)", resultCode: result)
        }
        self.handle = handle
        sqlite3_extended_result_codes(handle, 1)
        let milliseconds = Int32(busyTimeout.components.seconds * 1000)
        sqlite3_busy_timeout(handle, milliseconds)
        // WAL lets readers run beside the one writer; FULL syncs the WAL on every commit, so a job the API has
        // acknowledged survives a power cut, not only a crash of the process (NORMAL would only promise the latter).
        try execute("PRAGMA journal_mode = WAL")
        try execute("PRAGMA synchronous = FULL")
        try execute("PRAGMA foreign_keys = ON")
    }

    /// Runs one or more statements that return nothing of interest.
    func execute(_ sql: String) throws(StoreError) {
        let result = sqlite3_exec(handle, sql, nil, nil, nil)
        guard result == SQLITE_OK else { throw error(result, sql: sql) }
    }

    /// Runs `sql` with `arguments` through a cached prepared statement and returns the rows.
    @discardableResult
    func query(_ sql: String, _ arguments: [SQLValue] = []) throws(StoreError) -> [Row] {
        let statement: Statement
        if let cached = statements[sql] {
            statement = cached
        } else {
            statement = try Statement(database: self, sql: sql)
            if statements.count >= Self.maxCachedStatements { statements.removeAll() }
            statements[sql] = statement
        }
        return try statement.rows(arguments)
    }

    /// Runs `body` in a write transaction (`BEGIN IMMEDIATE`): committed if it returns, rolled back if it throws.
    /// The first error is the one rethrown, even when the rollback fails too.
    func transaction<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try execute("BEGIN IMMEDIATE")
        let value: T
        do {
            value = try body()
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
        do {
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
        return value
    }

    /// Rows inserted, updated or deleted through this connection since it opened (triggers included): grows with
    /// every write, so an unchanged count means nothing was written.
    var totalChanges: Int64 { sqlite3_total_changes64(handle) }

    /// Builds a `StoreError` from a result code and the connection's message.
    func error(_ result: Int32, sql: String?) -> StoreError {
        let message = String(cString: sqlite3_errmsg(handle))
        // Busy or locked past the busy timeout: another program holds the database (an operator's sqlite3, a backup
        // tool), for now.
        let code = switch result & 0xff {
        case SQLITE_FULL: "no_space"
        case SQLITE_CONSTRAINT: "constraint"
        case SQLITE_BUSY: "store_busy"
        default: "sqlite_error"
        }
        return StoreError(code: code, message: "SQLite: \(message)", resultCode: result, sql: sql)
    }

    deinit {
        statements.removeAll()
        sqlite3_close_v2(handle)
    }
}
