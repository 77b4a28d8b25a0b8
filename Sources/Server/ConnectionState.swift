/// The phases of one client connection and every decision that depends only on them and the time: which timeout
/// applies now, what follows a written response. A value with no sockets and no clock of its own: `Connection`
/// drives it with the loop's instants and carries out the actions it returns; tests drive it with made-up instants.
/// (Hummingbird's `HTTPConnectionStateHandler.StateMachine<Clock>` is the model.)
///
/// idle → readingBody → awaitingResponse → writing → idle (keep-alive) | lingering → closed | closed;
/// awaitingResponse → streaming → writing when an event stream ends. A response may start from idle or readingBody
/// too (a malformed request, a timeout, a refusal before the body).
struct ConnectionState<Instant: InstantProtocol> where Instant.Duration == Duration {
    enum Phase: Equatable, Sendable {
        /// Waiting for (or reading) a request head.
        case idle
        case readingBody
        /// The handler runs on one of the server's pools.
        case awaitingResponse
        case writing
        /// An event stream is open.
        case streaming
        /// The response is sent and our side shut; what the client still sends is read and dropped for a moment, so
        /// that closing with unread bytes does not reset the connection before the client has read the response.
        case lingering
        case closed
    }

    /// The limits, each a duration.
    struct Timeouts: Sendable {
        /// To send a whole request head, from its first byte.
        var header: Duration
        /// Between requests on a kept-alive connection.
        var idle: Duration
        /// Without a byte of a body arriving, or of a response leaving.
        var transfer: Duration
        /// Between two writes on an event stream (a comment goes out as a heartbeat).
        var heartbeat: Duration
        /// Lingering after our side shut.
        var linger = Duration.seconds(2)
        /// Without a byte of a body arriving while another request waits for what the body holds (a tus upload):
        /// a client that went quiet lets it go soon (tus clients retry a 423 for a few seconds only).
        var contended = Duration.seconds(3)
    }

    /// What a timeout check asks the connection to do.
    enum TimeoutAction: Equatable, Sendable {
        case none
        /// Answer 408: the head did not arrive in time.
        case requestTimeout
        case close
        /// Send a heartbeat comment on the event stream.
        case heartbeat
    }

    /// What the client's end of file asks for.
    enum InputEnd: Equatable, Sendable {
        /// Close now: nothing is owed to the client (or it left in the middle of a request or a stream).
        case close
        /// Stop reading and send the response the client awaits: a client that half-closes after its request
        /// (`nc -N`, `shutdown(SHUT_WR)`) still reads the answer.
        case finishResponse
    }

    /// What follows a response whose last byte is out.
    enum AfterResponse: Equatable, Sendable {
        /// Read the next request (keep-alive).
        case readNext
        /// Shut our side and drop what the client still sends for a moment (it has unread request bytes).
        case linger
        case close
    }

    let timeouts: Timeouts
    private(set) var phase = Phase.idle
    /// When the first byte of the head being read arrived (nil between requests).
    private(set) var headStarted: Instant?
    private(set) var lastActivity: Instant
    private(set) var lastWrite: Instant
    private(set) var lingerStarted: Instant?
    /// Whether a response has gone out on this connection and it was kept open for the next request (kept-alive,
    /// the idle timeout), or it is fresh (the header timeout).
    private(set) var servedRequest = false
    /// Reading is paused until the body sink can take more: the client is not the one stalling.
    private(set) var waitingForSink = false

    init(now: Instant, timeouts: Timeouts) {
        self.timeouts = timeouts
        lastActivity = now
        lastWrite = now
    }

    // MARK: What the phase allows

    /// Whether request bytes are parsed now (a head, or the current body).
    var readsRequests: Bool { phase == .idle || phase == .readingBody }

    /// Whether a response is pending or going out: bytes arriving now belong to a later request (pipelining).
    var isRespondingOrWaiting: Bool { phase == .awaitingResponse || phase == .writing || phase == .streaming }

    var isClosed: Bool { phase == .closed }

    /// Whether a response may start now: once per request, never after one went out or the connection ended.
    var canStartResponse: Bool {
        phase == .idle || phase == .readingBody || phase == .awaitingResponse
    }

    /// Whether stopping now would cut a request short (`headInProgress`: the parser holds part of a head).
    func isBusy(headInProgress: Bool) -> Bool {
        switch phase {
        case .readingBody, .awaitingResponse, .writing: true
        case .idle: headInProgress
        default: false
        }
    }

    // MARK: Events

    /// Bytes came in from the client.
    mutating func received(at now: Instant) { lastActivity = now }

    /// Bytes of a request head are there to parse: its time starts with the first of them.
    mutating func headBytesArrived(at now: Instant) {
        if phase == .idle, headStarted == nil { headStarted = now }
    }

    /// The head is complete: its body (possibly empty) is read next.
    mutating func headComplete() {
        precondition(phase == .idle, "a head completes only between requests, not in \(phase)")
        headStarted = nil
        phase = .readingBody
    }

    /// The body is complete: the handler runs.
    mutating func bodyComplete() {
        precondition(phase == .readingBody, "a body completes only while it is read, not in \(phase)")
        phase = .awaitingResponse
    }

    /// The body sink cannot take more for now; reading pauses.
    mutating func sinkBusy() { waitingForSink = true }

    /// The body sink has room again; returns whether reading was paused for it (and now resumes).
    mutating func sinkReady(at now: Instant) -> Bool {
        guard waitingForSink else { return false }
        waitingForSink = false
        lastActivity = now
        return true
    }

    /// A response starts going out (a handler's answer, or a refusal before or during the body).
    mutating func responseStarted(streaming: Bool, at now: Instant) {
        precondition(canStartResponse, "a response starts once per request, not in \(phase)")
        phase = streaming ? .streaming : .writing
        headStarted = nil
        lastWrite = now
    }

    /// Response bytes left.
    mutating func wrote(at now: Instant) { lastWrite = now }

    /// The event stream ended; its last chunk goes out.
    mutating func streamEnded() {
        if phase == .streaming { phase = .writing }
    }

    /// The client's end of file arrived. A whole request waiting for its response, or one being written, is still
    /// answered, and so are the requests that came before the end of file (read from the buffer once the response
    /// is out; the end of file, read again then, closes the connection); a request cut short, an event stream or an
    /// idle connection ends here.
    func inputEnd() -> InputEnd {
        switch phase {
        case .awaitingResponse, .writing: .finishResponse
        default: .close
        }
    }

    /// The response's last byte is out: the next request, lingering, or the end (the connection then calls
    /// `close`). `closeAfter`: the response said `Connection: close`; `requestRead`: the request was read to its end
    /// (else unread bytes remain).
    mutating func responseWritten(closeAfter: Bool, requestRead: Bool, at now: Instant) -> AfterResponse {
        precondition(phase == .writing, "a response is written only after it started, not in \(phase)")
        guard closeAfter else {
            phase = .idle
            lastActivity = now
            // A refusal before the head was taken (404, 401) keeps the connection too: the client may ask again.
            servedRequest = true
            return .readNext
        }
        if requestRead { return .close }
        phase = .lingering
        lingerStarted = now
        return .linger
    }

    mutating func close() { phase = .closed }

    // MARK: Time

    /// What the limits ask for at `now`; `outputPending`: response bytes wait to be sent; `bodyWanted`: another
    /// request waits for what the body being read holds.
    func timeoutAction(at now: Instant, outputPending: Bool, bodyWanted: Bool = false) -> TimeoutAction {
        switch phase {
        case .idle:
            if let headStarted, headStarted.duration(to: now) > timeouts.header { return .requestTimeout }
            // Before its first request a connection has the head's time: silent ones held a slot for the idle minute.
            let idle = servedRequest ? timeouts.idle : min(timeouts.header, timeouts.idle)
            if headStarted == nil, lastActivity.duration(to: now) > idle { return .close }
        case .readingBody:
            let stall = bodyWanted ? min(timeouts.transfer, timeouts.contended) : timeouts.transfer
            if !waitingForSink, lastActivity.duration(to: now) > stall { return .close }
        case .writing:
            if outputPending, lastWrite.duration(to: now) > timeouts.transfer { return .close }
        case .streaming:
            // A client that has not read for the transfer timeout is gone; a quiet stream gets a heartbeat.
            if outputPending, lastWrite.duration(to: now) > timeouts.transfer { return .close }
            if lastWrite.duration(to: now) > timeouts.heartbeat { return .heartbeat }
        case .lingering:
            if let lingerStarted, lingerStarted.duration(to: now) > timeouts.linger { return .close }
        case .awaitingResponse, .closed:
            break
        }
        return .none
    }
}
