import CPostgres
import Foundation

/// Owns one libpq connection (`PGconn*`); finished in `deinit`.
///
/// Statements are sent with their arguments apart from the SQL text (`PQexecParams`, text format), so no value is
/// ever spliced into SQL. Results come back as `Row`s of `SQLValue`, typed by the column's type: integers, floating
/// point and numeric, booleans (as 0 or 1), `bytea`, text for everything else. Errors keep libpq's message and the
/// SQLSTATE. Blocking: call from a worker thread, never an event loop. Not Sendable: one thread at a time.
final class PostgresConnection {
    private var connection: OpaquePointer?
    /// Set once a statement failed because the server or the link went away: the connection is not used again.
    private var lost = false
    /// The URI without its password, for messages.
    let displayURI: String

    /// Connects with a libpq URI (`postgresql://user@host/db?...`).
    init(uri: String) throws(StoreError) {
        displayURI = Self.withoutPassword(uri)
        connection = Self.connect(uri)
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { Self.trimmed(PQerrorMessage($0)) } ?? "out of memory"
            PQfinish(connection)
            self.connection = nil
            throw StoreError(code: "store_unavailable", message: "Connecting to PostgreSQL at \(displayURI) failed: \(message)")
        }
        // libpq prints the server's notices to stderr, in the middle of the JSON log: a FATAL line each time the
        // server ends a session (a restart, a failover, an idle timeout). What matters of them reaches the call
        // that meets it, as its error (the connection lost, the statement refused).
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        // Times, numbers and bytes are read back as they were written, whatever the server's defaults. The server
        // notices a node gone without a word (cut off, its machine frozen) in seconds too, not after the kernel's two
        // hours, and ends its session: the row locks of a transaction it was in and a sweep's lock go with it; so
        // does a transaction left idle a minute (none of ours waits between statements).
        try execute("SET TIME ZONE 'UTC'; SET extra_float_digits = 3; SET bytea_output = 'hex'; SET DateStyle = 'ISO'; SET client_min_messages = warning; "
            + "SET statement_timeout = '60s'; SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; "
            + "SET idle_in_transaction_session_timeout = '60s'")
    }

    /// Defaults a node needs whatever the URI says, each overridden by the URI when it sets it: a connect that gives
    /// up (a server that does not answer), TCP keepalives and a send timeout (a link that died without a word, as in
    /// a network partition, is noticed in seconds rather than at the kernel's retransmission limit); and a server
    /// that takes writes: after a failover the old primary back as a standby (first of a URI's hosts, or behind a
    /// name that moved) was connected to, and kept, every write failing while `SELECT 1` said ready.
    static let linkDefaults: [(String, String)] = [
        ("connect_timeout", "5"), ("keepalives", "1"), ("keepalives_idle", "5"), ("keepalives_interval", "2"),
        ("keepalives_count", "3"), ("tcp_user_timeout", "10000"), ("application_name", "transcoderd"),
        ("target_session_attrs", "read-write"),
    ]

    private static func connect(_ uri: String) -> OpaquePointer? {
        // With expand_dbname, the URI in `dbname` is expanded in place: its settings override the ones before it.
        let pairs = linkDefaults + [("dbname", uri)]
        var keywords: [UnsafePointer<CChar>?] = pairs.map { UnsafePointer(strdup($0.0)) } + [nil]
        var values: [UnsafePointer<CChar>?] = pairs.map { UnsafePointer(strdup($0.1)) } + [nil]
        defer {
            keywords.forEach { free(UnsafeMutablePointer(mutating: $0)) }
            values.forEach { free(UnsafeMutablePointer(mutating: $0)) }
        }
        return PQconnectdbParams(&keywords, &values, 1)
    }

    /// Whether the connection is up (false after the server went away, until a new connection is made). A
    /// connection idle between statements hears nothing from the server unless the server is ending it (an
    /// administrator, a restart, a failover: a goodbye, then the socket closes): anything waiting on its socket, and
    /// it is replaced rather than trusted with a statement that would fail on it.
    var isConnected: Bool {
        guard !lost, let connection, PQstatus(connection) == CONNECTION_OK else { return false }
        var waiting = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
        var ready: Int32
        repeat { ready = poll(&waiting, 1, 0) } while ready < 0 && errno == EINTR
        return ready <= 0 // an error of poll's own is not the connection's: its statement will tell
    }

    /// Runs one or more statements without arguments, returning nothing of interest.
    func execute(_ sql: String) throws(StoreError) {
        try checkUsable(sql)
        let result = PQexec(connection, sql)
        defer { PQclear(result) }
        try check(result, sql: sql)
    }

    /// Runs one statement with `arguments` bound to `$1`, `$2`, ... and returns its rows.
    @discardableResult
    func query(_ sql: String, _ arguments: [SQLValue] = []) throws(StoreError) -> [Row] {
        try checkUsable(sql)
        // Text format for every parameter: libpq wants C strings that live until the call returns. A C string ends at
        // its first NUL, which PostgreSQL's text cannot hold anyway: refused, not cut short (another value).
        let texts: [String?] = arguments.map(Self.text)
        if texts.contains(where: { $0?.utf8.contains(0) == true }) {
            throw StoreError.nulInText
        }
        var pointers: [UnsafeMutablePointer<CChar>?] = texts.map { $0.map { strdup($0) } ?? nil }
        defer { pointers.forEach { free($0) } }
        let result = pointers.withUnsafeMutableBufferPointer { buffer in
            // An empty array may have no storage at all: no parameters, no pointer.
            guard let base = buffer.baseAddress, !buffer.isEmpty else {
                return PQexecParams(connection, sql, 0, nil, nil, nil, nil, 0)
            }
            return base.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { values in
                PQexecParams(connection, sql, Int32(buffer.count), nil, values, nil, nil, 0)
            }
        }
        defer { PQclear(result) }
        try check(result, sql: sql)
        return Self.rows(result)
    }

    /// Runs `body` in a transaction: committed if it returns, rolled back if it throws (the first error is the one
    /// rethrown, even when the rollback fails too).
    func transaction<T>(_ body: () throws(StoreError) -> T) throws(StoreError) -> T {
        try execute("BEGIN")
        let value: T
        do {
            value = try body()
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
        // A transaction an error aborted (one the body caught) answers COMMIT with ROLLBACK: nothing was saved.
        let result = PQexec(connection, "COMMIT")
        defer { PQclear(result) }
        try check(result, sql: "COMMIT")
        if let tag = PQcmdStatus(result), String(cString: tag) == "ROLLBACK" {
            throw StoreError(code: "postgres_error", message: "PostgreSQL: the transaction was rolled back, not committed (a statement in it failed).",
                             sql: "COMMIT", sqlState: "25P02")
        }
        return value
    }

    // MARK: Notifications (LISTEN)

    /// The connection's socket, to wait on for notifications (-1 when there is none).
    var socket: Int32 { connection.map { PQsocket($0) } ?? -1 }

    /// Reads what the server sent and returns the notifications (channel, payload) received; throws
    /// `store_unavailable` when the link is gone.
    func notifications() throws(StoreError) -> [(channel: String, payload: String)] {
        try checkUsable("LISTEN")
        guard PQconsumeInput(connection) == 1, PQstatus(connection) == CONNECTION_OK else {
            lost = true
            throw StoreError(code: "store_unavailable", message: "PostgreSQL: \(Self.trimmed(PQerrorMessage(connection)))")
        }
        var received: [(String, String)] = []
        while let notice = PQnotifies(connection) {
            received.append((String(cString: notice.pointee.relname), String(cString: notice.pointee.extra)))
            PQfreemem(notice)
        }
        return received
    }

    private func checkUsable(_ sql: String) throws(StoreError) {
        guard !lost else {
            throw StoreError(code: "store_unavailable", message: "PostgreSQL: the connection to \(displayURI) was lost.", sql: sql)
        }
    }

    private func check(_ result: OpaquePointer?, sql: String) throws(StoreError) {
        guard let result else {
            // No result at all: out of memory, too many parameters, or the link is gone.
            if PQstatus(connection) != CONNECTION_OK { lost = true }
            throw StoreError(code: lost ? "store_unavailable" : "postgres_error",
                             message: "PostgreSQL: \(Self.trimmed(PQerrorMessage(connection)))", sql: sql)
        }
        let status = PQresultStatus(result)
        guard status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && status != PGRES_EMPTY_QUERY else { return }
        let state = PQresultErrorField(result, Int32(Character("C").asciiValue!)).map { String(cString: $0) }
        let message = Self.trimmed(PQresultErrorMessage(result))
        // Class 08: connection exception; 57P: the server shutting down or starting; 25006: a write refused by a
        // server (or session) that became read-only since the connect, replaced for one that takes writes; no
        // SQLSTATE: an error libpq made itself, which after a sent statement means the link (the server answers
        // every error with a SQLSTATE).
        if state == nil || state?.hasPrefix("08") == true || state?.hasPrefix("57P") == true || state == "25006"
            || PQstatus(connection) != CONNECTION_OK {
            lost = true
        }
        throw StoreError(code: lost ? "store_unavailable" : "postgres_error", message: "PostgreSQL: \(message)", sql: sql, sqlState: state)
    }

    /// The rows of a result, each value typed by its column's type.
    private static func rows(_ result: OpaquePointer?) -> [Row] {
        let columnCount = Int(PQnfields(result)), rowCount = Int(PQntuples(result))
        var columns: [String: Int] = [:]
        var types: [Oid] = []
        for column in 0..<columnCount {
            columns[String(cString: PQfname(result, Int32(column)))] = column
            types.append(PQftype(result, Int32(column)))
        }
        return (0..<rowCount).map { row in
            let values = (0..<columnCount).map { column -> SQLValue in
                guard PQgetisnull(result, Int32(row), Int32(column)) == 0 else { return .null }
                let text = String(cString: PQgetvalue(result, Int32(row), Int32(column)))
                return value(text, type: types[column])
            }
            return Row(columns: columns, values: values)
        }
    }

    /// Type OIDs from PostgreSQL's catalogue (`pg_type`): stable across versions.
    private enum TypeOID {
        static let bool: Oid = 16, bytea: Oid = 17, int8: Oid = 20, int2: Oid = 21, int4: Oid = 23
        static let float4: Oid = 700, float8: Oid = 701, numeric: Oid = 1700
    }

    private static func value(_ text: String, type: Oid) -> SQLValue {
        switch type {
        case TypeOID.int2, TypeOID.int4, TypeOID.int8: return Int64(text).map(SQLValue.integer) ?? .text(text)
        case TypeOID.float4, TypeOID.float8, TypeOID.numeric: return Double(text).map(SQLValue.real) ?? .text(text)
        case TypeOID.bool: return .integer(text == "t" ? 1 : 0)
        case TypeOID.bytea: return bytes(fromHex: text).map(SQLValue.blob) ?? .text(text)
        default: return .text(text)
        }
    }

    /// A value as libpq's text format for a parameter: nil for NULL, `\x...` hex for bytes.
    private static func text(_ value: SQLValue) -> String? {
        switch value {
        case .null: return nil
        case .integer(let number): return String(number)
        case .real(let number): return number.isFinite ? String(number) : (number.isNaN ? "NaN" : (number > 0 ? "Infinity" : "-Infinity"))
        case .text(let string): return string
        case .blob(let data): return "\\x" + data.map { String(format: "%02x", $0) }.joined()
        }
    }

    /// `bytea` in the server's hex output format (`\x0a1b...`).
    private static func bytes(fromHex text: String) -> Data? {
        guard text.hasPrefix("\\x") else { return nil }
        let digits = Array(text.utf8.dropFirst(2))
        guard digits.count % 2 == 0 else { return nil }
        var data = Data(capacity: digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
            data.append(high << 4 | low)
            index += 2
        }
        return data
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        message.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? "unknown error"
    }

    /// `postgresql://user:secret@host/db?password=x` → `postgresql://user@host/db?password=…`: passwords stay out
    /// of logs and errors (the user information ends before the first `/` after the scheme).
    static func withoutPassword(_ uri: String) -> String {
        var text = uri
        if let scheme = text.range(of: "://") {
            let rest = text[scheme.upperBound...]
            let end = rest.firstIndex(of: "/") ?? rest.endIndex
            if let at = rest[..<end].firstIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") {
                text = String(text[..<colon]) + String(text[at...])
            }
        }
        return text.replacing(/([?&]password=)[^&]*/) { match in match.output.1 + "…" }
    }

    deinit { PQfinish(connection) }
}
