import CSQLite

/// Owns a prepared statement (`sqlite3_stmt`), finalized in `deinit`.
///
/// Statements live in their connection's cache and are finalized before it closes, so the back reference is unowned.
final class Statement {
    private var handle: OpaquePointer?
    private unowned let database: Database
    let sql: String
    private let columns: [String: Int]

    init(database: Database, sql: String) throws(StoreError) {
        self.database = database
        self.sql = sql
        var handle: OpaquePointer?
        let result = sqlite3_prepare_v2(database.handle, sql, -1, &handle, nil)
        guard result == SQLITE_OK, let handle else {
            sqlite3_finalize(handle)
            throw database.error(result, sql: sql)
        }
        self.handle = handle
        var columns: [String: Int] = [:]
        for index in 0..<sqlite3_column_count(handle) {
            columns[String(cString: sqlite3_column_name(handle, index))] = Int(index)
        }
        self.columns = columns
    }

    /// Runs the statement with `arguments` bound in order and returns every row.
    func rows(_ arguments: [SQLValue]) throws(StoreError) -> [Row] {
        defer {
            sqlite3_reset(handle)
            sqlite3_clear_bindings(handle)
        }
        try bind(arguments)
        var rows: [Row] = []
        while true {
            let result = sqlite3_step(handle)
            if result == SQLITE_DONE { break }
            guard result == SQLITE_ROW else { throw database.error(result, sql: sql) }
            rows.append(Row(columns: columns, values: (0..<columns.count).map(value(at:))))
        }
        return rows
    }

    private func bind(_ arguments: [SQLValue]) throws(StoreError) {
        precondition(Int(sqlite3_bind_parameter_count(handle)) == arguments.count, "wrong number of arguments for \(sql)")
        for (offset, argument) in arguments.enumerated() {
            let index = Int32(offset + 1)
            let result: Int32
            switch argument {
            case .null: result = sqlite3_bind_null(handle, index)
            case .integer(let value): result = sqlite3_bind_int64(handle, index, value)
            case .real(let value): result = sqlite3_bind_double(handle, index, value)
            case .text(let value):
                // Read as a C string (to its first NUL), a value with one was another value: refused, as PostgreSQL's.
                guard !value.utf8.contains(0) else { throw StoreError.nulInText }
                result = sqlite3_bind_text(handle, index, value, -1, tc_sqlite_transient())
            case .blob(let value):
                result = value.withUnsafeBytes { bytes in
                    sqlite3_bind_blob(handle, index, bytes.baseAddress, Int32(bytes.count), tc_sqlite_transient())
                }
            }
            guard result == SQLITE_OK else { throw database.error(result, sql: sql) }
        }
    }

    private func value(at index: Int) -> SQLValue {
        let column = Int32(index)
        switch sqlite3_column_type(handle, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, column))
        case SQLITE_TEXT: return .text(String(cString: sqlite3_column_text(handle, column)))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, column))
            guard let bytes = sqlite3_column_blob(handle, column) else { return .blob(.init()) }
            return .blob(.init(bytes: bytes, count: count))
        default: return .null
        }
    }

    deinit { sqlite3_finalize(handle) }
}
