/// Maps a method and a path to a handler; a path known under other methods answers 405 with `Allow`.
public final class Router: Sendable {
    /// How a route takes its request body.
    public enum BodyKind: Sendable {
        /// No body expected; a small one is read and dropped.
        case none
        /// JSON, held in memory (at most `HTTPServerConfiguration.maxJSONBytes`).
        case json
        /// Raw bytes streamed to a file (an upload).
        case upload
        /// Raw bytes to a file, or multipart/form-data with a `file` part and nothing else.
        case uploadOrMultipart
        /// JSON, or multipart/form-data with a `file` part and the small parts named in `fields`; any other part
        /// is refused as soon as its headers arrive.
        case jsonOrMultipart(fields: [String])
        /// A tus creation or PATCH: appended to the upload's file, after the endpoint checked the headers.
        case tus(TusEndpoint)
    }

    /// Which of the server's pools runs a route's handler.
    public enum Pool: Sendable {
        /// The handler pool (the probe pool when the request carries a file).
        case standard
        /// Handlers that may wait seconds for something else (a running job to stop): a small pool of their own, so
        /// a few such requests never hold up the store's.
        case waiting
    }

    public typealias Handler = @Sendable (Request) throws(HTTPError) -> Response
    /// Answers on the event loop when it can do so at once without blocking (from memory), or returns nil.
    public typealias QuickAnswer = @Sendable (Request) -> Response?

    struct Route: Sendable {
        let method: String
        let pattern: [Segment]
        let body: BodyKind
        /// Route name for logs and metrics, e.g. `GET /v1/jobs/{id}`.
        let name: String
        /// Whether the handler is quick and never blocks, so it may run on the event loop itself.
        let inline: Bool
        /// Tried on the event loop first; when it has no answer, `handler` runs on a pool.
        let quickAnswer: QuickAnswer?
        let pool: Pool
        let handler: Handler
        /// Headers for the refusals made before the handler runs (authentication): an answer a page on another
        /// origin must be able to read, as the handler's own errors are.
        let refusalHeaders: RefusalHeaders?
        /// Answered on a connection over the server's cap too (liveness: a probe failing under load restarts it).
        let whenFull: Bool
    }

    /// Headers to add to a refusal of the request whose headers are given.
    public typealias RefusalHeaders = @Sendable (HTTPHeaders) -> [(String, String)]

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
        /// `{name...}` at the end: one or more segments, joined with `/`.
        case rest(String)
    }

    enum Match {
        case found(Route, parameters: [String: String])
        /// With the refusal headers of the path's routes: a page on another origin reads a 405 as any refusal.
        case methodNotAllowed(allowed: [String], refusalHeaders: RefusalHeaders?)
        case notFound
    }

    private let routes: [Route]

    /// A route: method, path with `{name}` parameters, body kind, whether the handler may run on the event loop
    /// (quick, never blocking), an optional quick answer tried on the loop before the handler, and the handler.
    public struct Definition: Sendable {
        let method: String
        let path: String
        let body: BodyKind
        let inline: Bool
        let quickAnswer: QuickAnswer?
        let pool: Pool
        let handler: Handler
        let refusalHeaders: RefusalHeaders?
        let whenFull: Bool

        public init(_ method: String, _ path: String, body: BodyKind = .none, inline: Bool = false,
                    quickAnswer: QuickAnswer? = nil, pool: Pool = .standard, refusalHeaders: RefusalHeaders? = nil,
                    whenFull: Bool = false, _ handler: @escaping Handler) {
            self.method = method
            self.path = path
            self.body = body
            self.inline = inline
            self.quickAnswer = quickAnswer
            self.pool = pool
            self.refusalHeaders = refusalHeaders
            self.whenFull = whenFull
            self.handler = handler
        }
    }

    public init(_ routes: [Definition]) {
        self.routes = routes.map { route in
            let pattern = route.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { part -> Segment in
                guard part.hasPrefix("{") && part.hasSuffix("}") else { return .literal(String(part)) }
                let name = part.dropFirst().dropLast()
                return name.hasSuffix("...") ? .rest(String(name.dropLast(3))) : .parameter(String(name))
            }
            return Route(method: route.method, pattern: pattern, body: route.body, name: "\(route.method) \(route.path)",
                         inline: route.inline, quickAnswer: route.quickAnswer, pool: route.pool, handler: route.handler,
                         refusalHeaders: route.refusalHeaders, whenFull: route.whenFull)
        }
    }

    /// Finds the route for `method` and path `segments`; HEAD is served by GET routes.
    func match(method: String, segments: [String]) -> Match {
        var allowed: [String] = []
        var refusalHeaders: RefusalHeaders?
        for route in routes {
            guard let parameters = Self.bind(route.pattern, segments) else { continue }
            if route.method == method || (method == "HEAD" && route.method == "GET") {
                return .found(route, parameters: parameters)
            }
            allowed.append(route.method)
            if route.method == "GET" { allowed.append("HEAD") }
            refusalHeaders = refusalHeaders ?? route.refusalHeaders
        }
        return allowed.isEmpty ? .notFound : .methodNotAllowed(allowed: allowed, refusalHeaders: refusalHeaders)
    }

    private static func bind(_ pattern: [Segment], _ segments: [String]) -> [String: String]? {
        if case .rest(let name)? = pattern.last {
            // The rest takes every segment left, at least one, joined with "/". A "/" inside a segment (sent as
            // %2F) stays %2F: joined as it is, it could not be told apart from a separator; so kept, it names what
            // the handler knows nothing of (a 404 from the route, with its refusal headers), never another file.
            guard segments.count >= pattern.count,
                  var parameters = bind(Array(pattern.dropLast()), Array(segments.prefix(pattern.count - 1))) else { return nil }
            parameters[name] = segments.dropFirst(pattern.count - 1)
                .map { $0.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "/", with: "%2F") }
                .joined(separator: "/")
            return parameters
        }
        guard pattern.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (part, segment) in zip(pattern, segments) {
            switch part {
            case .literal(let text): guard text == segment else { return nil }
            case .parameter(let name): parameters[name] = segment
            case .rest: return nil
            }
        }
        return parameters
    }
}
