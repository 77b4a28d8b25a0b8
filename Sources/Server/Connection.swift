import Logging
import CSystem
import Foundation
import Locks
import Glibc

/// One client connection, confined to the loop thread: reads and parses requests, streams bodies into sinks, hands
/// complete requests to handlers on the server's pools, and writes responses (data, files, event streams).
///
/// Requests on a connection are served one at a time; pipelined bytes wait in the buffer until the response before
/// them is written.
final class Connection {
    let token: UInt64
    let fd: Int32
    /// Let in over the server's cap: its one request is refused (but a liveness probe), and it closes after.
    let admission: ConnectionBudget.Admission
    private unowned let loop: ServerLoop
    private var inbound = ByteBuffer()
    /// Whether `processInbound` is running now, and whether a call made meanwhile asked for another pass.
    private var parsingInbound = false
    private var inboundPending = false
    /// Parser events handled in this turn of the loop, and whether the connection gave its turn back with bytes
    /// still to parse (`yieldTurn`).
    private var eventsThisTurn = 0
    private var yielded = false
    /// Parser events (a request's head, its end, a chunk) one connection is given per turn of the loop. Requests
    /// answered on the loop (a health check, a 404, a refusal) were answered back to back from the buffer, up to
    /// 16 reads of 80 KiB: 31,000 pipelined requests, 5 to 7 s in which no other connection of the loop was served.
    static let eventsPerTurn = 256
    private var parser: RequestParser
    /// The phase and its timers; every decision that needs no socket is the state's.
    private var state: ConnectionState<ContinuousClock.Instant>
    /// Where the body being read goes (in `.readingBody`).
    private var sink: BodySink?
    /// Unsubscribes the open event stream's source (in `.streaming`).
    private var streamCancel: (@Sendable () -> Void)?
    private var head: RequestHead?
    private var route: Router.Route?
    private var parameters: [String: String] = [:]
    private var outbound: [Data] = []
    private var outboundOffset = 0
    private var file: (handle: OpenFile, offset: Int64, remaining: Int64)?
    private var closeAfterWrite = false
    /// The event stream under way is sent in chunks (HTTP/1.1); an HTTP/1.0 client, which knows no chunks, gets the
    /// events as they are and the end of the stream is the end of the connection.
    private var streamChunked = true
    private var interest: UInt32 = tc_epoll_in | tc_epoll_rdhup
    private var requestStarted = ContinuousClock.now
    private var requestID = ""
    private var responseStatus = 0
    /// The current request was counted and logged (once: a close after the response must not count it again).
    private var requestLogged = false
    private var responseBytes: Int64 = 0
    private var uploadedBytes: Int64 = 0
    private var isHead = false
    /// The client of the request whose handler is running, told when the connection closes.
    private var waitingClient: ClientPresence?

    init(token: UInt64, fd: Int32, loop: ServerLoop, admission: ConnectionBudget.Admission) {
        self.token = token
        self.fd = fd
        self.admission = admission
        self.loop = loop
        let configuration = loop.configuration
        parser = RequestParser(limits: .init(headerBytes: configuration.maxHeaderBytes, targetBytes: configuration.maxTargetBytes))
        state = ConnectionState(now: .now, timeouts: .init(header: .seconds(configuration.headerTimeout),
                                                          idle: .seconds(configuration.idleTimeout),
                                                          transfer: .seconds(configuration.transferTimeout),
                                                          heartbeat: .seconds(configuration.heartbeatInterval)))
    }

    var isBusy: Bool { state.isBusy(headInProgress: parser.inProgress) }

    /// At a stop: closed if it is kept alive between requests, having answered one, with no byte of a next one come
    /// (read first: one already in the socket is answered, with `Connection: close`). A connection that has not
    /// sent its first request yet is left to send it: closed unread, its request was reset.
    func closeIfBetweenRequests() {
        guard state.phase == .idle, state.servedRequest else { return }
        readAvailable()
        guard state.phase == .idle, !parser.inProgress, inbound.isEmpty else { return }
        close()
    }

    // MARK: Events

    func handle(events: UInt32) {
        if !yielded { eventsThisTurn = 0 }
        if events & (tc_epoll_err | tc_epoll_hup) != 0 && events & tc_epoll_in == 0 {
            close()
            return
        }
        if events & tc_epoll_out != 0 { flush() }
        if events & tc_epoll_in != 0 || events & tc_epoll_rdhup != 0 { readAvailable() }
    }

    private var readsRequests: Bool { state.readsRequests }

    private func readAvailable() {
        // Read while the request wants bytes; a few rounds at most, so one fast client cannot starve the others.
        for _ in 0..<16 {
            // Bytes left to parse when the turn was given back are parsed first, in the next turn.
            if yielded { return }
            if state.phase == .lingering {
                discardInput()
                return
            }
            guard readsRequests || state.isRespondingOrWaiting else { return }
            // Bytes sent ahead while a response is pending (pipelining) wait here, a little of them: an event stream
            // is pending for hours, and 4096 of them held 1.25 MiB each outside the body budget. A head is read
            // with as much at most: read whole (256 KiB), what came with it stayed as long.
            let readsHead = state.phase == .idle && !state.isRespondingOrWaiting
            let limit = state.isRespondingOrWaiting ? Self.pipelinedBytes
                : readsHead ? parser.limits.headerBytes + Self.pipelinedBytes : 1024 * 1024
            if inbound.count >= limit {
                setInterest(reading: false)
                return
            }
            if state.phase == .readingBody, let sink, !sinkIsReady(sink) { return }
            if state.phase == .readingBody, let sink, inbound.isEmpty, let run = parser.bodyRun {
                switch readBodyDirectly(into: sink, run: run) {
                case .more: continue
                case .stop: return
                case .unsupported: break
                }
            }
            // A body's read takes its rest and 64 KiB at most of what follows it: what follows a body read whole
            // (256 KiB: a JSON body, a form, a chunk's framing) stayed buffered behind the next request, an event
            // stream's hours included.
            let size = state.isRespondingOrWaiting || readsHead ? limit - inbound.count
                : state.phase == .readingBody ? Int(min(parser.bodyRun ?? 0, Int64(loop.readBuffer.count))) + Self.pipelinedBytes
                : loop.readBuffer.count
            let buffer = UnsafeMutableRawBufferPointer(rebasing: loop.readBuffer[0..<min(loop.readBuffer.count, size)])
            guard let count = receive(into: buffer) else { return }
            if state.isRespondingOrWaiting {
                // Bytes after a request while its response is pending: keep them for later (pipelining).
                inbound.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                continue
            }
            if state.phase == .readingBody, inbound.isEmpty {
                // Fast path for bodies: parse straight from the read buffer without copying it.
                processBody(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            } else {
                inbound.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                processInbound()
            }
        }
    }

    /// Whether the body sink takes more bytes now; if not, reading stops until it calls back (`resumeReading`).
    private func sinkIsReady(_ sink: BodySink) -> Bool {
        let token = self.token
        let eventLoop = loop.eventLoop
        let ready = sink.whenReady {
            eventLoop.execute { loop in loop.connections[token]?.resumeReading() }
        }
        if !ready {
            state.sinkBusy()
            setInterest(reading: false)
        }
        return ready
    }

    /// The body sink has room again: read on.
    private func resumeReading() {
        guard state.sinkReady(at: .now) else { return }
        setInterest(reading: true)
        readAvailable()
    }

    /// Reads what the socket has into `buffer`: the byte count, or nil when nothing is there now or the connection
    /// is over. At the peer's end of file or on an error the connection is closed here: a request cut short is
    /// dropped with whatever it wrote.
    private func receive(into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        let result: Posix.IOResult
        do {
            result = try Posix.read(fd, into: buffer)
        } catch {
            close()
            return nil
        }
        switch result {
        case .wouldBlock:
            return nil
        case .processed(0):
            switch state.inputEnd() {
            case .close:
                close()
            case .finishResponse:
                // The response still goes out, then the requests read before the end of file; reading it again then
                // closes. A handler working long on the client's behalf is told it may have gone: a close looks the
                // same as a half-close from here.
                waitingClient?.leave()
                setInterest(reading: false)
                // A peer that closed (not only stopped sending) answers any byte with a reset, which closes the
                // connection here: a request still waiting for a thread is then not run (`dispatch`). An interim
                // answer is such a byte, which HTTP/1.1 clients take any number of (an HTTP/1.0 one is sent none).
                // Without it a client that gave up (a timeout, Ctrl-C) while its request waited still had it run:
                // an upload stored, a job made, and made again by the client trying once more.
                if state.phase == .awaitingResponse, head?.minorVersion == 1, waitingClient?.hasStarted == false,
                   outbound.isEmpty, file == nil {
                    queue(Data("HTTP/1.1 100 Continue\r\n\r\n".utf8))
                    flush()
                }
            }
            return nil
        case .processed(let count):
            state.received(at: .now)
            return count
        }
    }

    private enum DirectRead { case more, stop, unsupported }

    /// Reads body bytes straight into the sink's own buffer, when it has one and nothing but body bytes come next:
    /// an upload then crosses memory once, not twice.
    private func readBodyDirectly(into sink: BodySink, run: Int64) -> DirectRead {
        let target: UnsafeMutableRawBufferPointer
        do throws(HTTPError) {
            guard let space = try sink.directBuffer(), !space.isEmpty else { return .unsupported }
            target = space
        } catch {
            fail(error)
            return .stop
        }
        let limit = Int(min(Int64(target.count), run))
        guard let count = receive(into: UnsafeMutableRawBufferPointer(rebasing: target[0..<limit])) else { return .stop }
        do throws(HTTPError) {
            // Within a body run the parser takes every byte as body and only counts them.
            _ = try parser.next(UnsafeRawBufferPointer(rebasing: target[0..<count]))
            uploadedBytes += Int64(count)
            try sink.commitDirect(count)
        } catch {
            fail(error)
            return .stop
        }
        // The body's end may be due now.
        processInbound()
        return isClosed ? .stop : .more
    }

    /// Feeds body bytes that arrived in one read, keeping what the parser leaves (the next request) in the buffer.
    private func processBody(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count, state.phase == .readingBody {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
            do {
                let (event, consumed) = try parser.next(rest)
                offset += consumed
                try apply(event, in: rest)
                if case .needMore = event, consumed == 0 { break }
                // Many small chunks in one read: the rest waits for the next turn, in the buffer.
                if tookTurnsEvent() { break }
            } catch {
                // A request refused as its body ends keeps the connection: what follows it is the next request.
                if !isClosed, offset < bytes.count { inbound.append(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
                fail(error)
                return
            }
        }
        if isClosed { return }
        if offset < bytes.count {
            inbound.append(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
        }
        // The parser may still owe an event (the end of a body whose last byte just arrived).
        processInbound()
    }

    /// Parses what is buffered for as long as the current phase takes input. An answer given at once (an inline
    /// route, a refusal) ends its request and asks for the next one from inside the parse; that call only marks the
    /// buffer for another pass, as the bytes it would read are not consumed yet (a chunked body's last CRLF was
    /// parsed twice and the buffer's start passed its end, a trap), and a long pipeline would nest once per request.
    private func processInbound() {
        if yielded { return }
        if parsingInbound {
            inboundPending = true
            return
        }
        parsingInbound = true
        defer { parsingInbound = false }
        repeat {
            inboundPending = false
            parseInbound()
        } while inboundPending && !isClosed
    }

    /// Counts a parser event; at `eventsPerTurn` gives the turn back (`yieldTurn`) and says so.
    private func tookTurnsEvent() -> Bool {
        eventsThisTurn += 1
        guard eventsThisTurn >= Self.eventsPerTurn, !isClosed else { return false }
        yieldTurn()
        return true
    }

    /// Leaves what is buffered for a task queued behind the loop's other ready connections: nothing here is read or
    /// parsed until it runs (the socket's bytes wake the loop again, level-triggered, and wait).
    private func yieldTurn() {
        yielded = true
        let token = self.token
        loop.eventLoop.execute { loop in loop.connections[token]?.resumeTurn() }
    }

    /// The connection's next turn after `yieldTurn`: parses what is buffered, then reads on.
    private func resumeTurn() {
        guard yielded else { return }
        yielded = false
        eventsThisTurn = 0
        processInbound()
        if !yielded, !isClosed, interest & tc_epoll_in != 0 { readAvailable() }
    }

    private func parseInbound() {
        while readsRequests && !yielded {
            do throws(HTTPError) {
                // A refusal of what was parsed still consumes it: a request refused whole (a 404 without a body)
                // leaves the connection at the next one.
                var refusal: HTTPError?
                let progressed = try inbound.withBytes { bytes throws(HTTPError) -> (Int, Bool) in
                    let (event, consumed) = try parser.next(bytes)
                    // Its time starts with a head's first bytes: not with an empty line passed over between requests,
                    // which sent a kept connection an unasked 408 after --header-timeout.
                    if parser.inProgress { state.headBytesArrived(at: .now) }
                    do throws(HTTPError) {
                        try apply(event, in: bytes)
                    } catch {
                        refusal = error
                        return (consumed, false)
                    }
                    if case .needMore = event { return (consumed, consumed > 0) }
                    return (consumed, true)
                }
                inbound.consume(progressed.0)
                if let refusal { throw refusal }
                if !progressed.1 { return }
                if tookTurnsEvent() { return }
            } catch {
                fail(error)
                return
            }
        }
    }

    private func apply(_ event: RequestParser.Event, in bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        switch event {
        case .needMore:
            return
        case .head(let head):
            try begin(head)
        case .body(let range):
            guard state.phase == .readingBody, let sink else { return }
            uploadedBytes += Int64(range.count)
            try sink.write(UnsafeRawBufferPointer(rebasing: bytes[range]))
        case .end:
            guard state.phase == .readingBody, let sink else { return }
            let body = try sink.finish()
            dispatch(body: body, sink: sink)
        }
    }

    // MARK: Requests

    private func begin(_ head: RequestHead) throws(HTTPError) {
        var head = head
        // tus clients behind proxies that allow only GET and POST send PATCH and DELETE this way. Only those two: a
        // POST made a HEAD would be answered without the body its Content-Length announces.
        if head.method == "POST", let method = head.headers["X-HTTP-Method-Override"]?.uppercased(), head.path.hasPrefix("/v1/tus"),
           method == "PATCH" || method == "DELETE" {
            head.method = method
        }
        // The tus endpoint as tus clients' documentation writes endpoints, with a slash at the end (Uppy's
        // `/files/`): the creation route, not an upload with an empty id (405).
        if head.segments == ["v1", "tus", ""] { head.segments.removeLast() }
        self.head = head
        requestLogged = false
        requestStarted = ContinuousClock.now
        requestID = loop.nextRequestID()
        isHead = head.method == "HEAD"
        uploadedBytes = 0
        let hasBody = parser.isChunked || (parser.contentLength ?? 0) > 0
        // Whatever is refused before its body is read closes the connection, as that body cannot be skipped safely;
        // a request without one is whole, and the connection goes on (a 404 or 401 costs no new connection).
        let refuse = { [self] (error: HTTPError) -> HTTPError in
            var error = error
            if hasBody { error.closeConnection = true } else { parser.endBodiless() }
            return error
        }
        switch loop.router.match(method: head.method, segments: head.segments) {
        case .notFound:
            throw refuse(HTTPError(.notFound, "not_found", "No route matches \(head.path)."))
        case .methodNotAllowed(let allowed, let refusalHeaders):
            let list = Array(Set(allowed)).sorted().joined(separator: ", ")
            throw refuse(HTTPError(.methodNotAllowed, "method_not_allowed", "\(head.method) is not allowed here; use \(list).",
                                   headers: HTTPHeaders([("Allow", list)] + (refusalHeaders?(head.headers) ?? []))))
        case .found(let route, let parameters):
            self.route = route
            self.parameters = parameters
        }
        // Over the cap: only a liveness probe is answered; the rest hear why, and the connection closes after.
        if admission == .overCap, let route, !route.whenFull {
            throw refuse(HTTPError(.serviceUnavailable, "too_many_connections", "The server has too many open connections; try again shortly.",
                                   headers: HTTPHeaders([("Retry-After", "1")]), closeConnection: true))
        }
        // Refusals from here on carry the route's refusal headers (`fail`).
        if let error = loop.authenticate(head) { throw refuse(error) }
        let sink: BodySink
        do throws(HTTPError) {
            sink = try makeSink(for: route!.body, head: head, hasBody: hasBody)
        } catch {
            throw refuse(error)
        }
        if let expectation = head.headers["Expect"] {
            guard expectation.caseInsensitiveEquals("100-continue") else {
                sink.abort()
                throw refuse(HTTPError(.expectationFailed, "expectation_failed", "Only Expect: 100-continue is supported."))
            }
            // An HTTP/1.0 client knows no interim answers: its expectation is ignored (RFC 9110 §10.1.1).
            if hasBody && head.minorVersion == 1 { queue(Data("HTTP/1.1 100 Continue\r\n\r\n".utf8)) }
        }
        self.sink = sink
        state.headComplete()
        if !outbound.isEmpty { flush() }
    }

    private func makeSink(for kind: Router.BodyKind, head: RequestHead, hasBody: Bool) throws(HTTPError) -> BodySink {
        let configuration = loop.configuration
        let pools = loop.pools
        let contentType = head.headers["Content-Type"] ?? ""
        let multipart = contentType.lowercased().hasPrefix("multipart/form-data")
        // A body held in memory: JSON (on an upload route, it names a URL to fetch the upload from). Its length is
        // checked against that limit, before a `100 Continue`: a 500 MB JSON body was invited, then refused at 1 MiB.
        let inMemory = switch kind {
        case .json: true
        case .uploadOrMultipart: contentType.lowercased().hasPrefix("application/json")
        case .jsonOrMultipart: !multipart
        case .upload, .tus, .none: false
        }
        if let length = parser.contentLength {
            let limit: Int64 = switch kind {
            case _ where inMemory: Int64(configuration.maxJSONBytes)
            case .none: Self.ignoredBodyBytes
            default: configuration.maxUploadBytes
            }
            if length > limit {
                throw HTTPError(.contentTooLarge, "body_too_large", "The body is \(length) bytes; at most \(limit) are accepted here.",
                                closeConnection: true)
            }
        }
        let makeFile = { () throws(HTTPError) -> FileSink in
            FileSink(directory: configuration.uploadDirectory, limit: configuration.maxUploadBytes, pool: pools.files,
                     memory: pools.uploadMemory)
        }
        let makeJSON = { DataSink(limit: configuration.maxJSONBytes, memory: pools.bodyMemory) }
        let makeMultipart = { (fields: [String]) throws(HTTPError) -> BodySink in
            try MultipartSink(contentType: contentType, fields: fields, limits: configuration.multipartLimits,
                              memory: pools.bodyMemory, makeFileSink: makeFile)
        }
        switch kind {
        case .none:
            return DiscardSink(limit: Int(Self.ignoredBodyBytes))
        case .json:
            return makeJSON()
        case .upload:
            return try makeFile()
        case .uploadOrMultipart:
            return inMemory ? makeJSON() : multipart ? try makeMultipart([]) : try makeFile()
        case .jsonOrMultipart(let fields):
            return inMemory ? makeJSON() : try makeMultipart(fields)
        case .tus(let endpoint):
            return try endpoint.makeSink(head: head, parameters: parameters, hasBody: hasBody, pool: pools.files,
                                         memory: pools.uploadMemory)
        }
    }

    /// Bytes of requests sent ahead kept while a response is pending: the largest head and then some.
    private static let pipelinedBytes = 64 * 1024

    /// Largest body read and dropped on a route that takes none, bytes.
    private static let ignoredBodyBytes: Int64 = 64 * 1024

    /// Hands the complete request to its handler on a pool (requests carrying a file FFmpeg may probe to the probe
    /// pool, the rest to the handler pool); the response comes back through the loop. `sink` stays alive until the handler is done:
    /// the memory it holds counts against the server's body budget until then.
    private func dispatch(body: Request.Body, sink: BodySink) {
        guard let head, let route else { return }
        // Reading stays on: pipelined bytes wait in the buffer (`pipelinedBytes` at most), and a client that leaves
        // is noticed.
        self.sink = nil
        state.bodyComplete()
        let request = Request(head: head, parameters: parameters, body: body, id: requestID)
        waitingClient = request.client
        if let quick = route.quickAnswer, let response = quick(request) {
            respond(response)
            return
        }
        if route.inline {
            do throws(HTTPError) {
                respond(try route.handler(request))
            } catch {
                respond(.error(error))
            }
            return
        }
        let token = self.token
        let eventLoop = loop.eventLoop
        // Whether a file body's handler will probe may be known only once the body is written: a handler thread
        // waits for that, and hands the request on to a probe thread if it will.
        let mayProbe = sink.mayProbe // read once: the file thread may learn it meanwhile
        let undecided = if case .file = body { mayProbe == nil } else { false }
        let pool = switch (route.pool, body, route.body) {
        case (.waiting, _, _): loop.pools.waits
        case (_, .data, .uploadOrMultipart): loop.pools.fetches // an upload fetched from the URL the JSON names
        case (_, .file, _) where mayProbe == true, (_, .multipart(_?, _), _): loop.pools.probes
        default: loop.pools.handlers
        }
        let holder = SinkHolder(sink)
        let probes = loop.pools.probes
        pool.submit {
            // A request whose connection closed while it waited for a thread (the client gave up, or a stop's drain
            // ended) is not run: no one would learn what it did, and a client trying again made a second job.
            guard request.client.start() else {
                Self.removeLeftovers(of: request.body)
                holder.release()
                return
            }
            if undecided, holder.mayProbeOnceWritten() {
                probes.submit {
                    // Its client may have left while it waited again.
                    guard !request.client.isClosed else {
                        Self.removeLeftovers(of: request.body)
                        holder.release()
                        return
                    }
                    Self.run(route, request, holder, token: token, on: eventLoop)
                }
            } else {
                Self.run(route, request, holder, token: token, on: eventLoop)
            }
        }
    }

    /// Runs the handler of `request` (on a pool thread) and sends its answer through the loop.
    private static func run(_ route: Router.Route, _ request: Request, _ holder: SinkHolder, token: UInt64, on eventLoop: EventLoop) {
        var response: Response
        do throws(HTTPError) {
            response = try route.handler(request)
        } catch {
            response = .error(error)
        }
        let answer = response
        eventLoop.execute { loop in
            if let connection = loop.connections[token] {
                connection.respond(answer)
            } else {
                answer.discard(closingFilesOn: loop.pools.files) // the client left meanwhile
            }
        }
        // After the answer is on its way: a temporary file the handler did not move goes (on a file thread).
        removeLeftovers(of: request.body)
        holder.release()
    }


    /// Deletes a request's temporary files that the handler did not move into place.
    private static func removeLeftovers(of body: Request.Body) {
        switch body {
        case .file(let file): file.discard()
        case .multipart(let file?, _): file.discard()
        default: break
        }
    }

    private func fail(_ error: HTTPError) {
        if state.phase == .readingBody, let sink { sink.abort() }
        sink = nil
        var error = error
        if parser.inProgress || !parser.isDone { error.closeConnection = true }
        if requestID.isEmpty { requestID = loop.nextRequestID() }
        // Every refusal of a matched route's request carries the route's refusal headers, before its body (a
        // missing token, a body over the limit) or while it is read (a malformed chunk, a tus upload past its
        // length): tus clients need Tus-Resumable, a page on another origin needs CORS to read the answer.
        if let route, let head {
            for (name, value) in route.refusalHeaders?(head.headers) ?? [] where error.headers[name] == nil {
                error.headers.set(name, value)
            }
        }
        if head == nil {
            head = RequestHead(method: "-", target: "-", segments: [], query: [:], minorVersion: 1, headers: HTTPHeaders())
            // Refused before its head was whole (malformed, too long, too slow): its time is from its first bytes
            // (now, for bytes refused as they came), not from the previous answer or the accept, which put a kept
            // connection's idle seconds into the log's duration and the latency histogram.
            requestStarted = state.headStarted ?? ContinuousClock.now
        }
        respond(.error(error))
    }

    // MARK: Responses

    func respond(_ response: Response) {
        // One response per request: a late one (the connection failed or timed out meanwhile) is dropped.
        guard state.canStartResponse else { return response.discard(closingFilesOn: loop.pools.files) }
        waitingClient = nil
        var response = response
        responseStatus = response.status.code
        responseBytes = 0
        // While the server stops, a connection ends with its response: the client goes elsewhere with its next
        // request, rather than starting one the stop would cut.
        let keepAlive = admission == .withinCap && (head?.keepAlive ?? false) && loop.isAccepting
            && response.headers["Connection"]?.caseInsensitiveEquals("close") != true
        closeAfterWrite = !keepAlive || !parser.isDone
        if closeAfterWrite {
            response.headers.set("Connection", "close")
        } else if head?.minorVersion == 0 {
            // HTTP/1.0 closes unless told otherwise (RFC 9112 §9.3): a client that asked to keep the connection is told it is kept.
            response.headers.set("Connection", "keep-alive")
        }
        var bodyData: Data?
        switch response.body {
        case .empty:
            if response.status.code != 204 && response.status.code != 304 { response.headers.set("Content-Length", "0") }
        case .data(let data):
            response.headers.set("Content-Length", String(data.count))
            bodyData = data
        case .file(let handle, let offset, let length):
            response.headers.set("Content-Length", String(length))
            if isHead { handle.close(on: loop.pools.files) } else { file = (handle, offset, length) }
        case .eventStream:
            streamChunked = (head?.minorVersion ?? 1) >= 1
            if streamChunked {
                response.headers.set("Transfer-Encoding", "chunked")
            } else {
                response.headers.set("Connection", "close")
                closeAfterWrite = true
            }
        }
        // Head and a small body go out in one buffer, so one send (one TCP segment) carries the whole response.
        let body = isHead ? nil : bodyData
        var text = "HTTP/1.1 "
        text.reserveCapacity(512)
        text += String(response.status.code)
        text += " "
        text += response.status.reason
        text += "\r\nDate: "
        text += loop.dateHeader
        text += "\r\nX-Request-Id: "
        text += requestID
        text += "\r\n"
        for (name, value) in response.headers {
            text += name
            text += ": "
            text += value
            text += "\r\n"
        }
        text += "\r\n"
        let coalesced = body.flatMap { $0.count <= 64 * 1024 ? $0 : nil }
        var message = Data(capacity: text.utf8.count + (coalesced?.count ?? 0))
        text.withUTF8 { message.append($0) }
        if let coalesced { message.append(coalesced) }
        queue(message)
        if let body, coalesced == nil { queue(body) }
        responseBytes += Int64(body?.count ?? 0)
        sink = nil
        if case .eventStream(let source) = response.body, !isHead {
            state.responseStarted(streaming: true, at: .now)
            startStream(source)
        } else {
            state.responseStarted(streaming: false, at: .now)
        }
        flush()
    }

    private func startStream(_ source: any EventSource) {
        let token = self.token
        let eventLoop = loop.eventLoop
        streamCancel = source.start { text in
            eventLoop.execute { loop in loop.connections[token]?.sendEvent(text) }
        }
        loop.metrics.streamOpened()
        setInterest(reading: true)
    }

    /// Writes one event-stream chunk; nil ends the stream (and the response).
    private func sendEvent(_ text: String?) {
        guard state.phase == .streaming, let cancel = streamCancel else { return }
        guard let text else {
            cancel()
            streamCancel = nil
            loop.metrics.streamClosed()
            state.streamEnded()
            if streamChunked { queue(Data("0\r\n\r\n".utf8)) }
            flush()
            return
        }
        let payload = Data(text.utf8)
        let waiting = outbound.reduce(0) { $0 + $1.count } - outboundOffset
        if waiting > loop.configuration.maxStreamBacklogBytes {
            // The client stopped reading: holding every event for it would grow without bound. What is waiting is
            // the measure, not the new event: a single event over the bound (a finished ladder's job, its list of
            // thousands of files) goes to a client that reads.
            close()
            return
        }
        queue(streamChunked ? Data((String(payload.count, radix: 16) + "\r\n").utf8) + payload + Data("\r\n".utf8) : payload)
        responseBytes += Int64(payload.count)
        flush()
    }

    private func queue(_ data: Data) {
        outbound.append(data)
    }

    private func flush() {
        do {
            while let first = outbound.first {
                let result = try first.withUnsafeBytes { bytes -> Result<Posix.IOResult, IOError> in
                    do throws(IOError) {
                        return .success(try Posix.send(fd, UnsafeRawBufferPointer(rebasing: bytes[outboundOffset...])))
                    } catch {
                        return .failure(error)
                    }
                }.get()
                guard case .processed(let count) = result else { return waitForWritable() }
                state.wrote(at: .now)
                outboundOffset += count
                if outboundOffset == first.count {
                    outbound.removeFirst()
                    outboundOffset = 0
                }
            }
            while let current = file, current.remaining > 0 {
                var offset = current.offset
                let result = try Posix.sendfile(fd, file: current.handle.descriptor, offset: &offset,
                                                count: Int(min(current.remaining, 1 << 20)))
                guard case .processed(let count) = result else { return waitForWritable() }
                if count == 0 { throw IOError(errnoCode: EIO, reason: "the file ended early") }
                state.wrote(at: .now)
                responseBytes += Int64(count)
                file = (current.handle, offset, current.remaining - Int64(count))
            }
        } catch {
            close()
            return
        }
        releaseFile()
        if interest & tc_epoll_out != 0 { setInterest(writing: false) }
        if state.phase == .writing { writeComplete() }
    }

    /// Lets go of the file being sent: closed on a file thread, not here (`OpenFile.close(on:)`).
    private func releaseFile() {
        file?.handle.close(on: loop.pools.files)
        file = nil
    }

    private func waitForWritable() {
        if interest & tc_epoll_out == 0 { setInterest(writing: true) }
    }

    private func writeComplete() {
        logRequest()
        // Bytes of a next request already read (pipelined behind one answered `Connection: close`): more may follow
        // them in the socket, which a close would answer with a reset; the connection lingers instead.
        let requestRead = parser.isDone && inbound.isEmpty
        switch state.responseWritten(closeAfter: closeAfterWrite, requestRead: requestRead, at: .now) {
        case .close:
            close()
        case .linger:
            shutdown(fd, Int32(SHUT_WR))
            setInterest(reading: true)
            discardInput()
        case .readNext:
            head = nil
            isHead = false
            route = nil
            requestID = ""
            // A next request refused before its head is whole (a placeholder head) is one of its own.
            requestLogged = false
            uploadedBytes = 0
            requestStarted = ContinuousClock.now
            parser.reset()
            setInterest(reading: true)
            processInbound()
        }
    }

    private func logRequest() {
        guard let head, !requestLogged else { return }
        requestLogged = true
        let route = self.route?.name ?? "unmatched"
        let seconds = (ContinuousClock.now - requestStarted).inSeconds
        loop.metrics.countResponse(route: route, status: responseStatus, seconds: seconds,
                                   sent: responseBytes, received: uploadedBytes)
        loop.log("request", [
            "request_id": .string(requestID), "method": .string(head.method), "path": .string(head.path.utf8.count <= 200 ? head.path : String(head.path.prefix(200))),
            "route": .string(route), "status": .int(responseStatus), "bytes": .int(Int(responseBytes)),
            "duration_ms": .double((seconds * 1000 * 100).rounded() / 100),
        ])
    }

    /// Reads and drops what the client still sends while lingering; closes at its end of file.
    private func discardInput() {
        for _ in 0..<64 {
            guard receive(into: loop.readBuffer) != nil else { return }
        }
    }

    // MARK: State

    /// Reading off also stops watching for the peer's half-close: epoll is level-triggered, and a client that sent
    /// its whole body and shut its side would otherwise wake the loop on every round while reading is paused.
    private func setInterest(reading: Bool? = nil, writing: Bool? = nil) {
        var next = interest
        if let reading {
            let flags = tc_epoll_in | tc_epoll_rdhup
            next = reading ? next | flags : next & ~flags
        }
        if let writing { next = writing ? next | tc_epoll_out : next & ~tc_epoll_out }
        guard next != interest, !isClosed else { return }
        interest = next
        loop.eventLoop.modify(fd, token: token, events: interest)
    }

    private var isClosed: Bool { state.isClosed }

    func close() {
        guard !isClosed else { return }
        // A request the client gave up on (an upload cut short, a player's aborted seek, an event stream the
        // browser closed) is counted and logged too: 499 before its response started, else as it went out. (A client
        // that closed while its handler ran is answered anyway, as one that half-closed: its status is the handler's.)
        switch state.phase {
        case .readingBody, .awaitingResponse:
            responseStatus = 499
            logRequest()
        case .writing, .streaming:
            logRequest()
        default: break
        }
        switch state.phase {
        case .readingBody: sink?.abort()
        case .streaming:
            streamCancel?()
            loop.metrics.streamClosed()
        default: break
        }
        sink = nil
        streamCancel = nil
        releaseFile()
        waitingClient?.close()
        waitingClient = nil
        state.close()
        loop.remove(self)
        Posix.close(fd)
    }

    /// Applies the header, body, idle and write timeouts, and sends heartbeats on quiet event streams.
    func checkTimeouts(now: ContinuousClock.Instant) {
        switch state.timeoutAction(at: now, outputPending: !outbound.isEmpty || file != nil,
                                   bodyWanted: state.phase == .readingBody && sink?.isWanted == true) {
        case .none:
            break
        case .requestTimeout:
            // Through `fail`, as any refusal before a whole head: an id of its own, logged and counted.
            let seconds = Int(loop.configuration.headerTimeout)
            fail(HTTPError(.requestTimeout, "request_timeout", "The request head did not arrive within \(seconds) seconds.",
                           closeConnection: true))
        case .close:
            close()
        case .heartbeat:
            sendEvent(": heartbeat\n\n")
        }
    }
}

/// Keeps a request's body sink alive on the pool thread that runs its handler, until `release`: what the sink holds
/// counts against the server's `BodyMemory` until the handler is done with the body.
private final class SinkHolder: @unchecked Sendable {
    // Safe to share: the sink is no longer used by the loop once its body is finished; the handler's thread only
    // drops the reference, once.
    private var sink: BodySink?

    init(_ sink: BodySink) { self.sink = sink }

    func release() { sink = nil }

    /// The sink's `mayProbeOnceWritten` (on the handler's thread, before the handler runs).
    func mayProbeOnceWritten() -> Bool { sink?.mayProbeOnceWritten() ?? false }
}
