/// Optional API authentication: with a token set, every route but `/healthz`, `/readyz` and CORS preflights
/// (`OPTIONS`) needs `Authorization: Bearer <token>`, compared in constant time.
public struct BearerToken: Sendable {
    private let token: [UInt8]?

    public init(_ token: String?) {
        self.token = token.map { Array($0.utf8) }
    }

    /// nil when the request may go on; a 401 otherwise.
    public func check(_ head: RequestHead) -> HTTPError? {
        guard let token else { return nil }
        if head.segments == ["healthz"] || head.segments == ["readyz"] { return nil }
        // A CORS preflight never carries credentials; the routes that answer one send back headers only.
        if head.method == "OPTIONS" { return nil }
        let presented = head.headers["Authorization"].flatMap { value -> [UInt8]? in
            guard value.count > 7, value.prefix(7).lowercased() == "bearer " else { return nil }
            return Array(value.dropFirst(7).trimmingCharacters(in: .whitespaces).utf8)
        }
        guard let presented, Self.constantTimeEquals(presented, token) else {
            return HTTPError(.unauthorized, "unauthorized", "Send Authorization: Bearer <token>.",
                             headers: HTTPHeaders([("WWW-Authenticate", "Bearer")]))
        }
        return nil
    }

    /// Compares every byte whatever the first difference, so timing says nothing about the token.
    static func constantTimeEquals(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        var difference = UInt8(left.count == right.count ? 0 : 1)
        for index in 0..<max(left.count, right.count) {
            difference |= (index < left.count ? left[index] : 0) ^ (index < right.count ? right[index] : 0)
        }
        return difference == 0
    }
}
