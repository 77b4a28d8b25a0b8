import Logging
import CSystem
import Dispatch
import Foundation
import Outbound
import Glibc

/// The event loop's side of the server: listening sockets and connections, touched only on the loop's thread.
final class ServerLoop {
    let eventLoop: EventLoop
    let configuration: HTTPServerConfiguration
    let router: Router
    let logger: Logger
    let authenticate: @Sendable (RequestHead) -> HTTPError?
    let metrics: ServerMetrics
    /// Where handlers and file work run: they may block on SQLite, the disk or FFmpeg probes, so never on the loop.
    let pools: ServerPools
    /// The cap on open connections, shared with the other loops.
    private let budget: ConnectionBudget
    private var listeners: [UInt64: Int32] = [:]
    /// Listeners not watched until the next sweep: accepting failed for want of file descriptors.
    private var resting: Set<UInt64> = []
    var connections: [UInt64: Connection] = [:]
    /// Connections past the cap and its spares, lingering after their 503.
    private var turnedAway = TurnedAwayConnections()
    private var nextToken: UInt64 = 1
    private var requestCounter: UInt64 = 0
    /// Prefix that keeps request ids of different loops and processes apart.
    private let requestPrefix = String(UInt32.random(in: 0...UInt32.max), radix: 36)
    private(set) var dateHeader = ""
    private var accepting = true
    private var stopped = false
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
    /// Request log lines of this round of events, written together when the round ends (one system call).
    private var pendingLog = ""

    init(eventLoop: EventLoop, configuration: HTTPServerConfiguration, router: Router, logger: Logger,
         metrics: ServerMetrics, pools: ServerPools, budget: ConnectionBudget,
         authenticate: @escaping @Sendable (RequestHead) -> HTTPError?) {
        self.eventLoop = eventLoop
        self.pools = pools
        self.budget = budget
        self.configuration = configuration
        self.router = router
        self.logger = logger
        self.metrics = metrics
        self.authenticate = authenticate
        updateDate()
    }

    deinit { readBuffer.deallocate() }

    func addListener(_ fd: Int32) throws(IOError) {
        let token = takeToken()
        listeners[token] = fd
        try eventLoop.register(fd, token: token, events: tc_epoll_in)
    }

    /// A request id for logs and the X-Request-Id header: unique per process, cheap (no system call).
    func nextRequestID() -> String {
        requestCounter += 1
        return requestPrefix + "-" + String(requestCounter, radix: 36)
    }

    func takeToken() -> UInt64 {
        defer { nextToken += 1 }
        return nextToken
    }

    /// Runs until `stop` has closed everything.
    func run() {
        var data = [UInt64](repeating: 0, count: 256)
        var events = [UInt32](repeating: 0, count: 256)
        var lastSweep = ContinuousClock.now
        while !stopped {
            let count = tc_epoll_wait(eventLoop.epoll, &data, &events, 256, 250)
            for index in 0..<max(0, Int(count)) {
                let token = data[index]
                if token == EventLoop.wakeToken {
                    for task in eventLoop.takeTasks() { task(self) }
                } else if let listener = listeners[token] {
                    acceptAll(listener, token: token)
                } else if let connection = connections[token] {
                    connection.handle(events: events[index])
                } else if turnedAway.contains(token) {
                    turnedAway.drain(token, into: readBuffer, eventLoop: eventLoop)
                }
            }
            if !pendingLog.isEmpty {
                logger.write(pendingLog)
                pendingLog.removeAll(keepingCapacity: true)
            }
            let now = ContinuousClock.now
            if now - lastSweep >= .seconds(1) {
                lastSweep = now
                updateDate()
                for connection in Array(connections.values) { connection.checkTimeouts(now: now) }
                turnedAway.closeLingered(now: now, eventLoop: eventLoop)
                rearmListeners()
            }
        }
    }

    private func acceptAll(_ listener: Int32, token listenerToken: UInt64) {
        while accepting {
            let client: Int32?
            do {
                client = try Posix.accept(listener)
            } catch {
                if error.errnoCode == EMFILE || error.errnoCode == ENFILE {
                    // The connection stays queued and the listener readable: watched on, it would wake the loop at
                    // once, every time (a core spun and the log filled). It rests until the next sweep.
                    if resting.insert(listenerToken).inserted {
                        eventLoop.modify(listener, token: listenerToken, events: 0)
                        logger.error("accept failed: out of file descriptors; accepting again in a second",
                                     ["error": .string(error.description)])
                    }
                }
                return
            }
            guard let client else { return }
            guard let admission = budget.take() else {
                rejectBusy(client)
                continue
            }
            var one: Int32 = 1
            setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let token = takeToken()
            let connection = Connection(token: token, fd: client, loop: self, admission: admission)
            connections[token] = connection
            do {
                try eventLoop.register(client, token: token, events: tc_epoll_in | tc_epoll_rdhup)
            } catch {
                connections[token] = nil
                budget.give(admission)
                Posix.close(client)
            }
        }
    }

    /// Listeners that rest after running out of file descriptors are watched again (the next accept tells).
    private func rearmListeners() {
        guard accepting, !resting.isEmpty else { return }
        for token in resting {
            if let fd = listeners[token] { eventLoop.modify(fd, token: token, events: tc_epoll_in) }
        }
        resting.removeAll()
    }

    /// Past the cap and its spares: the answer goes out at once, and the connection lingers (see
    /// `TurnedAwayConnections`) or, past those too, closes.
    private func rejectBusy(_ fd: Int32) {
        let body = #"{"error":{"code":"too_many_connections","message":"The server has too many open connections; try again shortly."}}"#
        let text = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" +
            "Retry-After: 1\r\nConnection: close\r\n\r\n" + body
        _ = text.utf8CString.withUnsafeBytes { bytes in
            try? Posix.send(fd, UnsafeRawBufferPointer(rebasing: bytes.dropLast()))
        }
        if !turnedAway.add(fd, token: takeToken(), now: .now, eventLoop: eventLoop) { Posix.close(fd) }
        metrics.countResponse(route: "connection limit", status: 503)
    }

    /// Queues a request log line; it is written at the end of the current round of events.
    func log(_ message: String, _ fields: KeyValuePairs<String, LogValue>) {
        if let line = logger.line(.info, message, fields) { pendingLog += line }
    }

    func remove(_ connection: Connection) {
        guard connections.removeValue(forKey: connection.token) != nil else { return }
        budget.give(connection.admission)
        eventLoop.unregister(connection.fd)
    }

    /// Stops accepting: listening sockets are closed so new connections are refused, and so are the connections
    /// kept alive between requests; the others end with their response.
    func stopAccepting() {
        accepting = false
        for (_, fd) in listeners {
            eventLoop.unregister(fd)
            Posix.close(fd)
        }
        listeners.removeAll()
        for connection in Array(connections.values) { connection.closeIfBetweenRequests() }
    }

    /// Whether the server still takes connections (not stopping).
    var isAccepting: Bool { accepting }

    /// Connections with a request in flight (reading its body, waiting for its handler, or writing its response).
    var busyConnections: Int { connections.values.filter(\.isBusy).count }

    /// Closes every connection and ends `run`.
    func closeAll() {
        for connection in Array(connections.values) { connection.close() }
        turnedAway.closeAll(eventLoop: eventLoop)
        if !pendingLog.isEmpty { logger.write(pendingLog) }
        pendingLog = ""
        stopped = true
    }

    private func updateDate() {
        dateHeader = HTTPDate.format(Date().timeIntervalSince1970)
    }
}

