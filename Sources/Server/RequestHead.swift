/// A parsed request line and header section.
public struct RequestHead: Sendable {
    public var method: String
    /// The request target as sent, e.g. `/v1/jobs?state=running`.
    public var target: String
    /// Path segments, each percent-decoded (a `%2F` stays inside its segment).
    public var segments: [String]
    /// Query parameters, percent-decoded; the first value of a repeated name wins.
    public var query: [String: String]
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    public var headers: HTTPHeaders

    /// Whether the client wants the connection kept open after this exchange.
    public var keepAlive: Bool {
        guard headers["Connection"] != nil else { return minorVersion >= 1 }
        let tokens = headers.values("Connection").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        if tokens.contains("close") { return false }
        return minorVersion >= 1 || tokens.contains("keep-alive")
    }

    /// Names of the query's parameters given more than once (`query` keeps the first value of each).
    public var repeatedQueryNames: Set<String> {
        var seen = Set<String>(), repeated = Set<String>()
        for (name, _) in (try? RequestParser.queryPairs(of: target)) ?? [] where !seen.insert(name).inserted { repeated.insert(name) }
        return repeated
    }

    /// The raw path, before the `?`.
    public var path: String {
        guard let mark = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return target }
        return String(target[..<mark])
    }
}
