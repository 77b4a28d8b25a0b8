import Crypto
import Logging
import Foundation
import Glibc
import Jobs
import Pipeline
import Locks
import Outbound

/// The transcoderd API: uploads, jobs, live progress, downloads, presets and health. Handlers run on the server's
/// fixed pools (they block on SQLite and on probing uploads), never on an event loop.
public final class TranscoderAPI: Sendable {
    let queue: JobQueue
    /// Reads an upload's tracks: in a sandboxed child process, so the server never parses media itself.
    let prober: any MediaProber
    let logger: Logger
    let metricsText: @Sendable () -> String
    /// Other origins allowed to read output files (none by default).
    let cors: CORSPolicy
    /// Rendered job JSON by id: pollers of a job that is not moving get the same bytes without a database read and
    /// without encoding it again. An entry is current while the store's generation and the job's live progress are
    /// what they were; after other writes, while its `updated_at` and live progress are unchanged.
    private let rendered = LockedValue(RenderedJobs<RenderedJob>())

    private struct RenderedJob {
        /// The store's generation read before the job was.
        var generation: Int64
        let updatedAt: Double
        let liveTime: LiveStamp?
        let data: Data
    }

    /// Succeeded jobs' output files by path, for a player's requests: a 2 h ladder has some 14,000 files and a
    /// request for each, and reading and decoding the job's whole list for every one made a playback cost the
    /// square of its length. An entry serves while the job's `updated_at` is what it was.
    private let outputIndexes = LockedValue(BoundedCache<String, OutputIndex>(capacity: 64))

    private struct OutputIndex {
        let updatedAt: Double
        let job: Job
        let files: [String: OutputFile]
    }

    /// What moves while a job runs here without a store write (and changes its JSON).
    private enum LiveStamp: Equatable {
        case fetched(bytes: Int64)
        /// An earlier attempt's checkpoint is being checked.
        case verifying
        case transcoded(seconds: Double)
        /// The output file is being completed: the seconds stay put, the phase changed.
        case finishing(seconds: Double)
    }

    /// Resumable uploads (tus), kept in the data directory's `tus/` until complete.
    let tusUploads: TusUploads
    private let tusDigests = TusDigests()
    /// Interrupted completions that failed: how often, and when the next try is due (a store or disk that stays
    /// down is not asked to hash and probe every such upload again every minute).
    private let recoveryFailures = LockedValue<[String: (count: Int, next: ContinuousClock.Instant)]>([:])
    let maxUploadBytes: Int64
    /// Downloads inputs given by URL (`POST /v1/uploads` with `{"url": …}`), under the outbound address policy.
    let fetcher: URLFetcher
    /// `--webhook-url`: every job accepted here also announces its state changes there.
    let serverWebhookURL: String?
    /// The server's token, for the page's session cookie.
    public let authentication: BearerToken
    /// The browser page and its assets.
    let web = WebPage()

    public init(queue: JobQueue, prober: any MediaProber, logger: Logger, cors: CORSPolicy = CORSPolicy(nil),
                tusExpiryHours: Double = 24, maxUploadBytes: Int64 = 20 * 1024 * 1024 * 1024,
                fetcher: URLFetcher? = nil, serverWebhookURL: String? = nil, authentication: BearerToken = BearerToken(nil),
                metricsText: @escaping @Sendable () -> String = { "" }) {
        self.cors = cors
        self.authentication = authentication
        self.serverWebhookURL = serverWebhookURL
        self.fetcher = fetcher ?? URLFetcher(policy: AddressPolicy(), maxBytes: maxUploadBytes)
        tusUploads = TusUploads(directory: queue.directory, expiryHours: tusExpiryHours)
        // The first digest of a process loads OpenSSL's configuration file: here, not on an event loop (a tus
        // request makes its digests there).
        _ = Digest().finish()
        self.maxUploadBytes = maxUploadBytes
        self.queue = queue
        self.prober = prober
        self.logger = logger
        self.metricsText = metricsText
    }

    private var store: any JobStore { queue.store }
    private var directory: DataDirectory { queue.directory }

    /// Every route of the API.
    public var router: Router {
        // Output routes answer a page on another origin, refusals before the handler (a missing token) included.
        let corsHeaders: Router.RefusalHeaders = { [cors] in cors.headers(for: $0) }
        var routes: [Router.Definition] = [
            // Alive is alive at the connection cap too: an orchestrator's liveness probe would restart a busy server.
            .init("GET", "/healthz", inline: true, whenFull: true) { _ throws(HTTPError) in .json(APIModels.Status(status: "ok")) },
            .init("GET", "/", inline: true) { [web] request throws(HTTPError) in web.index(request) },
            .init("GET", "/assets/{build}/{name}", inline: true) { [web] request throws(HTTPError) in try web.asset(request) },
            // The page's sign-in: the bearer header (checked before the handler) buys a session cookie for the
            // browser's own reads (see `BearerToken`).
            .init("POST", "/v1/session", inline: true) { [authentication] request throws(HTTPError) in
                var headers = HTTPHeaders()
                if let cookie = authentication.sessionCookie(secure: BearerToken.cameOverHTTPS(request.headers)) {
                    headers.set("Set-Cookie", cookie)
                }
                headers.set("Cache-Control", "no-store")
                return Response(.noContent, headers: headers)
            },
            .init("GET", "/v1/session", inline: true) { [authentication] request throws(HTTPError) in
                .json(APIModels.Session(required: authentication.isEnabled, session: authentication.hasSession(request.head)),
                      headers: HTTPHeaders([("Cache-Control", "no-store")]))
            },
            .init("DELETE", "/v1/session", inline: true) { [authentication] _ throws(HTTPError) in
                Response(.noContent, headers: HTTPHeaders([("Set-Cookie", authentication.expiredCookie), ("Cache-Control", "no-store")]))
            },
            .init("GET", "/readyz") { [self] _ throws(HTTPError) in try ready() },
            .init("GET", "/metrics") { [self] _ throws(HTTPError) in metrics() },
            .init("GET", "/v1/presets", inline: true) { _ throws(HTTPError) in
                .json(Preset.all.map { APIModels.PresetResource(name: $0.name, summary: $0.summary, settings: $0.settings) })
            },
            .init("POST", "/v1/uploads", body: .uploadOrMultipart) { [self] request throws(HTTPError) in try createUpload(request) },
            .init("PUT", "/v1/uploads/{filename}", body: .upload) { [self] request throws(HTTPError) in try createUpload(request) },
            .init("GET", "/v1/uploads/{id}") { [self] request throws(HTTPError) in .json(APIModels.UploadResource(try upload(request))) },
            .init("DELETE", "/v1/uploads/{id}") { [self] request throws(HTTPError) in try deleteUpload(request) },
            .init("POST", "/v1/jobs", body: .jsonOrMultipart(fields: ["settings", "priority", "webhook"])) { [self] request throws(HTTPError) in try createJob(request) },
            .init("GET", "/v1/jobs") { [self] request throws(HTTPError) in try listJobs(request) },
            .init("GET", "/v1/jobs/{id}", quickAnswer: { [self] request in cachedJobJSON(request) }) { [self] request throws(HTTPError) in
                try jobJSON(request)
            },
            // Deleting a running job waits (up to 5 s) for it to stop: on the pool for waits.
            .init("DELETE", "/v1/jobs/{id}", pool: .waiting) { [self] request throws(HTTPError) in try deleteJob(request) },
            .init("GET", "/v1/jobs/{id}/events") { [self] request throws(HTTPError) in try events(request) },
            .init("GET", "/v1/jobs/{id}/output", refusalHeaders: corsHeaders) { [self] request throws(HTTPError) in
                try withCORS(request) { () throws(HTTPError) in try output(request) }
            },
            .init("GET", "/v1/jobs/{id}/output/{path...}", refusalHeaders: corsHeaders) { [self] request throws(HTTPError) in
                try withCORS(request) { () throws(HTTPError) in try outputFile(request) }
            },
            // Waits (up to a minute) when the job's end is being recorded: not on the pool every request needs.
            .init("POST", "/v1/jobs/{id}/cancel", pool: .waiting) { [self] request throws(HTTPError) in try cancel(request) },
            .init("GET", "/v1/jobs/{id}/webhooks") { [self] request throws(HTTPError) in try deliveries(request) },
            .init("POST", "/v1/jobs/{id}/webhooks/{delivery}/redeliver") { [self] request throws(HTTPError) in try redeliver(request) },
        ]
        routes += tus.routes
        if cors.isEnabled {
            // Preflights for players on another origin (sent without credentials; they answer only headers, alike
            // for any id: they tell nothing of the job). Only with --cors-origin, as the OpenAPI document says of the
            // output routes: answered always, a preflight of a deleted job's output read as the job still there.
            for path in ["/v1/jobs/{id}/output", "/v1/jobs/{id}/output/{path...}"] {
                routes.append(.init("OPTIONS", path, inline: true) { [cors] request throws(HTTPError) in
                    Response(.noContent, headers: HTTPHeaders(cors.preflight(for: request.headers)))
                })
            }
        }
        return Router(routes)
    }

    /// Runs an output handler and adds the CORS headers to its answer, an error included.
    private func withCORS(_ request: Request, _ handler: () throws(HTTPError) -> Response) throws(HTTPError) -> Response {
        try Response.adding(cors.headers(for: request.headers), to: handler)
    }

    // MARK: Health

    private func ready() throws(HTTPError) -> Response {
        // Not ready is an error answer like any other ({"error": {"code", "message"}}), so a probe's log says why.
        do {
            try store.ping()
        } catch {
            logger.warning("not ready: the job store is out of reach", ["error": .string(error.message)])
            throw HTTPError(.serviceUnavailable, "store_unavailable", "The job store cannot be reached.")
        }
        guard queue.isReady else { throw HTTPError(.serviceUnavailable, "workers_not_running", "The job workers are not running.") }
        guard queue.seesSharedFolder else {
            throw HTTPError(.serviceUnavailable, "data_directory_missing",
                            "The shared data directory is not here (its store-id cannot be read): is its mount still there?")
        }
        return .json(APIModels.Status(status: "ready"))
    }

    private func metrics() -> Response {
        var headers = HTTPHeaders()
        headers.set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        return Response(.ok, headers: headers, body: .data(Data(metricsText().utf8)))
    }

    // MARK: Uploads

    private func createUpload(_ request: Request) throws(HTTPError) -> Response {
        let file: UploadedFile
        switch request.body {
        case .file(let body):
            var named = try body.complete()
            named.filename = request.parameters["filename"].flatMap { $0.isEmpty ? nil : $0 }
                ?? request.headers["Content-Disposition"].flatMap { HeaderParameter.value("filename", in: $0) }
            named.contentType = request.headers["Content-Type"]
            file = named
        case .multipart(let body?, _):
            file = try body.complete()
        case .multipart(nil, _):
            throw HTTPError(.badRequest, "missing_file", "The multipart body needs a part named file (curl -F file=@in.mov).")
        case .data(let data):
            file = try fetch(try Self.urlField(data), for: request.client)
        default:
            throw HTTPError(.badRequest, "missing_file", "Send the media as the request body or as a multipart part named file.")
        }
        let upload: Upload
        do {
            upload = try store(file)
        } catch {
            // A request body's temporary goes after the answer; a download's is this handler's own.
            if case .data = request.body { unlink(file.path) }
            throw error
        }
        var headers = HTTPHeaders()
        headers.set("Location", "/v1/uploads/\(upload.id)")
        return .json(APIModels.UploadResource(upload), status: .created, headers: headers)
    }

    /// `{"url": "http(s)://…"}`, the only key of a request to fetch an upload.
    private static func urlField(_ data: Data) throws(HTTPError) -> String {
        let object = try jsonObject(data)
        if let unknown = object.keys.sorted().first(where: { $0 != "url" }) {
            throw HTTPError(.badRequest, "invalid_request", "\(unknown): unknown key; expected url.")
        }
        guard case .string(let given)? = object["url"], !given.isEmpty else {
            throw HTTPError(.badRequest, "invalid_request", "url: expected the http or https URL of the media (a string).")
        }
        // Checked as a job's input URL is, before libcurl sees it: it reads spellings URLComponents finds no host in
        // (`http:/user:pw@host/`) as credentials, which the redaction of logged URLs then missed. Kept in its ASCII
        // form (`URLFetcher.fetchable`), which libcurl reads.
        guard let url = URLFetcher.fetchable(given) else {
            throw HTTPError(.unprocessableContent, "invalid_url", "url: not an http or https URL with a host, of at most 2048 bytes.")
        }
        return url
    }

    /// Downloads `url` into a temporary upload file (named like a request body's, so a crash leaves nothing the
    /// next start does not delete); refusals are 422 with the fetcher's code. A client that leaves stops it: a
    /// download nobody awaits would hold a fetch thread (for up to `--fetch-timeout`) and store an upload whose id
    /// nobody learns.
    private func fetch(_ url: String, for client: ClientPresence) throws(HTTPError) -> UploadedFile {
        let path = directory.uploads.appendingPathComponent(DataDirectory.partialUploadName("fetch-\(UUID().uuidString.lowercased())")).path
        let fetched: URLFetcher.Fetched
        let left = OutboundError(code: "canceled", message: "The client left.")
        do throws(OutboundError) {
            guard !client.hasLeft else { throw left }
            fetched = try fetcher.fetch(url, to: path) { _, _ in !client.hasLeft }
            guard !client.hasLeft else {
                // Left as the last bytes came: nobody would learn the upload's id.
                unlink(path)
                throw left
            }
        } catch where error.code == "canceled" {
            logger.info("fetching an upload stopped: the client left", ["url": .string(RedactedURL.text(url))])
            throw HTTPError(.unprocessableContent, error.code, error.message)
        } catch where error.code == "no_space" {
            logger.warning("fetching an upload failed: the disk is full", ["url": .string(RedactedURL.text(url))])
            throw HTTPError(.insufficientStorage, error.code, "The server's disk is full; the download was discarded.")
        } catch where error.code == "storage_error" {
            logger.error("fetching an upload failed", ["url": .string(RedactedURL.text(url)), "message": .string(error.message)])
            throw HTTPError(.internalServerError, error.code, error.message)
        } catch {
            logger.info("fetching an upload failed", ["url": .string(RedactedURL.text(url)), "code": .string(error.code)])
            throw HTTPError(.unprocessableContent, error.code, error.message)
        }
        logger.info("upload fetched", ["url": .string(RedactedURL.text(url)), "bytes": .int(Int(fetched.size))])
        return UploadedFile(path: path, size: fetched.size, sha256: fetched.sha256, filename: fetched.filename,
                            contentType: fetched.contentType)
    }

    /// Completes the resumable uploads whose bytes all arrived but whose completion a crash cut short or that failed
    /// for now (their jobs start), but for those written to since `writtenBefore` (seconds since 1970; by default 5 s
    /// ago), logging what it did. At start and then periodically, on a thread of its own: it probes files and writes
    /// to the store. One that fails is tried again 1, 2, 4 … minutes later, at most an hour.
    public func completeInterruptedUploads(writtenBefore cutoff: Double = Date().timeIntervalSince1970 - 5) {
        let now = ContinuousClock.now
        let failures = recoveryFailures.withLock { failures in
            failures = failures.filter { tusUploads.upload($0.key).map { $0.completedAt == nil } ?? false } // gone meanwhile
            return failures
        }
        let (completed, failed) = tus.completeInterrupted(writtenBefore: cutoff,
                                                          skip: { id in failures[id].map { now < $0.next } ?? false })
        if !completed.isEmpty { logger.info("completed resumable uploads whose completion had not ended", ["count": .int(completed.count)]) }
        recoveryFailures.withLock { failures in
            for id in completed { failures[id] = nil }
            for (id, _) in failed {
                // 1, 2, 4 … minutes apart, at most an hour.
                let count = (failures[id]?.count ?? 0) + 1
                failures[id] = (count, now + .seconds(60 * min(60, 1 << min(count - 1, 6))))
            }
        }
        for (id, error) in failed {
            logger.error("completing a resumable upload failed", ["upload_id": .string(id), "code": .string(error.code),
                                                                  "error": .string(error.message)])
        }
    }

    /// The tus endpoint, completing uploads and starting their jobs through this API's own paths.
    private var tus: TusEndpoint {
        TusEndpoint(uploads: tusUploads, digests: tusDigests, maxBytes: maxUploadBytes, cors: cors,
                    store: { [self] file, id throws(HTTPError) in try store(file, id: id) },
                    storedUpload: { [self] id throws(HTTPError) in try fromStore { () throws(StoreError) in try store.upload(id: id) } },
                    createJob: { [self] upload, settings, id throws(HTTPError) in try createJob(on: upload, settings: settings, id: id) },
                    checkSettings: { data throws(HTTPError) in _ = try Self.settings(Self.settingsField(data)) },
                    checkSettingsInStore: { [self] data throws(HTTPError) in try checkWatermark(Self.settings(Self.settingsField(data))) })
    }

    /// A job on a complete tus upload, with the settings its metadata carried, under `id`; returns the job's id.
    /// Made once: a completion done again after a crash finds the job it made before.
    private func createJob(on upload: Upload, settings data: Data, id: String) throws(HTTPError) -> String {
        if let made = try fromStore({ () throws(StoreError) in try store.job(id: id) }) { return made.id }
        let settings = try Self.settings(Self.settingsField(data))
        try checkWatermark(settings)
        try checkTracks(of: upload, for: settings)
        let job: Job
        do {
            job = try store.createJob(id: id, input: upload.id, settings: settings, priority: 0,
                                      webhooks: JobWebhooks(serverURL: serverWebhookURL))
        } catch where error.code == "watermark_not_found" {
            throw HTTPError(.unprocessableContent, "invalid_settings", "settings.filters.video.watermark.upload: \(error.message)")
        } catch where error.code == "job_exists" {
            return id // another completion of this upload (another node's, or one recovering it) made it meanwhile
        } catch {
            throw storeFailure(error)
        }
        queue.jobQueued()
        logger.info("job queued", ["job_id": .string(job.id), "upload_id": .string(upload.id), "from": .string("tus")])
        return job.id
    }

    /// Makes an uploaded body durable, probes it, and records it (under `id`, by default a new one); a file FFmpeg
    /// cannot read is refused (422) and left where it was, and so is one given an `id` when storing it fails.
    private func store(_ file: UploadedFile, id: String? = nil) throws(HTTPError) -> Upload {
        guard file.size > 0 else {
            throw HTTPError(.unprocessableContent, "empty_upload", "The upload is empty.")
        }
        let tracks: [Track]
        do {
            tracks = try prober.probe(path: file.path)
        } catch where error.code == "worker_unavailable" || error.code == "worker_failed" {
            // Not the file's fault (no process to probe it in, or one that answered nonsense): 503, and a tus
            // upload's bytes are kept for the client's next try; a 422 would have them deleted as not media.
            var headers = HTTPHeaders()
            headers.set("Retry-After", "5")
            throw HTTPError(.serviceUnavailable, "probe_unavailable", "The file could not be examined now: \(error.message) Try again.",
                            headers: headers)
        } catch {
            throw HTTPError(.unprocessableContent, error.code, error.message)
        }
        guard tracks.contains(where: { $0.mediaType == .video || $0.mediaType == .audio }) else {
            throw HTTPError(.unprocessableContent, "no_media_tracks", "The file has neither a video nor an audio track.")
        }
        let given = id != nil
        let id = id ?? UUID().uuidString.lowercased()
        let path = directory.uploadPath(id: id)
        // Data, then name: a 201 means the file survives a power cut, not only a process crash.
        var moved = false
        do throws(MediaError) {
            try FileDurability.syncFile(atPath: file.path)
            guard rename(file.path, path) == 0 else {
                throw MediaError(code: "storage_error", message: "Storing the upload failed: \(String(cString: strerror(errno))).")
            }
            moved = true
            try FileDurability.syncDirectory(containing: path)
        } catch {
            // A file kept elsewhere on failure (a tus upload's only copy) goes back; a request's temporary goes. Only
            // when this call moved it: what is at `path` otherwise is not its own (another completion's, stored).
            if given { if moved { rename(path, file.path) } } else { unlink(path) }
            throw HTTPError(.internalServerError, error.code, error.message)
        }
        let upload = Upload(id: id, filename: Upload.cleanFilename(file.filename), contentType: file.contentType, size: Int(file.size),
                            sha256: file.sha256, path: path, tracks: tracks, createdAt: Date().timeIntervalSince1970)
        do {
            try store.insert(upload)
        } catch {
            if given { rename(path, file.path) } else { unlink(path) }
            throw storeFailure(error)
        }
        logger.info("upload stored", ["upload_id": .string(id), "bytes": .int(upload.size)])
        return upload
    }

    private func upload(_ request: Request) throws(HTTPError) -> Upload {
        let id = request.parameters["id"] ?? ""
        let found = try fromStore { () throws(StoreError) in try store.upload(id: id) }
        guard let found else {
            // A resumable upload whose bytes were refused: say why, as long as it is remembered.
            if let refused = tusUploads.upload(id)?.refused {
                throw HTTPError(.unprocessableContent, "upload_refused", "The upload's bytes are not usable media: \(refused)")
            }
            throw HTTPError(.notFound, "upload_not_found", "No upload has the id \(id.prefix(64)).")
        }
        return found
    }

    /// Deletes an upload no job uses (as its input or its watermark): its row, then its file; 409 while one does.
    private func deleteUpload(_ request: Request) throws(HTTPError) -> Response {
        let upload = try upload(request)
        do {
            try store.deleteUpload(id: upload.id)
        } catch where error.isStillReferenced {
            throw HTTPError(.conflict, "upload_in_use",
                            "Jobs use upload \(upload.id) as their input or watermark; DELETE /v1/jobs/{id} removes a job, and its input upload once no other job uses it.")
        } catch {
            throw storeFailure(error)
        }
        unlink(upload.path)
        logger.info("upload deleted", ["upload_id": .string(upload.id)])
        return Response(.noContent)
    }

    /// Deletes an upload this request stored when the request is then refused: a refused request leaves nothing.
    private func discardUpload(_ upload: Upload) {
        do {
            try store.deleteUpload(id: upload.id)
            unlink(upload.path)
        } catch {
            logger.error("removing the upload of a refused request failed", ["upload_id": .string(upload.id), "error": .string(error.description)])
        }
    }

    // MARK: Jobs

    private func createJob(_ request: Request) throws(HTTPError) -> Response {
        let settings: TranscodeSettings
        var priority = 0
        var webhook: WebhookTarget?
        let input: Upload
        var stored: Upload?
        switch request.body {
        case .data(let data):
            guard request.headers["Content-Type"]?.lowercased().hasPrefix("application/json") ?? true else {
                throw HTTPError(.unsupportedMediaType, "unsupported_media_type",
                                "Send application/json, or multipart/form-data with a file part.")
            }
            let object = try Self.jsonObject(data)
            if let unknown = object.keys.sorted().first(where: { !["input", "settings", "priority", "webhook"].contains($0) }) {
                throw HTTPError(.badRequest, "invalid_request", "\(unknown): unknown key; expected input, settings, priority, webhook.")
            }
            webhook = try object["webhook"].map { value throws(HTTPError) in try webhookTarget(value) }
            settings = try Self.settings(object["settings"] ?? .object([:]))
            priority = try Self.priority(object["priority"])
            try checkWatermark(settings)
            switch object["input"] {
            case .string(let id)?:
                guard let found = try fromStore({ () throws(StoreError) in try store.upload(id: id) }) else {
                    throw HTTPError(.unprocessableContent, "upload_not_found", "input: no upload has the id \(id.prefix(64)).")
                }
                guard !found.awaitsFetch else {
                    throw HTTPError(.conflict, "upload_not_ready", "input: upload \(found.id) is still to be fetched from its URL by the job that named it.")
                }
                input = found
            case .object(let fields)?:
                input = try waitingUpload(fields)
                stored = input
            default:
                throw HTTPError(.badRequest, "invalid_request", "input: expected the id of an upload (a string) or {\"url\": \"https://…\"}.")
            }
        case .multipart(let file, let fields):
            guard let file else {
                throw HTTPError(.badRequest, "missing_file", "The multipart body needs a part named file (curl -F file=@in.mov).")
            }
            settings = try fields["settings"].map { data throws(HTTPError) in try Self.settings(Self.settingsField(data)) }
                ?? TranscodeSettings()
            // Read as JSON, as the same key is in a JSON body (`5.0` and `null` accepted there too).
            if let text = fields["priority"] { priority = try Self.priority((try? JSONValue.parse(text)) ?? .string("")) }
            if let data = fields["webhook"] { webhook = try webhookTarget(try Self.jsonValue(data, key: "webhook")) }
            // Everything the request alone can refuse is checked before the file is kept (what its tracks refuse,
            // after: the file is then discarded).
            try checkWatermark(settings)
            input = try store(try file.complete())
            stored = input
        default:
            throw HTTPError(.badRequest, "invalid_request", "Send {\"input\": \"<upload id>\", \"settings\": {...}} as JSON, or a multipart body.")
        }
        do throws(HTTPError) {
            try checkTracks(of: input, for: settings)
        } catch {
            if let stored { discardUpload(stored) }
            throw error
        }
        let job: Job
        do {
            job = try store.createJob(input: input.id, settings: settings, priority: priority,
                                      webhooks: JobWebhooks(target: webhook, serverURL: serverWebhookURL))
        } catch {
            if let stored { discardUpload(stored) }
            switch error.code {
            case "upload_not_found":
                throw HTTPError(.unprocessableContent, "upload_not_found", "input: no upload has the id \(input.id).")
            case "watermark_not_found":
                throw HTTPError(.unprocessableContent, "invalid_settings", "settings.filters.video.watermark.upload: \(error.message)")
            default:
                throw storeFailure(error)
            }
        }
        queue.jobQueued()
        logger.info("job queued", ["job_id": .string(job.id), "upload_id": .string(input.id)])
        var headers = HTTPHeaders()
        headers.set("Location", "/v1/jobs/\(job.id)")
        return .json(resource(job, input: input), status: .created, headers: headers)
    }

    /// `"webhook": {"url": "https://…", "events": [...]}` (events: by default how the job ends). A URL whose host is
    /// an address the outbound policy refuses is refused now; names are checked when a delivery connects.
    private func webhookTarget(_ value: JSONValue) throws(HTTPError) -> WebhookTarget {
        guard case .object(let object) = value else {
            throw HTTPError(.badRequest, "invalid_request", "webhook: expected an object with url and events.")
        }
        if let unknown = object.keys.sorted().first(where: { !["url", "events"].contains($0) }) {
            throw HTTPError(.badRequest, "invalid_request", "webhook.\(unknown): unknown key; expected url, events.")
        }
        guard case .string(let given)? = object["url"] else {
            throw HTTPError(.badRequest, "invalid_request", "webhook.url: expected an http or https URL of at most 2048 bytes.")
        }
        // As an upload's URL is refused (`POST /v1/uploads`), and as one that leads where it may not: one code to
        // handle, wherever a URL is given. Kept in its ASCII form, as deliveries post to it.
        guard let url = WebhookTarget.validURL(given) else {
            throw HTTPError(.unprocessableContent, "invalid_url", "webhook.url: not an http or https URL with a host, of at most 2048 bytes.")
        }
        try checkAddress(url, key: "webhook.url")
        var events = WebhookEvent.terminal
        if let given = object["events"] {
            let names = WebhookEvent.allCases.map(\.rawValue).joined(separator: ", ")
            guard case .array(let items) = given, !items.isEmpty else {
                throw HTTPError(.badRequest, "invalid_request", "webhook.events: expected a non-empty list of \(names).")
            }
            events = []
            for (index, item) in items.enumerated() {
                guard case .string(let name) = item, let event = WebhookEvent(rawValue: name) else {
                    throw HTTPError(.badRequest, "invalid_request", "webhook.events[\(index)]: expected one of \(names).")
                }
                if !events.contains(event) { events.append(event) }
            }
        }
        return WebhookTarget(url: url, events: events)
    }

    /// Refuses (422 `url_not_allowed`) a URL whose host is a literal address the outbound policy refuses.
    private func checkAddress(_ url: String, key: String) throws(HTTPError) {
        if let (address, kind) = fetcher.policy.refusal(ofURL: url) {
            throw HTTPError(.unprocessableContent, "url_not_allowed",
                            "\(key): \(address) is \(AddressPolicy.phrase(kind)), which this server does not connect to (--allow-private-urls can allow it).")
        }
    }

    /// `"input": {"url": "https://…"}`: an upload row that waits, without bytes, for the worker running the job to
    /// fetch them (the job is `running` with `progress.phase` `fetching` meanwhile).
    private func waitingUpload(_ fields: [String: JSONValue]) throws(HTTPError) -> Upload {
        if let unknown = fields.keys.sorted().first(where: { $0 != "url" }) {
            throw HTTPError(.badRequest, "invalid_request", "input.\(unknown): unknown key; expected url.")
        }
        guard case .string(let given)? = fields["url"] else {
            throw HTTPError(.badRequest, "invalid_request", "input.url: expected an http or https URL of at most 2048 bytes.")
        }
        guard let url = URLFetcher.fetchable(given) else {
            throw HTTPError(.unprocessableContent, "invalid_url", "input.url: not an http or https URL with a host, of at most 2048 bytes.")
        }
        try checkAddress(url, key: "input.url")
        let upload = Upload(id: UUID().uuidString.lowercased(), filename: Upload.cleanFilename(URLFetcher.filename(disposition: nil, url: url)),
                            contentType: nil, size: 0, sha256: "", path: "", tracks: [], createdAt: Date().timeIntervalSince1970,
                            sourceURL: url)
        try fromStore { () throws(StoreError) in try store.insert(upload) }
        return upload
    }

    /// `GET /v1/jobs/{id}/webhooks`: the job's deliveries, oldest first.
    private func deliveries(_ request: Request) throws(HTTPError) -> Response {
        let job = try job(request)
        let found = try fromStore { () throws(StoreError) in try store.deliveries(jobID: job.id) }
        return .json(APIModels.DeliveryList(deliveries: found.map(APIModels.DeliveryResource.init)))
    }

    /// `POST /v1/jobs/{id}/webhooks/{delivery}/redeliver`: sends a delivery again, whatever became of it.
    private func redeliver(_ request: Request) throws(HTTPError) -> Response {
        let job = try job(request)
        let id = request.parameters["delivery"] ?? ""
        let found: WebhookDelivery?
        do {
            found = try store.redeliver(jobID: job.id, deliveryID: id)
        } catch where error.code == "delivery_in_flight" {
            throw HTTPError(.conflict, error.code, error.message)
        } catch {
            throw storeFailure(error)
        }
        guard let found else {
            throw HTTPError(.notFound, "delivery_not_found", "Job \(job.id) has no webhook delivery with the id \(id.prefix(64)).")
        }
        logger.info("webhook redelivery asked for", ["job_id": .string(job.id), "delivery": .string(found.id)])
        queue.events.changed() // the senders here look now
        return .json(APIModels.DeliveryResource(found), status: .accepted)
    }

    /// A job's JSON as `GET /v1/jobs/{id}` shows it (for webhook payloads); nil when its input cannot be read now.
    public func jobData(_ job: Job) -> Data? { try? JSON.encode(resource(job)) }

    /// A watermark must name an upload that is a still image. What the settings name is judged after reading them,
    /// against the uploads there are: 422, as for an input that does not exist.
    private func checkWatermark(_ settings: TranscodeSettings) throws(HTTPError) {
        guard let id = settings.filters?.video?.watermark?.upload else { return }
        let key = "settings.filters.video.watermark.upload"
        guard let upload = try fromStore({ () throws(StoreError) in try store.upload(id: id) }) else {
            throw HTTPError(.unprocessableContent, "invalid_settings", "\(key): no upload has the id \(id.prefix(64)).")
        }
        let images = ["png", "mjpeg"]
        guard upload.tracks.count == 1, let track = upload.tracks.first, track.mediaType == .video, images.contains(track.codec) else {
            throw HTTPError(.unprocessableContent, "invalid_settings", "\(key): the upload is not a PNG or JPEG image.")
        }
    }

    /// What the job would refuse of the input's tracks, refused here, where the job was queued and then failed:
    /// thumbnails of an input without video (a song, its cover art aside), settings that drop every track the
    /// input has (`{"audio": null}` of a song, the `audio` preset of a silent video), and what its picture and
    /// length cannot meet (`InputFit`). An input still to be fetched is judged when it runs.
    private func checkTracks(of input: Upload, for settings: TranscodeSettings) throws(HTTPError) {
        guard !input.tracks.isEmpty else { return }
        do {
            try InputFit.check(settings, tracks: input.tracks)
        } catch {
            throw HTTPError(.unprocessableContent, error.code, "settings.\(error.message)")
        }
        let hasVideo = input.tracks.contains { $0.mediaType == .video && $0.coverArt != true }
        let hasAudio = input.tracks.contains { $0.mediaType == .audio }
        if settings.thumbnails != nil, !hasVideo {
            throw HTTPError(.unprocessableContent, "invalid_settings",
                            "settings.thumbnails: they are taken from the video, and the input has none (leave thumbnails out).")
        }
        // (An input with neither, a cover picture alone, fails as having no media when it runs.)
        guard hasVideo || hasAudio, !(hasVideo && settings.video != .drop || hasAudio && settings.audio != .drop) else { return }
        let has = hasVideo && hasAudio ? "video and sound" : hasVideo ? "video only" : "sound only"
        throw HTTPError(.unprocessableContent, "invalid_settings",
                        "settings.video, settings.audio: the settings drop every track the input has (it has \(has)).")
    }

    private static func jsonObject(_ data: Data) throws(HTTPError) -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try JSONValue.parse(data)
        } catch {
            guard !error.key.isEmpty else { throw HTTPError(.badRequest, "invalid_json", "The body is not valid JSON.") }
            throw Self.givenTwice(error.key)
        }
        guard case .object(let object) = value else {
            throw HTTPError(.badRequest, "invalid_request", "The body must be a JSON object.")
        }
        return object
    }

    /// A key given twice (`JSONValue.parse`), refused as the other errors of its part of the body are.
    private static func givenTwice(_ path: String) -> HTTPError {
        HTTPError(.badRequest, path.hasPrefix("settings") ? "invalid_settings" : "invalid_request", "\(path): \(JSONValue.givenTwice).")
    }

    /// A multipart field that must hold JSON.
    private static func jsonValue(_ data: Data, key: String) throws(HTTPError) -> JSONValue {
        do {
            return try JSONValue.parse(data)
        } catch {
            guard !error.key.isEmpty else { throw HTTPError(.badRequest, "invalid_json", "\(key): not valid JSON.") }
            throw Self.givenTwice("\(key).\(error.key)")
        }
    }

    /// A multipart or tus `settings` value: a bare preset name, or JSON (an object, or a quoted name). JSON that
    /// does not parse is said to be so, not taken for a preset's name.
    private static func settingsField(_ data: Data) throws(HTTPError) -> JSONValue {
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines.union(["\u{FEFF}"]))
        guard let first = text.first, first == "{" || first == "[" || first == "\"" else { return .string(text) }
        return try jsonValue(data, key: "settings")
    }

    private static func settings(_ value: JSONValue) throws(HTTPError) -> TranscodeSettings {
        do {
            let settings = try TranscodeSettings(json: value)
            try settings.checkAtIntake()
            return settings
        } catch {
            let key = error.key.isEmpty ? "settings" : "settings.\(error.key)"
            throw HTTPError(.badRequest, "invalid_settings", "\(key): \(error.message)")
        }
    }

    private static func priority(_ value: JSONValue?) throws(HTTPError) -> Int {
        guard let value, value != .null else { return 0 }
        guard case .integer(let number) = value, (-1000...1000).contains(number) else {
            throw HTTPError(.badRequest, "invalid_request", "priority: expected a whole number from -1000 to 1000 (higher runs first).")
        }
        return Int(number)
    }

    private func listJobs(_ request: Request) throws(HTTPError) -> Response {
        let query = request.head.query
        // One value each: `?state=failed&state=canceled` listed the failed jobs only, as if that were all.
        if let name = request.head.repeatedQueryNames.intersection(["state", "limit", "cursor"]).sorted().first {
            throw HTTPError(.badRequest, "invalid_request",
                            "\(name): give it once\(name == "state" ? "; jobs are listed by one state at a time" : "").")
        }
        var state: JobState?
        if let text = query["state"] {
            guard let parsed = JobState(rawValue: text) else {
                throw HTTPError(.badRequest, "invalid_request",
                                "state: expected one of \(JobState.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
            state = parsed
        }
        var limit = 50
        if let text = query["limit"] {
            guard let parsed = Int(text), (1...200).contains(parsed) else {
                throw HTTPError(.badRequest, "invalid_request", "limit: expected a whole number from 1 to 200.")
            }
            limit = parsed
        }
        do {
            // `?cursor=` (a client that sends the `next` it has, none yet) is the first page.
            let cursor = query["cursor"].flatMap { $0.isEmpty ? nil : $0 }
            let page = try store.jobs(state: state, limit: limit, cursor: cursor)
            return .json(APIModels.JobPage(jobs: try page.jobs.map { job throws(StoreError) in try resource(job, listsFiles: false) }, next: page.next))
        } catch where error.code == "invalid_cursor" {
            throw HTTPError(.badRequest, "invalid_cursor", "cursor: \(error.message)")
        } catch {
            throw storeFailure(error)
        }
    }

    private func job(_ request: Request) throws(HTTPError) -> Job {
        let id = request.parameters["id"] ?? ""
        let found = try fromStore { () throws(StoreError) in try store.job(id: id) }
        guard let found else { throw Self.jobNotFound(id) }
        return found
    }

    private static func jobNotFound(_ id: String) -> HTTPError {
        HTTPError(.notFound, "job_not_found", "No job has the id \(id.prefix(64)).")
    }

    /// `GET /v1/jobs/{id}` on the event loop: the rendered JSON when nothing was written since it was rendered and
    /// the live progress is the same; nil sends the request to `jobJSON` on the handler pool.
    private func cachedJobJSON(_ request: Request) -> Response? {
        let id = request.parameters["id"] ?? ""
        guard let cached = rendered.withLock({ $0[id] }), cached.generation == store.generation,
              cached.liveTime == liveStamp(id) else { return nil }
        return .json(encoded: cached.data)
    }

    private func liveStamp(_ id: String) -> LiveStamp? {
        if let progress = queue.liveProgress(of: id) {
            if progress.verifying != nil { return .verifying }
            return progress.finishing == nil ? .transcoded(seconds: progress.presentationTime) : .finishing(seconds: progress.presentationTime)
        }
        return queue.liveFetch(of: id).map { .fetched(bytes: $0.bytes) }
    }

    /// `GET /v1/jobs/{id}`, served from the rendered cache when the job has not changed.
    private func jobJSON(_ request: Request) throws(HTTPError) -> Response {
        let id = request.parameters["id"] ?? ""
        let generation = store.generation
        let updatedAt = try fromStore { () throws(StoreError) in try store.lastUpdate(of: id) }
        guard let updatedAt else { throw Self.jobNotFound(id) }
        let live = liveStamp(id)
        let current = rendered.withLock { cache -> Data? in
            guard let cached = cache[id], cached.updatedAt == updatedAt, cached.liveTime == live else { return nil }
            cache.update(id) { $0.generation = max(cached.generation, generation) }
            return cached.data
        }
        if let current { return .json(encoded: current) }
        let job = try job(request)
        // Never a document without its input (a failover between the two reads): cached, it was served until the
        // job changed, for good once it had ended.
        let data = JSON.encode(try fromStore { () throws(StoreError) in try resource(job) })
        rendered.withLock { cache in
            cache.insert(RenderedJob(generation: generation, updatedAt: job.updatedAt, liveTime: job.state == .running ? live : nil, data: data),
                         size: data.count, for: id)
        }
        return .json(encoded: data)
    }

    /// The job's JSON; `upload` is its input when the caller has it at hand, else it is read from the store (a
    /// store that fails then fails this).
    /// `listsFiles` false leaves the output's files out (the job list).
    func resource(_ job: Job, upload known: Upload? = nil, listsFiles: Bool = true) throws(StoreError) -> APIModels.JobResource {
        var upload = known
        if upload == nil { upload = try store.upload(id: job.inputUpload) }
        return resource(job, input: upload, listsFiles: listsFiles)
    }

    /// The job's JSON with `input` as its input (nil: left out), and its live progress while it runs.
    private func resource(_ job: Job, input: Upload?, listsFiles: Bool = true) -> APIModels.JobResource {
        APIModels.JobResource(job, upload: input, live: job.state == .running ? queue.liveProgress(of: job.id) : nil,
                              fetch: job.state == .running ? queue.liveFetch(of: job.id) : nil, listsFiles: listsFiles)
    }

    /// The job's JSON for an event stream or a cancel's answer, which must not fail: without its input when that
    /// cannot be read now (the next change, or reading the job, shows it whole). Never cached.
    private func streamedResource(_ job: Job) -> APIModels.JobResource {
        do {
            return try resource(job)
        } catch {
            logger.error("reading a job's input upload failed", ["job_id": .string(job.id), "error": .string(error.description)])
            return resource(job, input: nil)
        }
    }

    private func events(_ request: Request) throws(HTTPError) -> Response {
        let id = request.parameters["id"] ?? ""
        if request.headers["Last-Event-ID"] == JobEventStream.endID {
            // An EventSource coming back after the end it was sent: 204 tells it to stop (the job cannot change).
            _ = try job(request)
            return Response(.noContent)
        }
        // Subscribe first, then read: a change between the two reaches the stream as an event.
        let stream = JobEventStream(jobID: id, queue: queue) { [self] job in JSON.encode(streamedResource(job)) }
        let job = try job(request)
        stream.deliverSnapshot(job) { queue.liveProgress(of: job.id) }
        var headers = HTTPHeaders()
        headers.set("Content-Type", "text/event-stream")
        headers.set("Cache-Control", "no-cache")
        headers.set("X-Accel-Buffering", "no")
        return Response(.ok, headers: headers, body: .eventStream(stream))
    }

    private func output(_ request: Request) throws(HTTPError) -> Response {
        let job = try succeededJob(request)
        guard let path = job.outputPath else {
            throw HTTPError(.notFound, "output_missing", "The job's output file is gone from the data directory.")
        }
        if job.settings.container.isSegmented {
            // A ladder is many files whose playlists name each other relatively: send players to the master
            // playlist's own URL, where those names resolve.
            var headers = HTTPHeaders()
            headers.set("Location", "/v1/jobs/\(job.id)/output/\(job.settings.container.mainFileName)")
            return Response(.temporaryRedirect, headers: headers)
        }
        let tracks = job.outputTracks ?? []
        return try serve(path: path, of: job, request,
                         mimeType: job.settings.container.mimeType(hasVideo: tracks.contains { $0.mediaType == .video }),
                         disposition: Self.disposition(for: job, upload: try? store.upload(id: job.inputUpload)))
    }

    /// `GET /v1/jobs/{id}/output/{path...}`: one file of the job's output folder, by its path there; only the
    /// files the transcode listed are served (no other name reaches the file system).
    private func outputFile(_ request: Request) throws(HTTPError) -> Response {
        let id = request.parameters["id"] ?? ""
        let updatedAt = try fromStore { () throws(StoreError) in try store.lastUpdate(of: id) }
        guard let updatedAt else { throw Self.jobNotFound(id) }
        var index = outputIndexes.withLock { $0[id] }
        if index?.updatedAt != updatedAt {
            let job = try succeededJob(request)
            let built = OutputIndex(updatedAt: updatedAt, job: job,
                                    files: Dictionary((job.outputFiles ?? []).map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first }))
            outputIndexes.withLock { $0.set(built, for: id) }
            index = built
        }
        // A "/" sent as %2F (a client generated from the OpenAPI document encodes the parameter whole) names the same
        // listed file, found at its own URL: served here, a playlist's relative names resolved beside the folder, not
        // in it. Only names the job listed are looked up, so it cannot reach another file. The router kept a "/" as
        // %2F and every "%" as %25; undone in that order, each "%" it wrote is read back once.
        let given = request.parameters["path"] ?? ""
        let name = given.replacingOccurrences(of: "%2F", with: "/")
            .replacingOccurrences(of: "%25", with: "%")
        guard let index, let file = index.files[name], let root = index.job.outputRoot else {
            throw HTTPError(.notFound, "output_file_not_found", "The job's output has no file \(name.debugDescription).")
        }
        if name != given {
            let segment = CharacterSet.urlPathAllowed.subtracting(["/"])
            let path = file.path.split(separator: "/", omittingEmptySubsequences: false)
                .map { $0.addingPercentEncoding(withAllowedCharacters: segment) ?? String($0) }
            var headers = HTTPHeaders()
            headers.set("Location", "/v1/jobs/\(index.job.id)/output/" + path.joined(separator: "/"))
            return Response(.temporaryRedirect, headers: headers)
        }
        return try serve(path: root + "/" + file.path, of: index.job, request, mimeType: file.mimeType, disposition: nil)
    }

    private func succeededJob(_ request: Request) throws(HTTPError) -> Job {
        let job = try job(request)
        guard job.state == .succeeded else {
            throw HTTPError(.conflict, "job_not_succeeded", "The job is \(job.state.rawValue); its output exists once it has succeeded.")
        }
        return job
    }

    /// A file of a job's output with its validators, honouring `If-Match`, `If-Unmodified-Since`, `If-None-Match`,
    /// `If-Modified-Since`, `Range` and `If-Range` (the ETag or the Last-Modified date, compared exactly).
    private func serve(path: String, of job: Job, _ request: Request, mimeType: String, disposition: String?) throws(HTTPError) -> Response {
        guard let file = OpenFile(path: path) else {
            throw HTTPError(.notFound, "output_missing", "The job's output file is gone from the data directory.")
        }
        let size = file.size
        let etag = "\"\(job.id.prefix(8))-\(size)-\(Int64(job.finishedAt ?? 0))\""
        var headers = HTTPHeaders()
        headers.set("Content-Type", mimeType)
        if let disposition { headers.set("Content-Disposition", disposition) }
        headers.set("ETag", etag)
        headers.set("Accept-Ranges", "bytes")
        // Behind a token, for the client's own cache only: a shared one (a proxy, a CDN) could keep an answer a
        // session cookie authorised and give it to anyone.
        if authentication.isEnabled { headers.set("Cache-Control", "private") }
        let modified = job.finishedAt.map { HTTPDate.format($0) }
        if let modified { headers.set("Last-Modified", modified) }
        if request.headers.preconditionFails(etag: etag, lastModified: job.finishedAt) {
            throw HTTPError(.preconditionFailed, "precondition_failed",
                            "The output is no longer the file If-Match or If-Unmodified-Since names (its ETag is \(etag)).")
        }
        if request.headers.notModified(etag: etag, lastModified: job.finishedAt) { return Response(.notModified, headers: headers) }
        // A Range is honoured only when If-Range (if any) still names this file.
        let rangeHeader = request.headers["If-Range"].map { $0 == etag || $0 == modified } ?? true ? request.headers["Range"] : nil
        switch ByteRange.parse(rangeHeader, size: size) {
        case .full:
            return Response(.ok, headers: headers, body: .file(file, offset: 0, length: size))
        case .partial(let start, let end):
            headers.set("Content-Range", "bytes \(start)-\(end)/\(size)")
            return Response(.partialContent, headers: headers, body: .file(file, offset: start, length: end - start + 1))
        case .unsatisfiable:
            var error = HTTPError(.rangeNotSatisfiable, "range_not_satisfiable", "The file is \(size) bytes; the range asked for is outside it.")
            error.headers.set("Content-Range", "bytes */\(size)")
            throw error
        }
    }

    private static let attributeCharacters = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$&+-.^_`|~")

    /// `attachment; filename="input-name.mp4"` with an ASCII fallback and the UTF-8 name (RFC 6266).
    static func disposition(for job: Job, upload: Upload?) -> String {
        let base = (upload?.filename ?? "output").split(separator: ".").dropLast().joined(separator: ".")
        let name = (base.isEmpty ? (upload?.filename ?? "output") : base) + "." + job.settings.container.fileExtension
        let ascii = String(name.unicodeScalars.map { $0.isASCII && $0 != "\"" && $0 != "\\" && $0.value >= 0x20 ? Character($0) : "_" })
        // RFC 8187's attr-char, ASCII only: Foundation's `.alphanumerics` holds every script's letters, so "é" went
        // into the header unencoded, and browsers drop a `filename*` that is not ASCII (the name saved as "caf_").
        let encoded = name.addingPercentEncoding(withAllowedCharacters: Self.attributeCharacters) ?? ascii
        return "attachment; filename=\"\(ascii)\"; filename*=UTF-8''\(encoded)"
    }

    private func cancel(_ request: Request) throws(HTTPError) -> Response {
        let job = try job(request)
        do throws(StoreError) {
            let current = try queue.cancel(id: job.id)
            // The cancel is done: an input that cannot be read now leaves it out of this answer (not cached), not
            // a 503 that a client asks again after, to be told the job has finished.
            return .json(streamedResource(current), status: .accepted)
        } catch where error.code == "invalid_transition" {
            // As it is now: it may have ended during the cancel (the state read before said running), or gone.
            let now = try self.job(request)
            throw HTTPError(.conflict, "job_finished", "The job has already finished (\(now.state.rawValue)); nothing to cancel.")
        } catch where error.code == "not_found" {
            throw Self.jobNotFound(job.id) // deleted meanwhile
        } catch {
            throw storeFailure(error)
        }
    }

    private func deleteJob(_ request: Request) throws(HTTPError) -> Response {
        var job = try job(request)
        if !job.state.isTerminal {
            do {
                try queue.cancel(id: job.id)
            } catch where error.code == "invalid_transition" {
                // It finished meanwhile.
            } catch where error.code == "not_found" {
                throw Self.jobNotFound(job.id) // deleted meanwhile, by another request
            } catch {
                throw storeFailure(error)
            }
            let ended = try fromStore { () throws(StoreError) in try queue.waitUntilFinished(id: job.id, timeout: 5) }
            guard let ended else { throw Self.jobNotFound(job.id) }
            guard ended.state.isTerminal else {
                throw HTTPError(.conflict, "job_busy", "The job did not stop in time; try again.")
            }
            job = ended
        }
        // The row first: a store that refuses leaves the job as it was, its output served. Files whose row is gone
        // are strays: if this does not get to them, a cluster's stray sweep removes them, or a single server's next
        // start.
        try fromStore { () throws(StoreError) in try store.deleteJob(id: job.id) }
        rendered.withLock { $0.remove(job.id) }
        if let path = job.outputRoot, let problem = OutputRemoval.remove(path) {
            // Said, as retention says it: on a single server nothing sweeps strays until the next start.
            logger.warning("removing a deleted job's output failed", ["job_id": .string(job.id), "path": .string(path),
                                                                     "error": .string(problem)])
        }
        // The job is gone: its input going with it is tidying, which a failure does not make a failed DELETE (a
        // client told 503 asked again and was told 404; --retention-hours removes an upload no job uses).
        do {
            if let upload = try store.upload(id: job.inputUpload) {
                try store.deleteUpload(id: upload.id)
                unlink(upload.path)
            }
        } catch where error.isStillReferenced {
            // Another job still uses it (SQLite's `constraint`, PostgreSQL's foreign key violation).
        } catch {
            logger.warning("removing a deleted job's input upload failed", ["job_id": .string(job.id), "upload_id": .string(job.inputUpload),
                                                                             "error": .string(error.description)])
        }
        logger.info("job deleted", ["job_id": .string(job.id)])
        return Response(.noContent)
    }

    /// Runs a store call, turning its failure into the API's answer for it.
    private func fromStore<T>(_ body: () throws(StoreError) -> T) throws(HTTPError) -> T {
        do {
            return try body()
        } catch {
            throw storeFailure(error)
        }
    }

    /// The answer for a store call that failed. A store out of reach (PostgreSQL restarting, a connection lost) is
    /// 503 with Retry-After, which clients retry, and says nothing of where the store is (the log does): it was 500,
    /// "a bug", with the database's user, host and name in it.
    func storeFailure(_ error: StoreError) -> HTTPError {
        if error.code == "no_space" {
            return HTTPError(.insufficientStorage, "no_space", "The server's disk is full.")
        }
        if error.code == "invalid_text" {
            return HTTPError(.badRequest, "invalid_request", error.message)
        }
        if error.code == "store_unavailable" || error.code == "store_busy" {
            // A database another program holds locked (an operator's sqlite3, a backup tool) is a moment's wait
            // too: it was 500, "a bug", which clients do not retry.
            logger.warning("the job store is out of reach", ["error": .string(error.message)])
            return Self.storeUnavailable
        }
        return HTTPError(.internalServerError, "store_error", "The job store failed: \(error.message)")
    }

    static let storeUnavailable = HTTPError(.serviceUnavailable, "store_unavailable", "The job store cannot be reached just now; try again shortly.",
                                            headers: HTTPHeaders([("Retry-After", "2")]))
}
