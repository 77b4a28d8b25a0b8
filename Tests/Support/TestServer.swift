import Foundation
import Locks

/// Servers still running, killed when the test process exits: a suite's shared server (a `static let`) is never
/// deinitialized, and without this it would outlive the test run as an orphan.
let runningServers = LockedValue<[Int32]>([])

let killRunningServersAtExit: Void = {
    atexit {
        for pid in runningServers.withLock({ $0 }) { kill(pid, SIGKILL) }
    }
}()

/// Starts a long-running child of the test process (a server, a worker node) with its stderr in a new file at
/// `logPath` and no stdin or stdout; it is killed when the test process exits if nothing stopped it before.
func launchTracked(_ process: Process, logPath: String) throws {
    _ = FileManager.default.createFile(atPath: logPath, contents: nil)
    process.standardOutput = FileHandle.nullDevice
    process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
    process.standardInput = FileHandle.nullDevice
    _ = killRunningServersAtExit
    try Shell.launch(process)
    let pid = process.processIdentifier
    runningServers.withLock { $0.append(pid) }
}

/// A real `transcoderd serve` child process on 127.0.0.1 with a fresh data directory and a free port.
public final class TestServer: @unchecked Sendable {
    // @unchecked: the fields are set in init and only read afterwards; the process handle is thread-safe.
    public let process = Process()
    public let data: URL
    public let port: Int
    public let logPath: String
    /// Whether `process` is a wrapper (strace) around the server.
    private let wrapped: Bool

    public var base: String { "http://127.0.0.1:\(port)" }

    /// Starts the server with `arguments` added to `serve --data … --port 0`, and waits until it listens.
    /// `wrapper` runs it under another program (e.g. `strace … --`); `process` is then that program.
    public init(_ arguments: [String] = [], data: URL? = nil, environment: [String: String] = [:],
                wrapper: [String] = []) throws {
        self.data = try data ?? Media.scratch().appendingPathComponent("data")
        let folder = self.data.deletingLastPathComponent()
        logPath = folder.appendingPathComponent("server-\(UUID().uuidString.prefix(6)).log").path
        let command = [Binary.path, "serve", "--data", self.data.path, "--port", "0"] + arguments
        wrapped = !wrapper.isEmpty
        if let program = wrapper.first {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [program] + wrapper.dropFirst() + command
        } else {
            process.executableURL = URL(fileURLWithPath: Binary.path)
            process.arguments = Array(command.dropFirst())
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        try launchTracked(process, logPath: logPath)
        var found: Int?
        let deadline = Date().addingTimeInterval(20)
        while found == nil && Date() < deadline && process.isRunning {
            usleep(20_000)
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            for line in log.split(separator: "\n") where line.contains("\"listening\"") {
                if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] {
                    found = object["port"] as? Int
                }
            }
        }
        guard let found else {
            process.terminate()
            throw ShellError(message: "the server did not start: \((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")")
        }
        port = found
    }

    /// The server's log so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Peak resident memory of the server process so far, in bytes (VmHWM).
    public var peakMemory: Int { status("VmHWM") * 1024 }

    /// Resident memory of the server process now, in bytes (VmRSS).
    public var residentMemory: Int { status("VmRSS") * 1024 }

    /// Threads of the server process now.
    public var threadCount: Int { status("Threads") }

    /// The server's own process id: `process`'s, or its child's when a wrapper runs the server.
    public var serverPID: Int32? {
        guard wrapped else { return process.processIdentifier }
        // A wrapper that execs the server (nice) is the server; one that runs it as a child (strace) is not.
        let name = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/comm", encoding: .utf8)) ?? ""
        if name.hasPrefix("transcoderd") { return process.processIdentifier }
        let children = (try? Shell.run("pgrep", ["-P", String(process.processIdentifier)]).stdout) ?? ""
        return children.split(separator: "\n").compactMap { Int32($0) }.first
    }

    /// The server's `run-job` children now (its jobs', its probes', the spares).
    public var jobChildren: [pid_t] {
        guard let pid = serverPID else { return [] }
        let tasks = "/proc/\(pid)/task"
        var children: [pid_t] = []
        for task in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
            let text = (try? String(contentsOfFile: "\(tasks)/\(task)/children", encoding: .utf8)) ?? ""
            children += text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        return children.filter { child in
            let command = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(child)/cmdline"))) ?? Data()
            return String(decoding: command, as: UTF8.self).contains("run-job")
        }
    }

    /// Whether an upload of `size` bytes being received (`uploads/.upload-*`) has its whole body on disk: its probe is
    /// next.
    public func hasWholeUploadBody(size: Int) -> Bool {
        let uploads = data.appendingPathComponent("uploads")
        return ((try? FileManager.default.contentsOfDirectory(atPath: uploads.path)) ?? []).contains { name in
            name.hasPrefix(".upload-")
                && (try? FileManager.default.attributesOfItem(atPath: uploads.appendingPathComponent(name).path)[.size] as? Int) == size
        }
    }

    /// The names of the server's threads by thread id (`http-0`, `handler-3`, `worker-0`, …).
    public var threadNames: [Int32: String] {
        let tasks = "/proc/\(serverPID ?? 0)/task"
        var names: [Int32: String] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? [] {
            guard let tid = Int32(entry),
                  let name = try? String(contentsOfFile: "\(tasks)/\(entry)/comm", encoding: .utf8) else { continue }
            names[tid] = name.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return names
    }

    /// A number field of `/proc/PID/status` (kB for memory fields).
    private func status(_ field: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") } ?? ""
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? 0
    }

    /// Sends SIGTERM (to the server itself when it is wrapped: strace would only detach) and waits for the exit
    /// status.
    @discardableResult
    public func stop() -> Int32 {
        if process.isRunning {
            if wrapped, let pid = serverPID { kill(pid, SIGTERM) } else { process.terminate() }
            process.waitUntilExit()
        }
        let pid = process.processIdentifier
        runningServers.withLock { $0.removeAll { $0 == pid } }
        return process.terminationStatus
    }

    /// Runs curl against the server: `path` is appended to the base URL. Returns status code and body.
    public func curl(_ path: String, _ arguments: [String] = []) throws -> (status: Int, body: String) {
        let sink = arguments.contains("-o") ? [] : ["-o", "-"]
        let output = try Shell.run("curl", ["-s", "-S"] + sink + ["-w", "\n%{http_code}"] + arguments + [base + path])
        var lines = output.stdout.components(separatedBy: "\n")
        let status = Int(lines.popLast() ?? "") ?? 0
        return (status, lines.joined(separator: "\n"))
    }

    /// `curl` whose body is JSON: the parsed object.
    public func json(_ path: String, _ arguments: [String] = []) throws -> (status: Int, object: [String: Any]) {
        let (status, body) = try curl(path, arguments)
        let object = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
        return (status, object)
    }

    deinit { stop() }
}

/// A plain TCP client for what curl will not send (malformed requests, pipelining, many idle streams).
public final class RawClient {
    public let fd: Int32

    public init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw ShellError(message: "connect failed: \(String(cString: strerror(errno)))")
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    public func send(_ text: String) { send(Data(text.utf8)) }

    public func send(_ data: Data) {
        _ = data.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Reads until the peer closes, `until` appears in what was read, or the timeout passes.
    public func read(until marker: String? = nil, timeout: Double = 10) -> String {
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            // Waits no longer than what is left of `timeout` (the socket's own receive timeout is 10 s).
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { break }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, Int32((left * 1000).rounded(.up))) > 0 else { break }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            received.append(contentsOf: buffer[0..<count])
            if let marker, String(decoding: received, as: UTF8.self).contains(marker) { break }
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// Sends `head` and then each piece `body` gives while reading the answer on another thread, as a client that
    /// streams a large body does; stops sending when the server closes or resets the connection. Returns what was
    /// read (until the server closed, or `timeout` seconds: send `Connection: close`) and how many body bytes were
    /// sent.
    public func exchange(head: String, body: some Sequence<Data>, timeout: Double = 30) -> (answer: String, bodyBytesSent: Int) {
        let received = LockedValue(Data())
        let done = DispatchSemaphore(value: 0)
        let fd = self.fd
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count == 0 { break }
                if count < 0 {
                    if errno == EAGAIN || errno == EINTR { continue }
                    break
                }
                received.withLock { $0.append(contentsOf: buffer[0..<count]) }
            }
            done.signal()
        }
        reader.start()
        send(head)
        var sent = 0
        sending: for piece in body {
            var offset = 0
            while offset < piece.count {
                let count = piece.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                if count <= 0 { break sending }
                offset += count
                sent += count
            }
        }
        done.wait()
        return (String(decoding: received.withLock { $0 }, as: UTF8.self), sent)
    }

    /// Ends the connection in both directions mid-request, as a client that gives up does.
    public func hangUp() {
        shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Whether the server has closed the connection already, looking without waiting (a blocking read would also
    /// pass for a close that comes seconds later).
    public var hasBeenClosedByPeer: Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK)) == 0
    }

    /// Whether the server has closed the connection (a read returns end of file, waiting up to 10 s for it).
    public var isClosedByPeer: Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, 0) == 0
    }

    deinit { close(fd) }
}
