import Foundation

/// Tests/Postgres/cut_proxy.py, started for a test: a Unix-socket proxy in front of a PostgreSQL server that cuts one
/// connection after the server answered the first statement naming `trigger`, the answer dropped (the statement ran,
/// its client never hears of it). Killed with the test process.
public final class PostgresCutProxy: @unchecked Sendable {
    // @unchecked: set in init, only read afterwards.
    public let directory: URL
    private let process = Process()

    public init(server: PostgresServer, trigger: String) throws {
        // Short: a Unix socket's path is at most 107 bytes, and a CI's TMPDIR can be long.
        directory = URL(fileURLWithPath: "/tmp/transcoderd-cut-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["Tests/Postgres/cut_proxy.py", directory.path, server.directory, trigger]
        let log = directory.appendingPathComponent("proxy.log").path
        try launchTracked(process, logPath: log)
        let socket = directory.appendingPathComponent(".s.PGSQL.5432").path
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: socket) && Date() < deadline && process.isRunning { usleep(20_000) }
        guard FileManager.default.fileExists(atPath: socket) else {
            throw ShellError(message: "the proxy did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
    }

    /// `uri` (a database of the proxied server) through the proxy.
    public func proxied(_ uri: String, server: PostgresServer) -> String {
        uri.replacingOccurrences(of: "host=\(server.directory)", with: "host=\(directory.path)")
    }

    /// Whether it has cut the connection.
    public var hasCut: Bool { FileManager.default.fileExists(atPath: directory.appendingPathComponent("cut").path) }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: directory)
    }
}
