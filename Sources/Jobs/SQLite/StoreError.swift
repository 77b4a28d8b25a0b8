import CSQLite

/// An error from the job store: SQLite's extended result code and message, the SQL that failed, and a stable code.
public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Stable snake_case identifier, e.g. `sqlite_error`, `invalid_transition`, `not_found`.
    public let code: String
    /// SQLite's extended result code, when SQLite reported the error.
    public let resultCode: Int32?
    /// What went wrong, with SQLite's own message kept.
    public let message: String
    /// The statement that failed, when there was one.
    public let sql: String?
    /// PostgreSQL's SQLSTATE (`23505`, ...), when PostgreSQL reported the error.
    public let sqlState: String?

    public init(code: String, message: String, resultCode: Int32? = nil, sql: String? = nil, sqlState: String? = nil) {
        self.code = code
        self.message = message
        self.resultCode = resultCode
        self.sql = sql
        self.sqlState = sqlState
    }

    public var description: String { "\(code): \(message)" }

    /// A text value with a NUL character: neither store can keep one (both take C strings, cut at the NUL into
    /// another value), so it is refused (the API answers 400).
    static let nulInText = StoreError(code: "invalid_text", message: "A value holds a NUL character, which the job store cannot keep.")

    /// Whether the database refused the statement with a constraint (SQLite: or a trigger's RAISE(ABORT);
    /// PostgreSQL: SQLSTATE class 23, integrity constraint violation).
    public var isConstraint: Bool {
        resultCode.map { $0 & 0xff == SQLITE_CONSTRAINT } ?? sqlState?.hasPrefix("23") ?? false
    }

    /// Whether SQLite refused the statement because another row still refers to this one (a foreign key), as
    /// opposed to another constraint or a trigger.
    public var isStillReferenced: Bool {
        resultCode == SQLITE_CONSTRAINT | (3 << 8) || sqlState == "23503" // SQLITE_CONSTRAINT_FOREIGNKEY, foreign_key_violation
    }

    /// Whether the database refused a row because another has its key (SQLite: its primary key; PostgreSQL: any
    /// unique key).
    public var isDuplicate: Bool {
        resultCode == SQLITE_CONSTRAINT | (6 << 8) || sqlState == "23505" // SQLITE_CONSTRAINT_PRIMARYKEY, unique_violation
    }
}
