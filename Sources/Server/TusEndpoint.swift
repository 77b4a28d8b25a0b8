import Crypto
import Foundation
import Outbound
import Glibc
import Jobs
import Pipeline
import Locks

/// tus 1.0 (tus.io): resumable uploads with the creation, creation-defer-length, creation-with-upload, termination,
/// checksum and expiration extensions. `POST /v1/tus` creates an upload at `/v1/tus/{id}`; `HEAD` tells its offset,
/// `PATCH` appends at it, `DELETE` ends it. Once its bytes are all there it becomes an ordinary upload with the same
/// id (probed and hashed as every upload), and with `settings` in its metadata a job starts on it at once.
///
/// The files are `TusUploads` (shared storage in a cluster); a PATCH streams through a `TusSink`.
public final class TusEndpoint: Sendable {
    static let version = "1.0.0"
    static let extensions = "creation,creation-defer-length,creation-with-upload,termination,checksum,expiration"

    let uploads: TusUploads
    let maxBytes: Int64
    /// The running hashes of unfinished uploads, shared by every endpoint of an API (its routes and its recovery
    /// of interrupted completions): one that lost them hashes the whole file again.
    let digests: TusDigests
    /// HEADs completing an upload a crash left now (each hashes and probes a whole file on a handler thread): at
    /// most `maxHeadCompletions`; past it a HEAD answers 423 with Retry-After, and the handlers stay free for the
    /// quick requests.
    private let headCompletions = LockedValue(0)
    static let maxHeadCompletions = 2
    /// The PATCHes here holding an upload, told when another request waits for it.
    let holders = TusLockHolders()
    let cors: CORSPolicy
    /// Makes a complete file an upload with the given id (probed, recorded): the API's own path for uploads.
    let store: @Sendable (UploadedFile, String) throws(HTTPError) -> Upload
    /// The upload recorded under an id, if one is.
    let storedUpload: @Sendable (String) throws(HTTPError) -> Upload?
    /// Queues a job on an upload with settings given as JSON, under the id given (or finds the job made with it
    /// already): the API's own path for jobs; returns its id.
    let createJob: @Sendable (Upload, Data, String) throws(HTTPError) -> String
    /// Reads settings given as JSON (or a preset's name) as a job would, refusing them as it would.
    let checkSettings: @Sendable (Data) throws(HTTPError) -> Void
    /// What only the store can tell of such settings (a watermark upload that is none), refused at creation, on a
    /// pool: found only at the last PATCH, it let a client send the whole file first.
    let checkSettingsInStore: @Sendable (Data) throws(HTTPError) -> Void

    init(uploads: TusUploads, digests: TusDigests = TusDigests(), maxBytes: Int64, cors: CORSPolicy,
         store: @escaping @Sendable (UploadedFile, String) throws(HTTPError) -> Upload,
         storedUpload: @escaping @Sendable (String) throws(HTTPError) -> Upload?,
         createJob: @escaping @Sendable (Upload, Data, String) throws(HTTPError) -> String,
         checkSettings: @escaping @Sendable (Data) throws(HTTPError) -> Void,
         checkSettingsInStore: @escaping @Sendable (Data) throws(HTTPError) -> Void = { _ throws(HTTPError) in }) {
        self.checkSettings = checkSettings
        self.checkSettingsInStore = checkSettingsInStore
        self.uploads = uploads
        self.digests = digests
        self.maxBytes = maxBytes
        self.cors = cors
        self.store = store
        self.storedUpload = storedUpload
        self.createJob = createJob
    }

    /// The routes, each answer with `Tus-Resumable` and the CORS headers for the request's origin.
    var routes: [Router.Definition] {
        // A refusal before the handler (a missing token) gets them too: tus clients take an unreadable answer for a
        // network error and retry it forever.
        let refusalHeaders: Router.RefusalHeaders = { [self] in answerHeaders(for: $0) }
        return [
            .init("OPTIONS", "/v1/tus", inline: true) { [self] request throws(HTTPError) in options(request) },
            .init("OPTIONS", "/v1/tus/{id}", inline: true) { [self] request throws(HTTPError) in
                guard TusUploads.isValidID(request.parameters["id"] ?? "") else {
                    throw refusal(.notFound, "upload_not_found", "No upload has the id \((request.parameters["id"] ?? "").prefix(64)).")
                }
                return options(request)
            },
            // Their bodies are files: a chunk that makes the upload whole waits for a probe thread (its completion
            // probes), the rest for a handler thread (`TusSink.mayProbe`).
            .init("POST", "/v1/tus", body: .tus(self), refusalHeaders: refusalHeaders) { [self] request throws(HTTPError) in
                try answering(request) { () throws(HTTPError) in try create(request) }
            },
            .init("HEAD", "/v1/tus/{id}", refusalHeaders: refusalHeaders) { [self] request throws(HTTPError) in
                try answering(request) { () throws(HTTPError) in try head(request) }
            },
            .init("PATCH", "/v1/tus/{id}", body: .tus(self), refusalHeaders: refusalHeaders) { [self] request throws(HTTPError) in
                try answering(request) { () throws(HTTPError) in try patch(request) }
            },
            .init("DELETE", "/v1/tus/{id}", refusalHeaders: refusalHeaders) { [self] request throws(HTTPError) in
                try answering(request) { () throws(HTTPError) in try delete(request) }
            },
        ]
    }

    // MARK: Before the body (on the event loop: headers only, no I/O)

    /// The sink for a creation or a PATCH, once the headers are found sound; what can only be checked against the
    /// files (offset, lock, expiry) is checked as the file is opened, on a file thread.
    func makeSink(head: RequestHead, parameters: [String: String], hasBody: Bool, pool: BlockingPool,
                  memory: BodyMemory) throws(HTTPError) -> BodySink {
        do {
            return try sink(head: head, parameters: parameters, hasBody: hasBody, pool: pool, memory: memory)
        } catch {
            // A refusal before the body reaches a browser on another origin too.
            var failure = error
            for (name, value) in cors.headers(for: head.headers, exposing: Self.exposed) { failure.headers.set(name, value) }
            throw failure
        }
    }

    private func sink(head: RequestHead, parameters: [String: String], hasBody: Bool, pool: BlockingPool,
                      memory: BodyMemory) throws(HTTPError) -> BodySink {
        let headers = head.headers
        try checkVersion(headers)
        // Concatenation is not among the extensions: a client that sends its parts regardless (Uppy's parallel
        // uploads read no Tus-Extension) would have each part completed and refused as media of its own, and learn
        // only at the final request, the whole file sent.
        if headers["Upload-Concat"] != nil {
            throw refusal(.badRequest, "unsupported_extension", "Upload-Concat: this server does not join uploads (no concatenation extension); send the file as one upload.")
        }
        if hasBody || head.method == "PATCH" {
            let type = headers["Content-Type"]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
            guard type == "application/offset+octet-stream" else {
                throw refusal(.unsupportedMediaType, "unsupported_media_type", "Content-Type: send the bytes as application/offset+octet-stream.")
            }
        }
        let checksum = try Self.checksum(headers["Upload-Checksum"])
        let mode: TusSink.Mode
        if head.method == "POST" {
            mode = .create(try newUpload(headers))
        } else {
            let id = parameters["id"] ?? ""
            guard TusUploads.isValidID(id) else { throw refusal(.notFound, "upload_not_found", "No upload has the id \(id.prefix(64)).") }
            let offsetRefusal = refusal(.badRequest, "invalid_offset", "Upload-Offset: expected the upload's offset, a whole number of bytes.")
            guard let offset = try Self.byteCount(headers, "Upload-Offset", else: offsetRefusal) else { throw offsetRefusal }
            let length = try Self.byteCount(headers, "Upload-Length", else: lengthRefusal)
            mode = .append(id: id, offset: offset, length: length)
        }
        return TusSink(mode: mode, uploads: uploads, digests: digests, holders: holders, maxBytes: maxBytes, checksum: checksum,
                       pool: pool, memory: memory)
    }

    private var lengthRefusal: HTTPError {
        refusal(.badRequest, "invalid_length", "Upload-Length: expected a whole number of bytes.")
    }

    /// The whole number of bytes the header `name` holds, nil when it is absent; `refusal` when it is there twice
    /// (a proxy may take the other one) or is anything but decimal digits (`Int64` alone takes "+3" and "-0").
    static func byteCount(_ headers: HTTPHeaders, _ name: String, else refusal: HTTPError) throws(HTTPError) -> Int64? {
        let values = headers.values(name)
        guard let text = values.first else { return nil }
        guard values.count == 1, !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let value = Int64(text) else { throw refusal }
        return value
    }

    /// A creation's headers: `Upload-Length` or `Upload-Defer-Length: 1` (one of them), and metadata that parses.
    private func newUpload(_ headers: HTTPHeaders) throws(HTTPError) -> TusUpload {
        let length = headers["Upload-Length"], deferred = headers["Upload-Defer-Length"]
        var declared: Int64?
        switch (length, deferred) {
        case (_?, nil):
            guard let value = try Self.byteCount(headers, "Upload-Length", else: lengthRefusal) else { throw lengthRefusal }
            guard value <= maxBytes else {
                throw refusal(.contentTooLarge, "upload_too_large", "Upload-Length: uploads may be at most \(maxBytes) bytes.")
            }
            declared = value
        case (nil, "1"?):
            declared = nil
        default:
            throw refusal(.badRequest, "invalid_length", "Send Upload-Length (the size in bytes) or Upload-Defer-Length: 1, not both.")
        }
        let metadata = headers["Upload-Metadata"] ?? ""
        guard let pairs = TusUpload.parseMetadata(metadata) else {
            throw refusal(.badRequest, "invalid_metadata", "Upload-Metadata: expected comma-separated `key base64value` pairs.")
        }
        if let settings = pairs["settings"] { try checkSettings(settings) }
        return TusUpload(id: Self.newID(), length: declared, metadata: metadata, createdAt: Date().timeIntervalSince1970)
    }

    /// `Upload-Checksum: <algorithm> <base64>`: the digest to run over the chunk and what it must come to.
    static func checksum(_ header: String?) throws(HTTPError) -> (Digest, Data)? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2, let algorithm = Digest.Algorithm(rawValue: parts[0].lowercased()) else {
            throw HTTPError(.badRequest, "unsupported_checksum", "Upload-Checksum: expected sha1, sha256 or md5 and a base64 digest.",
                            headers: HTTPHeaders([("Tus-Resumable", version)]), closeConnection: true)
        }
        guard let expected = Data(base64Encoded: String(parts[1])) else {
            throw HTTPError(.badRequest, "invalid_checksum", "Upload-Checksum: the digest is not base64.",
                            headers: HTTPHeaders([("Tus-Resumable", version)]), closeConnection: true)
        }
        return (Digest(algorithm), expected)
    }

    /// The id of the job a completion makes on upload `id`, derived from it (a name-based UUID, version 8, of
    /// SHA-256): a completion done again after a crash finds the job it made, where a random id could not tell that
    /// job from none and a second would be made. The description is not saved midway for it: the completion's lock
    /// is on the description's file, which a save replaces.
    static func jobID(for id: String) -> String {
        let digest = Digest(.sha256)
        Array("transcoderd tus job \(id)".utf8).withUnsafeBytes { digest.update($0) }
        var bytes = Array(digest.finishBytes().prefix(16))
        bytes[6] = bytes[6] & 0x0F | 0x80
        bytes[8] = bytes[8] & 0x3F | 0x80
        return uuid(bytes)
    }

    /// Sixteen bytes as a lowercase UUID.
    private static func uuid(_ bytes: [UInt8]) -> String {
        let characters = Array(bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined())
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
    }

    /// A random lowercase UUID from getrandom(2) (Foundation's UUID reads /dev/urandom: file work the loop avoids).
    private static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        return uuid(bytes)
    }

    /// A request without `Tus-Resumable` is malformed (400: a required header missing, as OpenAPI tools expect; tus
    /// asks 412 only of a version it does not speak); one with another version is one this server does not speak
    /// (412). Both name the versions it does.
    private func checkVersion(_ headers: HTTPHeaders) throws(HTTPError) {
        guard headers["Tus-Resumable"] != nil else {
            throw refusal(.badRequest, "missing_tus_resumable", "Tus-Resumable: send 1.0.0, the tus version this server speaks.",
                          headers: [("Tus-Version", Self.version)])
        }
        guard headers["Tus-Resumable"] == Self.version else {
            throw HTTPError(.preconditionFailed, "unsupported_version", "Tus-Resumable: this server speaks tus \(Self.version).",
                            headers: HTTPHeaders([("Tus-Version", Self.version), ("Tus-Resumable", Self.version)]))
        }
    }

    private func refusal(_ status: HTTPStatus, _ code: String, _ message: String, headers: [(String, String)] = []) -> HTTPError {
        HTTPError(status, code, message, headers: HTTPHeaders([("Tus-Resumable", Self.version)] + headers))
    }

    /// A description that is there but could not be read (`TusUploads.readUpload`) as the errno value `answer` turns
    /// into its refusal: ESTALE, not readable now (503 with Retry-After: a 404 has a client start the whole upload
    /// again, and a completion took it for "already done"); EIDRM, damaged for good (410, as tus says of an upload
    /// that existed: the client starts over, and the files go with the sweep).
    static func unreadable(_ error: MediaError) -> IOError {
        IOError(errnoCode: error.code == "storage_error" ? ESTALE : EIDRM, reason: error.message)
    }

    /// The answer for a refusal found as the file was opened or written (errno values `TusSink` chose).
    static func answer(_ error: IOError) -> HTTPError {
        let headers = HTTPHeaders([("Tus-Resumable", version)])
        switch error.errnoCode {
        case ENOENT: return HTTPError(.notFound, "upload_not_found", error.reason, headers: headers)
        case EWOULDBLOCK, EBUSY:
            // EBUSY: the holder on this node was told that another waits; it lets go within seconds if its client
            // went quiet.
            var locked = headers
            if error.errnoCode == EBUSY { locked.set("Retry-After", "1") }
            return HTTPError(.locked, "upload_locked", error.reason, headers: locked)
        case EIDRM: return HTTPError(.gone, "upload_damaged", error.reason, headers: headers) // `unreadable`
        case ESTALE: // `unreadable`
            var later = headers
            later.set("Retry-After", "5")
            return HTTPError(.serviceUnavailable, "storage_error", error.reason + " Ask again.", headers: later)
        case ESPIPE: return HTTPError(.conflict, "offset_mismatch", error.reason, headers: headers)
        case EFBIG:
            // A deferred length over the most an upload may be, as a creation's (`TusSink`); or bytes past the length.
            let message = error.reason.hasPrefix("Upload-Length") ? error.reason : "The chunk goes past the upload's length; nothing of it was kept."
            return HTTPError(.contentTooLarge, "upload_too_large", message, headers: headers)
        case EINVAL: return HTTPError(.badRequest, "invalid_length", error.reason, headers: headers)
        case ENOSPC, EDQUOT:
            // Not a plain upload's "discarded": the bytes written before stay, to be resumed.
            return HTTPError(.insufficientStorage, "no_space",
                             "The server's disk is full. The upload keeps the bytes that were written (a chunk sent with Upload-Checksum is not kept whole): ask HEAD for its offset and resume later.",
                             headers: headers)
        default:
            var answer = FileSink.httpError(error)
            answer.headers.set("Tus-Resumable", version)
            return answer
        }
    }

    // MARK: Handlers (on a pool)

    /// Adds `Tus-Resumable` and the CORS headers to the answer, an error's included.
    private func answering(_ request: Request, _ handler: () throws(HTTPError) -> Response) throws(HTTPError) -> Response {
        try Response.adding(answerHeaders(for: request.headers), to: handler)
    }

    /// What every answer to a request with these headers carries: `Tus-Resumable` and the CORS headers.
    private func answerHeaders(for headers: HTTPHeaders) -> [(String, String)] {
        cors.headers(for: headers, exposing: Self.exposed) + [("Tus-Resumable", Self.version)]
    }

    /// Completions an upload gets whose probe runs out of time before its bytes are refused (`probe_timeout`).
    static let probeTries = 3

    static let exposed = "Location, Upload-Offset, Upload-Length, Upload-Defer-Length, Upload-Expires, Upload-Metadata, "
        + "Tus-Resumable, Tus-Version, Tus-Extension, Tus-Max-Size, Tus-Checksum-Algorithm, Transcoder-Job, Retry-After"

    /// Discovery (`OPTIONS /v1/tus`), or a browser's preflight when it asks for one.
    private func options(_ request: Request) -> Response {
        var headers = HTTPHeaders([
            ("Tus-Resumable", Self.version), ("Tus-Version", Self.version), ("Tus-Extension", Self.extensions), ("Tus-Max-Size", String(maxBytes)),
            ("Tus-Checksum-Algorithm", Digest.Algorithm.allCases.map(\.rawValue).joined(separator: ",")),
        ])
        if request.headers["Access-Control-Request-Method"] != nil {
            for (name, value) in cors.preflight(for: request.headers, methods: "POST, HEAD, PATCH, DELETE, OPTIONS",
                                                headers: "Authorization, Content-Type, Tus-Resumable, Upload-Length, Upload-Defer-Length, "
                                                    + "Upload-Metadata, Upload-Offset, Upload-Checksum, X-HTTP-Method-Override",
                                                exposing: Self.exposed) {
                headers.set(name, value)
            }
        }
        return Response(.noContent, headers: headers)
    }

    private func create(_ request: Request) throws(HTTPError) -> Response {
        guard case .file(let body) = request.body else {
            throw refusal(.internalServerError, "storage_error", "The upload's body went missing.")
        }
        let id = String(URL(fileURLWithPath: body.path).lastPathComponent.dropLast(".bin".count))
        do throws(HTTPError) {
            _ = try body.complete(answering: Self.answer)
        } catch {
            // A first chunk refused (longer than the length, say) leaves the upload created, empty: its client
            // learns where, to send the bytes again, rather than leave it to expire and make another.
            var answer = error
            if uploads.upload(id) != nil { answer.headers.set("Location", "/v1/tus/\(id)") }
            throw answer
        }
        if let settings = uploads.upload(id).flatMap({ TusUpload.parseMetadata($0.metadata)?["settings"] }) {
            do throws(HTTPError) {
                try checkSettingsInStore(settings)
            } catch where error.status.code < 500 {
                // Refused as a whole: the upload goes (a 4xx names nothing to resume).
                _ = uploads.delete(id)
                digests.remove(id)
                var answer = error
                answer.headers.set("Tus-Resumable", Self.version)
                throw answer
            } catch {
                // The store failed for now: the creation stands (a 503 without Location had the client make
                // another), and the completion asks again.
            }
        }
        if body.chunkDiscarded {
            digests.remove(id)
            throw refusal(.checksumMismatch, "checksum_mismatch", "Upload-Checksum: the first chunk does not match; the upload was created empty.",
                          headers: [("Location", "/v1/tus/\(id)")])
        }
        guard var upload = uploads.upload(id) else { throw refusal(.notFound, "upload_not_found", "The upload vanished.") }
        var headers = HTTPHeaders([("Location", "/v1/tus/\(upload.id)")])
        do throws(HTTPError) {
            try advanced(&upload, by: body, headers: &headers)
        } catch {
            // The upload exists (and its bytes: a completion's refusal, or its failure for now, leaves them): a
            // client must still learn where, to ask again or to read what became of it, not create another.
            var answer = error
            for name in ["Location", "Upload-Offset"] { if let value = headers[name] { answer.headers.set(name, value) } }
            throw answer
        }
        return Response(.created, headers: headers)
    }

    private func head(_ request: Request) throws(HTTPError) -> Response {
        try checkVersion(request.headers)
        var upload: TusUpload
        do throws(HTTPError) {
            upload = try current(request)
        } catch where error.status == .serviceUnavailable {
            // Not readable now: 423, which tus clients ask again after; tus-js-client and Uppy take any other answer
            // to a HEAD but 2xx for an upload to start over, every byte sent again.
            throw HTTPError(.locked, error.code, error.message, headers: error.headers)
        }
        let whole = upload.completedAt == nil && upload.length.map { uploads.offset(of: upload) == $0 } == true
        if whole && uploads.isHeld(upload.id) {
            // Its last PATCH is still under way (its bytes written, not yet let go): the whole length now would
            // tell a client the upload is done before it is stored, and its id would name nothing. Its holder here
            // is told another waits: one whose body's end never came lets go in seconds, not the body's minute.
            _ = holders.want(upload.id)
            throw refusal(.locked, "upload_completing", "The upload's bytes are all there and its last PATCH is still under way; ask again.",
                          headers: [("Retry-After", "1")])
        }
        if whole {
            // All there, yet not complete: a completion cut short by a crash. The final PATCH got no answer, and a
            // client that sees the whole length here sends nothing more: it is done now. Never an answer that tells
            // a client to start over: one under way elsewhere, or a failure that is not the bytes' (the store, a
            // probe process), is 423 with Retry-After, which clients retry; a job the store refused leaves the
            // upload complete without one (as the last PATCH would have said).
            let beingCompleted = refusal(.locked, "upload_completing", "The upload's bytes are all there and it is being completed; ask again.",
                                         headers: [("Retry-After", "2")])
            let admitted = headCompletions.withLock { count -> Bool in
                guard count < Self.maxHeadCompletions else { return false }
                count += 1
                return true
            }
            guard admitted else { throw beingCompleted }
            defer { headCompletions.withLock { $0 -= 1 } }
            let completing: Bool
            do {
                completing = try complete(&upload, waiting: false)
            } catch where error.status.code >= 500 {
                throw refusal(.locked, "upload_completing", "The upload's bytes are all there; completing it failed for now (\(error.message)) Ask again.",
                              headers: [("Retry-After", "5")])
            } catch {
                completing = true
            }
            if !completing { throw beingCompleted }
        }
        if deletedSinceCompletion(upload) {
            // The whole length told a client that keeps upload URLs (tus-js-client, Uppy) that the same file, picked
            // again, is uploaded, under an id that names nothing.
            throw refusal(.notFound, "upload_not_found", "The upload \(upload.id) was completed and has been deleted since; upload the file again.")
        }
        var headers = HTTPHeaders([("Upload-Offset", String(uploads.offset(of: upload))), ("Cache-Control", "no-store")])
        if let length = upload.length { headers.set("Upload-Length", String(length)) } else { headers.set("Upload-Defer-Length", "1") }
        if !upload.metadata.isEmpty { headers.set("Upload-Metadata", upload.metadata) }
        if upload.completedAt == nil { headers.set("Upload-Expires", HTTPDate.format(uploads.expiresAt(upload))) }
        if let job = upload.jobID { headers.set("Transcoder-Job", "/v1/jobs/\(job)") }
        return Response(.ok, headers: headers)
    }

    /// Whether the upload was completed, stored, and deleted since (DELETE /v1/uploads, its job's deletion,
    /// retention). A store that cannot answer now says no: the answer stays as it was.
    private func deletedSinceCompletion(_ upload: TusUpload) -> Bool {
        guard upload.completedAt != nil, upload.refused == nil else { return false }
        do {
            return try storedUpload(upload.id) == nil
        } catch {
            return false
        }
    }

    private func patch(_ request: Request) throws(HTTPError) -> Response {
        guard case .file(let body) = request.body else {
            throw refusal(.internalServerError, "storage_error", "The chunk went missing.")
        }
        _ = try body.complete(answering: Self.answer)
        if body.chunkDiscarded {
            throw refusal(.checksumMismatch, "checksum_mismatch", "Upload-Checksum: the chunk does not match; nothing of it was kept.")
        }
        var upload = try current(request)
        var headers = HTTPHeaders()
        try advanced(&upload, by: body, headers: &headers)
        return Response(.noContent, headers: headers)
    }

    private func delete(_ request: Request) throws(HTTPError) -> Response {
        try checkVersion(request.headers)
        let upload = try current(request)
        guard uploads.delete(upload.id) else {
            // Its holder here is told another waits: a PATCH whose client went quiet (a client that gave up and now
            // terminates the upload) lets go in seconds; tus clients retry a 423 DELETE for a few seconds only.
            let told = holders.want(upload.id)
            throw refusal(.locked, "upload_locked", "A PATCH of this upload is still running; try again once it ends.",
                          headers: told ? [("Retry-After", "1")] : [])
        }
        digests.remove(upload.id)
        return Response(.noContent)
    }

    /// The upload's description, nil when there is none; one that cannot be read is refused (`unreadable`).
    private func description(_ id: String) throws(HTTPError) -> TusUpload? {
        do throws(MediaError) {
            return try uploads.readUpload(id)
        } catch {
            throw Self.answer(Self.unreadable(error))
        }
    }

    /// The upload the request names, unless it is gone or has expired (then its files go now).
    private func current(_ request: Request) throws(HTTPError) -> TusUpload {
        let id = request.parameters["id"] ?? ""
        guard let upload = try description(id) else { throw refusal(.notFound, "upload_not_found", "No upload has the id \(id.prefix(64)).") }
        uploads.recoverCompletion(of: upload)
        uploads.recoverChunk(of: upload)
        // Expired, unless a PATCH or a completion holds it now (then it is not deleted, and the request goes on:
        // a client told 404 would start the whole upload again).
        if uploads.isExpired(upload, at: Date().timeIntervalSince1970), uploads.delete(id) {
            digests.remove(id)
            throw refusal(.notFound, "upload_not_found", "The upload \(id) expired and was deleted.")
        }
        return upload
    }

    /// After bytes arrived: the new offset and expiry in `headers`, and the upload completed when it is all there
    /// (the running hash was kept for the next PATCH by the writer, `TusSink`).
    private func advanced(_ upload: inout TusUpload, by body: UploadBody, headers: inout HTTPHeaders) throws(HTTPError) {
        // The size the writer left under its lock: a stat now could already count the next PATCH's bytes.
        let offset = body.endSize ?? uploads.offset(of: upload)
        headers.set("Upload-Offset", String(offset))
        if let length = upload.length, offset == length, upload.completedAt == nil {
            try complete(&upload)
            // Deleted between this PATCH's last byte and its completion (a DELETE comes in once no PATCH holds the
            // upload): no job was made and the bytes are gone, which a 204 at the full offset hid from the client.
            if upload.completedAt == nil, try description(upload.id) == nil {
                throw refusal(.notFound, "upload_not_found", "The upload \(upload.id) was deleted as this PATCH ended; no job was made.")
            }
            if let job = upload.jobID { headers.set("Transcoder-Job", "/v1/jobs/\(job)") }
        } else if upload.completedAt == nil {
            headers.set("Upload-Expires", HTTPDate.format(uploads.expiresAt(upload)))
        }
    }

    /// The bytes are all there: they become an upload with the same id (or are refused as one, and deleted), and a
    /// job starts on it when the metadata carries `settings`. A completion that a crash cut short (here or on
    /// another node) is taken up where it stopped: bytes it left aside or had moved into the upload's place are used
    /// from there, an upload it recorded is not stored again, and the job's id is derived from the upload's, so it is
    /// made once. Without `waiting`, a completion under way in another request is left to it: returns false then.
    @discardableResult
    private func complete(_ upload: inout TusUpload, waiting: Bool = true) throws(HTTPError) -> Bool {
        // One request completes it: the one that takes the lock and finds it not complete (a second waits for the
        // lock and answers with the upload as the first leaves it). Held until the end: a request that finds the bytes
        // renamed aside and the lock free knows the completion died with its process; a DELETE meanwhile is refused,
        // as during a PATCH.
        guard let lock = uploads.lockCompletion(upload.id, waiting: waiting) else { return try description(upload.id) == nil }
        defer { close(lock) }
        guard var current = try description(upload.id) else { return true }
        defer { upload = current }
        guard current.completedAt == nil, let length = current.length else { return true }
        let metadata = TusUpload.parseMetadata(current.metadata) ?? [:]
        let stored: Upload
        if let recorded = try storedUpload(current.id) {
            // By a completion that died before saving the description. Its bytes are where the row says, unless
            // the row's insert lost its answer (a connection dropped at the commit): then they were put back.
            if access(recorded.path, F_OK) != 0 {
                guard let found = uploads.bytesLocation(of: current), rename(found.path, recorded.path) == 0 else {
                    throw refusal(.internalServerError, "storage_error",
                                  "The upload's bytes could not be put where its record says: \(String(cString: strerror(errno))).")
                }
                try? FileDurability.syncDirectory(containing: recorded.path)
            }
            stored = recorded
        } else {
            guard let file = try aside(current, length: length, metadata: metadata) else { return true }
            do {
                stored = try store(file, current.id)
            } catch where error.code == "probe_timeout" && (current.probeTimeouts ?? 0) + 1 < Self.probeTries {
                // Refused at once, a whole upload was deleted because the machine was busy for a moment: the bytes
                // stay, the try is counted, and the next ask (a PATCH at the length, a HEAD, the server's own
                // sweep) tries again; the last of `probeTries` refuses them as any other.
                current.probeTimeouts = (current.probeTimeouts ?? 0) + 1
                rename(file.path, uploads.dataPath(current.id))
                try save(current)
                throw refusal(.serviceUnavailable, "probe_timeout",
                              "\(error.message) The bytes are kept (try \(current.probeTimeouts ?? 0) of \(Self.probeTries)): ask again.",
                              headers: [("Retry-After", "5")])
            } catch where error.status == .unprocessableContent {
                digests.remove(current.id)
                current.completedAt = Date().timeIntervalSince1970
                current.refused = error.message
                // Saved before the bytes go: a crash or a full disk between the two left a description waiting
                // for bytes that were nowhere, which HEAD answered as complete.
                try save(current)
                unlink(file.path)
                return true
            } catch {
                // Not the bytes' fault (the store or the disk): they stay, and a PATCH at the length (no bytes) or a
                // HEAD completes it again.
                rename(file.path, uploads.dataPath(current.id))
                throw error
            }
        }
        // Settings were checked at creation; what only the store or the upload's tracks can refuse (a watermark
        // upload gone since, pictures of a song, every track dropped) is the final PATCH's answer, the upload kept. A store that fails (5xx) leaves it to be done again.
        var failure: HTTPError?
        if let settings = metadata["settings"] {
            do {
                current.jobID = try createJob(stored, settings, Self.jobID(for: current.id))
            } catch where error.status.code >= 500 {
                throw error
            } catch {
                failure = error
            }
        }
        digests.remove(current.id)
        current.completedAt = Date().timeIntervalSince1970
        try save(current)
        if let failure { throw failure }
        return true
    }

    /// The complete bytes, renamed aside (`completingPath`) from `.bin`, or found where a completion that died left
    /// them: aside, or moved into the upload's place and not recorded. Nil when they are nowhere, or not all there
    /// (they go back to `.bin`).
    private func aside(_ upload: TusUpload, length: Int64, metadata: [String: Data]) throws(HTTPError) -> UploadedFile? {
        let path = uploads.completingPath(upload.id)
        guard let found = uploads.bytesLocation(of: upload), found.path == path || rename(found.path, path) == 0 else { return nil }
        var status = stat()
        guard stat(path, &status) == 0, Int64(status.st_size) == length else {
            rename(path, uploads.dataPath(upload.id))
            return nil
        }
        let digest: Digest
        if let running = digests.take(upload.id, at: length) { digest = running } else { digest = try Self.hash(path) }
        // Kept until the completion ends (`complete` removes it): one that fails for now (the probe ran out of
        // time on a busy machine, the store failed) is tried again without reading the whole file again.
        digests.put(upload.id, digest.copy(), offset: length)
        let sha256 = digest.finish()
        let text = { (key: String) -> String? in metadata[key].map { String(decoding: $0, as: UTF8.self) } }
        return UploadedFile(path: path, size: length, sha256: sha256, filename: text("filename"),
                            contentType: text("filetype").map(Self.cleanType))
    }

    /// Completes the uploads whose bytes all arrived but whose completion a crash cut short or that failed for now:
    /// their clients sent everything and may never ask again. Not one written to since `cutoff` (seconds since 1970:
    /// its last PATCH may be about to complete it, and answer with its job, or has just been answered), nor one `skip`
    /// names. Blocking (probes, the store): on a thread of its own. Returns the ids completed, and those that failed
    /// with why.
    func completeInterrupted(writtenBefore cutoff: Double, skip: (String) -> Bool = { _ in false })
        -> (completed: [String], failed: [(id: String, error: HTTPError)]) {
        var completed: [String] = [], failed: [(String, HTTPError)] = []
        for var upload in uploads.uncompleted() where !uploads.isHeld(upload.id) && !skip(upload.id)
            && uploads.lastWrite(of: upload) < cutoff {
            do {
                try complete(&upload, waiting: false)
                if upload.completedAt != nil { completed.append(upload.id) }
            } catch {
                failed.append((upload.id, error))
            }
        }
        return (completed, failed)
    }

    private func save(_ upload: TusUpload) throws(HTTPError) {
        do {
            try uploads.save(upload)
        } catch {
            throw refusal(.internalServerError, error.code, error.message)
        }
    }

    /// A content type as a token of printable ASCII, at most 255 bytes.
    private static func cleanType(_ type: String) -> String {
        String(type.unicodeScalars.filter { $0.value > 0x20 && $0.value < 0x7F }.prefix(255).map(Character.init))
    }

    /// SHA-256 of a whole file (when the running hash was lost: a restart, another node), read in 1 MiB pieces.
    private static func hash(_ path: String) throws(HTTPError) -> Digest {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw HTTPError(.internalServerError, "storage_error", "Reading the upload failed: \(String(cString: strerror(errno))).")
        }
        defer { close(descriptor) }
        let digest = Digest()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { buffer.deallocate() }
        while true {
            let count = read(descriptor, buffer.baseAddress, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw HTTPError(.internalServerError, "storage_error", "Reading the upload failed: \(String(cString: strerror(errno))).")
            }
            if count == 0 { break }
            digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
        return digest
    }
}
