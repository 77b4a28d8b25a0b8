/// The status codes the server sends, with their reason phrases.
public struct HTTPStatus: Sendable, Equatable {
    public let code: Int
    public let reason: String

    public static let `continue` = HTTPStatus(code: 100, reason: "Continue")
    public static let ok = HTTPStatus(code: 200, reason: "OK")
    public static let created = HTTPStatus(code: 201, reason: "Created")
    public static let accepted = HTTPStatus(code: 202, reason: "Accepted")
    public static let noContent = HTTPStatus(code: 204, reason: "No Content")
    public static let partialContent = HTTPStatus(code: 206, reason: "Partial Content")
    public static let notModified = HTTPStatus(code: 304, reason: "Not Modified")
    public static let temporaryRedirect = HTTPStatus(code: 307, reason: "Temporary Redirect")
    public static let badRequest = HTTPStatus(code: 400, reason: "Bad Request")
    public static let unauthorized = HTTPStatus(code: 401, reason: "Unauthorized")
    public static let forbidden = HTTPStatus(code: 403, reason: "Forbidden")
    public static let notFound = HTTPStatus(code: 404, reason: "Not Found")
    public static let methodNotAllowed = HTTPStatus(code: 405, reason: "Method Not Allowed")
    public static let requestTimeout = HTTPStatus(code: 408, reason: "Request Timeout")
    public static let conflict = HTTPStatus(code: 409, reason: "Conflict")
    public static let gone = HTTPStatus(code: 410, reason: "Gone")
    public static let lengthRequired = HTTPStatus(code: 411, reason: "Length Required")
    public static let preconditionFailed = HTTPStatus(code: 412, reason: "Precondition Failed")
    public static let contentTooLarge = HTTPStatus(code: 413, reason: "Content Too Large")
    public static let uriTooLong = HTTPStatus(code: 414, reason: "URI Too Long")
    public static let unsupportedMediaType = HTTPStatus(code: 415, reason: "Unsupported Media Type")
    public static let rangeNotSatisfiable = HTTPStatus(code: 416, reason: "Range Not Satisfiable")
    public static let expectationFailed = HTTPStatus(code: 417, reason: "Expectation Failed")
    public static let unprocessableContent = HTTPStatus(code: 422, reason: "Unprocessable Content")
    public static let locked = HTTPStatus(code: 423, reason: "Locked")
    public static let headersTooLarge = HTTPStatus(code: 431, reason: "Request Header Fields Too Large")
    /// tus's checksum extension: the chunk did not match its `Upload-Checksum`.
    public static let checksumMismatch = HTTPStatus(code: 460, reason: "Checksum Mismatch")
    public static let internalServerError = HTTPStatus(code: 500, reason: "Internal Server Error")
    public static let serviceUnavailable = HTTPStatus(code: 503, reason: "Service Unavailable")
    public static let insufficientStorage = HTTPStatus(code: 507, reason: "Insufficient Storage")
}
