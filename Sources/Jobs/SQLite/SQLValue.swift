import Foundation

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)

    public var int: Int? {
        switch self {
        case .integer(let value): Int(value)
        // A real out of Int's reach (a value edited by hand, as `9e999` is kept: infinity) is no integer: it
        // trapped, on every read of the row, after every restart.
        case .real(let value): Int(exactly: value.rounded(.towardZero))
        default: nil
        }
    }

    public var double: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .real(let value): value
        default: nil
        }
    }

    public var string: String? {
        if case .text(let value) = self { return value }
        return nil
    }
}

/// Swift values that bind as SQL values.
public protocol SQLBindable { var sqlValue: SQLValue { get } }

extension Int: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .integer(self) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .real(self) } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// One result row: values by column name.
public struct Row: Sendable {
    let columns: [String: Int]
    let values: [SQLValue]

    public subscript(_ name: String) -> SQLValue {
        guard let index = columns[name] else { preconditionFailure("no column \(name) in the result") }
        return values[index]
    }
}
