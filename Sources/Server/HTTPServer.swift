import Logging
import CSystem
import Foundation
import Glibc
import Locks

/// An HTTP/1.1 server on a few epoll event loop threads (non-blocking sockets, no thread per connection; the kernel
/// spreads connections over the loops with SO_REUSEPORT); handlers run on fixed thread pools.
public final class HTTPServer: Sendable {
    /// Descriptors the connections turned away past the cap and its spares hold at most while they linger, over
    /// `eventLoops` loops.
    public static func lingering(eventLoops: Int) -> Int { max(1, eventLoops) * TurnedAwayConnections.limit }

    public let configuration: HTTPServerConfiguration
    public let metrics = ServerMetrics()
    private let router: Router
    private let logger: Logger
    private let authenticate: @Sendable (RequestHead) -> HTTPError?
    private let eventLoops: [EventLoop]
    private let pools: ServerPools
    private let boundPorts = LockedValue<[Int]>([])
    /// Each loop's listening sockets, once bound.
    private let listeners = LockedValue<[[(fd: Int32, port: Int)]]?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    private let graceEnded = LockedValue(false)

    public init(configuration: HTTPServerConfiguration, router: Router, logger: Logger,
                authenticate: @escaping @Sendable (RequestHead) -> HTTPError? = { _ in nil }) throws(IOError) {
        self.configuration = configuration
        self.router = router
        self.logger = logger
        self.authenticate = authenticate
        var loops: [EventLoop] = []
        for _ in 0..<max(1, configuration.eventLoops) { loops.append(try EventLoop()) }
        eventLoops = loops
        pools = ServerPools(configuration: configuration)
    }

    /// The port actually bound (useful with port 0).
    public var port: Int { boundPorts.withLock { $0.first ?? 0 } }

    /// Binds every address `host` resolves to (once per loop) without serving yet (connections wait in the
    /// backlog): a process that starts other work with its server (the queue's workers) binds first, so that a
    /// port it cannot have fails its start before that work began. Done by `start` when not before.
    public func bindListeners() throws(IOError) {
        guard listeners.withLock({ $0 == nil }) else { return }
        var port = configuration.port
        var perLoop: [[(fd: Int32, port: Int)]] = []
        for _ in eventLoops {
            let sockets = try Self.listen(host: configuration.host, port: port, checkFree: perLoop.isEmpty)
            port = sockets.first?.port ?? port
            perLoop.append(sockets)
        }
        listeners.withLock { $0 = perLoop }
        boundPorts.withLock { $0 = perLoop.first?.map(\.port) ?? [] }
    }

    /// Binds (unless `bindListeners` did), then starts the loop threads.
    public func start() throws(IOError) {
        let leftovers = configuration.leftoverUploadAge.map { FileSink.removeLeftovers(in: configuration.uploadDirectory, olderThan: $0) } ?? 0
        if leftovers > 0 {
            logger.info("removed partial uploads of a previous process", ["files": .int(leftovers)])
        }
        try bindListeners()
        let perLoop = listeners.withLock { $0 } ?? []
        let budget = ConnectionBudget(limit: configuration.maxConnections)
        for (index, eventLoop) in eventLoops.enumerated() {
            let loop = ServerLoop(eventLoop: eventLoop, configuration: configuration, router: router, logger: logger,
                                  metrics: metrics, pools: pools, budget: budget, authenticate: authenticate)
            for socket in perLoop[index] { try loop.addListener(socket.fd) }
            let finished = self.finished
            let box = LoopBox(loop)
            NamedThread.start("http-\(index)") {
                box.take().run()
                finished.signal()
            }
        }
    }

    /// Ends the grace of a stop under way, or of the next one, at once: open connections are closed now.
    public func endGrace() {
        graceEnded.withLock { $0 = true }
    }

    /// Stops accepting, waits up to `grace` seconds for requests in flight (not event streams), then closes
    /// every connection and ends the loop threads.
    public func stop(grace: Double) {
        for eventLoop in eventLoops { eventLoop.execute { loop in loop.stopAccepting() } }
        let deadline = Date().addingTimeInterval(grace)
        while Date() < deadline, !graceEnded.withLock({ $0 }) {
            let busy = LockedValue(0)
            let asked = DispatchGroup()
            for eventLoop in eventLoops {
                asked.enter()
                eventLoop.execute { loop in
                    busy.withLock { $0 += loop.busyConnections }
                    asked.leave()
                }
            }
            asked.wait()
            if busy.withLock({ $0 }) == 0 { break }
            usleep(20_000)
        }
        for eventLoop in eventLoops { eventLoop.execute { loop in loop.closeAll() } }
        for _ in eventLoops { finished.wait() }
        pools.shutdown()
    }

    /// Binds and listens on every address `host` resolves to. Every loop's sockets share the port (SO_REUSEPORT);
    /// `checkFree` first makes sure no other process listens there: SO_REUSEPORT lets any process of the same user
    /// join, and a second server started on a taken port shared its connections with the first, half the requests
    /// answered from another data folder.
    private static func listen(host: String, port: Int, checkFree: Bool) throws(IOError) -> [(fd: Int32, port: Int)] {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            throw IOError(errnoCode: EINVAL, reason: "resolving --host \(host): \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        var sockets: [(fd: Int32, port: Int)] = []
        var chosenPort = port
        var lastError: IOError?
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let info = entry {
            entry = info.pointee.ai_next
            let family = info.pointee.ai_family
            guard family == AF_INET || family == AF_INET6 else { continue }
            if chosenPort != port, let address = info.pointee.ai_addr {
                // With port 0, every address gets the port the first one was given.
                Self.setPort(address, family: family, port: chosenPort)
            }
            let fd = tc_socket_stream(family)
            guard fd >= 0 else { continue }
            Self.setOptions(fd, family: family, host: host, sharesPort: true)
            if checkFree, port != 0, !Self.isFree(info.pointee, host: host) {
                Posix.close(fd)
                sockets.forEach { Posix.close($0.fd) }
                throw IOError(errnoCode: EADDRINUSE, reason: "listening on \(host):\(port): another process listens there")
            }
            guard bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0, Glibc.listen(fd, 1024) == 0 else {
                lastError = IOError(errnoCode: errno, reason: "listening on \(host):\(port)")
                Posix.close(fd)
                continue
            }
            let actual = Self.localPort(fd)
            if port == 0 && chosenPort == 0 { chosenPort = actual }
            sockets.append((fd, actual))
        }
        guard !sockets.isEmpty else { throw lastError ?? IOError(errnoCode: EADDRNOTAVAIL, reason: "listening on \(host):\(port)") }
        return sockets
    }

    /// A listening socket's options: SO_REUSEADDR, SO_REUSEPORT when it `sharesPort` with the other loops'.
    private static func setOptions(_ fd: Int32, family: Int32, host: String, sharesPort: Bool) {
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if sharesPort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        if family == AF_INET6 {
            // IPv6 only beside an IPv4 socket of the same name ("localhost"); `::` is every address, IPv4 ones
            // too, as `--host` says (Docker forwards IPv4 to a container listening on it).
            var only: Int32 = Self.isIPv6Wildcard(host) ? 0 : 1
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &only, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    /// Whether a socket that does not share its port (no SO_REUSEPORT) could bind the address: false when another
    /// socket listens there, whatever its options.
    private static func isFree(_ info: addrinfo, host: String) -> Bool {
        let probe = tc_socket_stream(info.ai_family)
        guard probe >= 0 else { return true }
        defer { Posix.close(probe) }
        setOptions(probe, family: info.ai_family, host: host, sharesPort: false)
        return bind(probe, info.ai_addr, info.ai_addrlen) == 0 || errno != EADDRINUSE
    }

    /// Whether `host` is IPv6's unspecified address (`::`, however written).
    static func isIPv6Wildcard(_ host: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET6, host, &address) == 1 && withUnsafeBytes(of: &address) { $0.allSatisfy { $0 == 0 } }
    }

    private static func setPort(_ address: UnsafeMutablePointer<sockaddr>, family: Int32, port: Int) {
        if family == AF_INET {
            address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port = in_port_t(UInt16(port).bigEndian) }
        } else {
            address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port = in_port_t(UInt16(port).bigEndian) }
        }
    }

    private static func localPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let family = storage.ss_family
        return withUnsafePointer(to: &storage) { pointer in
            if family == sa_family_t(AF_INET) {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            }
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
        }
    }
}

/// Hands the loop-confined `ServerLoop` to the thread that will own it. The value is set before the thread starts
/// and taken once on that thread, so it is never touched from two threads at once.
private final class LoopBox: @unchecked Sendable {
    private var loop: ServerLoop?

    init(_ loop: ServerLoop) { self.loop = loop }

    func take() -> ServerLoop {
        defer { loop = nil }
        return loop!
    }
}
