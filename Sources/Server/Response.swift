import Foundation

/// What a handler answers: status, headers and one kind of body.
public struct Response: Sendable {
    public enum Body: Sendable {
        case empty
        case data(Data)
        /// `length` bytes of an open file from `offset`, sent with sendfile.
        case file(OpenFile, offset: Int64, length: Int64)
        /// A Server-Sent Events stream (chunked, open until the source ends it or the client leaves).
        case eventStream(any EventSource)
    }

    /// Runs `handler` and sets `fields` on its answer, or on its error's (CORS and protocol headers every answer of
    /// a route carries).
    static func adding(_ fields: [(String, String)], to handler: () throws(HTTPError) -> Response) throws(HTTPError) -> Response {
        do {
            var response = try handler()
            for (name, value) in fields { response.headers.set(name, value) }
            return response
        } catch {
            var failure = error
            for (name, value) in fields { failure.headers.set(name, value) }
            throw failure
        }
    }

    public var status: HTTPStatus
    public var headers: HTTPHeaders
    public var body: Body

    /// A response that will not be sent: its file, if it has one, is closed on `pool` (`OpenFile.close(on:)`).
    func discard(closingFilesOn pool: BlockingPool) {
        if case .file(let handle, _, _) = body { handle.close(on: pool) }
    }

    public init(_ status: HTTPStatus, headers: HTTPHeaders = HTTPHeaders(), body: Body = .empty) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response from an Encodable value.
    public static func json<T: Encodable>(_ value: T, status: HTTPStatus = .ok, headers: HTTPHeaders = HTTPHeaders()) -> Response {
        json(encoded: JSON.encode(value), status: status, headers: headers)
    }

    /// A JSON response from bytes already encoded (a cached rendering). Not to be stored by a cache unless the
    /// caller says otherwise: a job's state, a listing, an error change from one request to the next, and with no
    /// word a shared cache's default freshness (Varnish's 120 s) served a job as running long after it ended.
    public static func json(encoded data: Data, status: HTTPStatus = .ok, headers: HTTPHeaders = HTTPHeaders()) -> Response {
        var headers = headers
        headers.set("Content-Type", "application/json")
        if headers["Cache-Control"] == nil { headers.set("Cache-Control", "no-store") }
        return Response(status, headers: headers, body: .data(data))
    }

    /// The JSON error body every error response has: `{"error": {"code", "message"}}`.
    public static func error(_ error: HTTPError) -> Response {
        var response = json(ErrorBody(error: .init(code: error.code, message: error.message)), status: error.status,
                            headers: error.headers)
        if error.closeConnection { response.headers.set("Connection", "close") }
        return response
    }

    struct ErrorBody: Encodable {
        struct Detail: Encodable {
            let code: String
            let message: String
        }
        let error: Detail
    }
}

/// Produces the events of a Server-Sent Events response.
public protocol EventSource: Sendable {
    /// Starts the stream: call `send` with each event's text (already in `event:`/`data:` form), and with nil to
    /// end the stream. Returns what to call when the client goes away first.
    func start(send: @escaping @Sendable (String?) -> Void) -> @Sendable () -> Void
}

/// The API's one JSON encoder setup.
enum JSON {
    static func encode<T: Encodable>(_ value: T) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)) ?? Data("{}".utf8)
    }
}
