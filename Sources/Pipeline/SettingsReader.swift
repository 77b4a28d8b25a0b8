/// Reads one JSON object of a settings document, refusing unknown keys and values of the wrong type.
struct SettingsReader {
    let path: String
    private let object: [String: JSONValue]

    init(_ value: JSONValue, path: String, allowed: [String]) throws(SettingsError) {
        self.path = path
        guard case .object(let object) = value else {
            throw SettingsError(key: path, message: "expected an object, got \(value.typeName)")
        }
        self.object = object
        if let unknown = object.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw SettingsError(key: key(unknown), message: "unknown key; expected one of \(allowed.joined(separator: ", "))")
        }
    }

    func key(_ name: String) -> String { path.isEmpty ? name : "\(path).\(name)" }

    func has(_ name: String) -> Bool { object[name] != nil }

    /// Whether `name` is given a value: present and not null (a key set to null keeps its default).
    func gives(_ name: String) -> Bool { object[name].map { $0 != .null } ?? false }

    func value(_ name: String) -> JSONValue? { object[name] }

    func string(_ name: String, oneOf choices: [String]) throws(SettingsError) -> String? {
        guard let value = object[name], value != .null else { return nil }
        guard case .string(let text) = value, choices.contains(text) else {
            throw SettingsError(key: key(name), message: "expected one of \(choices.joined(separator: ", ")), got \(describe(value))")
        }
        return text
    }

    func bool(_ name: String) throws(SettingsError) -> Bool? {
        guard let value = object[name], value != .null else { return nil }
        guard case .bool(let flag) = value else {
            throw SettingsError(key: key(name), message: "expected true or false, got \(describe(value))")
        }
        return flag
    }

    func integer(_ name: String, in range: ClosedRange<Int>, unit: String) throws(SettingsError) -> Int? {
        guard let value = object[name], value != .null else { return nil }
        let number: Int?
        switch value {
        case .integer(let integer): number = Int(exactly: integer)
        case .number(let double): number = double.rounded() == double ? Int(exactly: double) : nil
        default: number = nil
        }
        guard let number, range.contains(number) else {
            throw SettingsError(
                key: key(name),
                message: "expected a whole number of \(unit) from \(range.lowerBound) to \(range.upperBound), got \(describe(value))")
        }
        return number
    }

    func number(_ name: String, in range: ClosedRange<Double>, unit: String) throws(SettingsError) -> Double? {
        guard let value = object[name], value != .null else { return nil }
        let number: Double?
        switch value {
        case .integer(let integer): number = Double(integer)
        case .number(let double): number = double
        default: number = nil
        }
        guard let number, range.contains(number) else {
            throw SettingsError(
                key: key(name),
                message: "expected a number of \(unit) from \(range.lowerBound.formatted) to \(range.upperBound.formatted), got \(describe(value))")
        }
        return number
    }

    private func describe(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): "\"\(text)\""
        case .integer(let integer): String(integer)
        case .number(let double): double.formatted
        default: value.typeName
        }
    }
}

extension Double {
    /// The number without a trailing `.0` when it is whole.
    var formatted: String { rounded() == self && abs(self) < 1e15 ? String(Int64(self)) : String(self) }
}
