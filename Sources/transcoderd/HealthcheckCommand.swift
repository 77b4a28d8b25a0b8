import Foundation
import Isolation
import Glibc

/// `transcoderd healthcheck`: asks the local server's /healthz, for container HEALTHCHECKs (no curl needed).
enum HealthcheckCommand {
    static let usage = """
        Usage: transcoderd healthcheck [--host H] [--port P]

        Exits 0 when GET /healthz on the server's listening address answers 200 within 3 seconds, 1 otherwise.
        The address comes from --host, else from the server's own command line when it is the container's first
        process (`transcoderd serve --port 9000`) or the one `transcoderd serve` that process started (behind an
        init such as `--init`'s), else $TRANSCODER_HOST, else 127.0.0.1 (a server listening on all addresses,
        0.0.0.0 or ::, is asked on 127.0.0.1 or ::1); the port from --port, else the same way, else
        $TRANSCODER_PORT, else 8080.
        """

    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(usage)
            return 0
        }
        let environment = ProcessInfo.processInfo.environment
        let given: [String: String]
        switch options(arguments) {
        case .success(let parsed): given = parsed
        case .failure(let error):
            // 1, not 2: a container runtime reserves 2, and reads any failure of its check as "unhealthy".
            Console.error(error.message)
            return 1
        }
        func option(_ flag: String) -> String? { given[flag] }
        let server = option("--port") == nil || option("--host") == nil ? runningServer(environment: environment) : nil
        // A service link in the variable is no port (as `serve` reads it).
        let variable = environment["TRANSCODER_PORT"].flatMap { Configuration.isServiceLink($0) ? nil : $0 }
        let portText = option("--port") ?? server.map { String($0.port) } ?? variable ?? "8080"
        guard let port = Int(portText), (1...65535).contains(port) else {
            Console.error("--port: expected a port number, got \"\(portText)\"")
            return 1
        }
        let host = target(listening: option("--host") ?? server?.host ?? environment["TRANSCODER_HOST"] ?? "127.0.0.1")
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let first = found else {
            Console.error("cannot resolve \(host)")
            return 1
        }
        defer { freeaddrinfo(first) }
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let address = candidate {
            candidate = address.pointee.ai_next
            let fd = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var timeout = timeval(tv_sec: 3, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard connect(fd, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 else { continue }
            let request = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            var buffer = [UInt8](repeating: 0, count: 512)
            let count = recv(fd, &buffer, buffer.count, 0)
            let answer = String(decoding: buffer.prefix(max(0, count)), as: UTF8.self)
            guard answer.hasPrefix("HTTP/1.1 200") else {
                Console.error("unhealthy: \(answer.split(separator: "\r\n").first ?? "no answer")")
                return 1
            }
            return 0
        }
        Console.error("cannot connect to \(host) port \(port)")
        return 1
    }

    /// `--host` and `--port`, each as `--port 9000` or `--port=9000` as `serve` takes them; anything else is refused
    /// (a mistyped `--prot 9000` was passed over, and the check asked another port than meant).
    static func options(_ arguments: [String]) -> Result<[String: String], Configuration.UsageError> {
        var found: [String: String] = [:]
        var index = 0
        while index < arguments.count {
            var flag = arguments[index], value: String?
            if let equals = flag.firstIndex(of: "="), flag.hasPrefix("--") {
                value = String(flag[flag.index(after: equals)...])
                flag = String(flag[..<equals])
            }
            guard flag == "--host" || flag == "--port" else {
                return .failure(.init(message: "unknown option \(flag) (healthcheck takes --host and --port)"))
            }
            if value == nil {
                index += 1
                guard index < arguments.count else { return .failure(.init(message: "\(flag) needs a value")) }
                value = arguments[index]
            }
            found[flag] = value
            index += 1
        }
        return .success(found)
    }

    /// Where the server runs: PID 1 when it is this program's `serve` (a container), else the one such process that
    /// PID 1 started (a container run with `--init`, whose PID 1 is the init); nil when there is none, or several.
    static func runningServer(environment: [String: String]) -> (host: String, port: Int)? {
        if let first = containerServer(commandLine: "/proc/1/cmdline", environment: environment) { return first }
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        let found = processes.filter { pid_t($0).flatMap { ProcessStat(pid: $0) }?.parent == 1 }
            .compactMap { containerServer(commandLine: "/proc/\($0)/cmdline", environment: environment) }
        return found.count == 1 ? found[0] : nil
    }

    /// Where the server whose command line is in `commandLine` (a `/proc/PID/cmdline`) listens, when it is this
    /// program's `serve`: its flags over `environment`, as it read them. A container's check runs beside its first
    /// process with the container's environment but not its arguments, so `podman run IMAGE serve --port 9000` was
    /// asked on 8080 and unhealthy for ever. Nil for anything else (PID 1 of a host, a `work` node, flags that do
    /// not parse).
    static func containerServer(commandLine: String, environment: [String: String]) -> (host: String, port: Int)? {
        guard let file = FileHandle(forReadingAtPath: commandLine) else { return nil }
        defer { try? file.close() }
        var words = file.readDataToEndOfFile().split(separator: 0, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        if words.last == "" { words.removeLast() }
        let program = CommandLine.arguments.first.map { $0.split(separator: "/").last.map(String.init) ?? $0 }
        guard words.count >= 2, words[1] == "serve", words[0].split(separator: "/").last.map(String.init) == program,
              let config = try? Configuration.parse(Array(words.dropFirst(2)), environment: environment), config.port != 0
        else { return nil }
        return (config.host, config.port)
    }

    /// The address to ask a server listening on `host`: its loopback when it listens on every address of a family.
    static func target(listening host: String) -> String {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        switch bare {
        case "0.0.0.0": return "127.0.0.1"
        case "::", "::0": return "::1"
        default: return bare
        }
    }
}
