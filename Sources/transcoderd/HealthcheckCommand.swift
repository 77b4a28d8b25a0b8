import Foundation
import Glibc

/// `transcoderd healthcheck`: asks the local server's /healthz, for container HEALTHCHECKs (no curl needed).
enum HealthcheckCommand {
    static let usage = """
        Usage: transcoderd healthcheck [--port P]

        Exits 0 when GET /healthz on 127.0.0.1 answers 200 within 3 seconds, 1 otherwise.
        The port comes from --port, else $TRANSCODER_PORT, else 8080.
        """

    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(usage)
            return 0
        }
        var port = Int(ProcessInfo.processInfo.environment["TRANSCODER_PORT"] ?? "") ?? 8080
        if let index = arguments.firstIndex(of: "--port"), index + 1 < arguments.count, let value = Int(arguments[index + 1]) {
            port = value
        }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return 1 }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 3, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            Console.error("cannot connect to 127.0.0.1:\(port)")
            return 1
        }
        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
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
}
