import Foundation
import Locks

/// A real PostgreSQL server for one test: Debian's `initdb` into a fresh folder and `pg_ctl start` as the
/// `postgres` user (the server refuses to run as root), listening only on a Unix socket in that folder. Stopped
/// (immediate mode) and removed when the value goes away.
public final class PostgresServer: @unchecked Sendable {
    // @unchecked: every field is set in init and only read afterwards.
    public let directory: String
    /// A libpq URI for the `postgres` database as the `postgres` user, through the socket.
    public let uri: String
    /// Seconds the server's clock is set ahead of the machine's (libfaketime), as a database on another machine
    /// may be; nil: the machine's clock.
    public let clockOffset: Int?
    private static let binaries = "/usr/lib/postgresql/15/bin"
    private static let faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

    public init(clockOffset: Int? = nil) throws {
        self.clockOffset = clockOffset
        guard FileManager.default.isExecutableFile(atPath: Self.binaries + "/initdb") else {
            throw ShellError(message: "\(Self.binaries)/initdb is missing: run scripts/deps (scripts/test does)")
        }
        directory = "/tmp/transcoderd-pg-\(getpid())-\(UUID().uuidString.prefix(8))"
        uri = "postgresql:///postgres?host=\(directory)&user=postgres"
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try Shell.check("chown", ["postgres:postgres", directory])
            try Self.asPostgres(Self.binaries + "/initdb", ["-D", directory + "/data", "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            try start()
            if let clockOffset { try checkClock(offset: clockOffset) }
        } catch {
            // deinit does not run for a value that never finished its init.
            try? stop()
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// Stops the server at once (as a crash would; `restart` brings it back).
    public func stop(mode: String = "immediate") throws {
        try Self.asPostgres(Self.binaries + "/pg_ctl", ["-D", directory + "/data", "-m", mode, "-w", "stop"])
    }

    /// Starts the server again on the same data.
    public func start() throws {
        // No TCP, the socket in our folder; fsync off (a test server's data is thrown away); floats printed with
        // the old 15 digits, so a client that needs them exact must ask.
        let options = "-c listen_addresses='' -k \(directory) -c max_connections=400 -c fsync=off -c full_page_writes=off -c extra_float_digits=0"
        if clockOffset != nil, !FileManager.default.fileExists(atPath: Self.faketime) {
            throw ShellError(message: "\(Self.faketime) is missing: run scripts/deps (scripts/test does)")
        }
        let clock = clockOffset.map { ["env", "LD_PRELOAD=" + Self.faketime, "FAKETIME=" + ($0 < 0 ? "" : "+") + String($0)] } ?? []
        try Self.asPostgres(Self.binaries + "/pg_ctl", ["-D", directory + "/data", "-o", options, "-l", directory + "/server.log",
                                                        "-w", "-t", "30", "start"], through: clock)
    }

    /// Throws unless the server's clock is `offset` seconds from the machine's (within 5 s): a preload that did not
    /// take (the loader only warns) would leave it on the machine's, and a test of clocks apart would prove nothing.
    private func checkClock(offset: Int) throws {
        let answer = try Shell.check("psql", ["-X", "-q", "-t", "-A", "-h", directory, "-U", "postgres", "-d", "postgres", "-c",
                                              "SELECT extract(epoch from clock_timestamp())"])
        let seconds = Double(answer.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        guard abs(seconds - Date().timeIntervalSince1970 - Double(offset)) < 5 else {
            throw ShellError(message: "the server's clock is \(seconds - Date().timeIntervalSince1970) s from the machine's, not \(offset) s (libfaketime)")
        }
    }

    /// The server's log.
    public var log: String { (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "" }

    /// Runs a PostgreSQL tool as `postgres`, through Python's subprocess, which closes every inherited descriptor
    /// but the standard three: Foundation's Process notices a child's end through a socket the child inherits, and
    /// a server `pg_ctl` leaves running would hold it open, so the call would never return.
    private static func asPostgres(_ executable: String, _ arguments: [String], through wrapper: [String] = []) throws {
        let run = try Shell.run("python3", ["-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:], close_fds=True))",
                                            "runuser", "-u", "postgres", "--"] + wrapper + [executable] + arguments)
        guard run.status == 0 else {
            throw ShellError(message: "\(executable) \(arguments.joined(separator: " ")): \(run.stderr.suffix(1000))")
        }
    }

    /// One server for the whole test process, started on first use and stopped when the process exits; tests take
    /// a fresh database each (`makeDatabase`), so they never see each other's rows.
    public static func shared() throws -> PostgresServer {
        try sharedServer.withLock { server in
            if let server { return server }
            removeOrphans()
            let started = try PostgresServer()
            server = started
            atexit {
                let server = PostgresServer.sharedServer.withLock { $0 }
                try? server?.stop()
                if let directory = server?.directory { try? FileManager.default.removeItem(atPath: directory) }
            }
            return started
        }
    }

    private static let sharedServer = LockedValue<PostgresServer?>(nil)

    /// Servers and folders a test process left when it died before its exit handler ran (a crash, a timeout's
    /// SIGKILL): stopped and removed, so they do not pile up across runs.
    private static func removeOrphans() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/tmp")) ?? []
        for name in names where name.hasPrefix("transcoderd-pg-") {
            guard let pid = Int32(name.dropFirst("transcoderd-pg-".count).prefix { $0 != "-" }), pid != getpid(),
                  kill(pid, 0) != 0, errno == ESRCH else { continue }
            let folder = "/tmp/" + name
            try? asPostgres(binaries + "/pg_ctl", ["-D", folder + "/data", "-m", "immediate", "-w", "stop"])
            try? FileManager.default.removeItem(atPath: folder)
        }
    }

    /// Creates an empty database and returns its URI.
    public func makeDatabase() throws -> String {
        let name = "t_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        try Shell.check("psql", ["-X", "-q", "-h", directory, "-U", "postgres", "-d", "postgres", "-c", "CREATE DATABASE \(name)"])
        return "postgresql:///\(name)?host=\(directory)&user=postgres"
    }

    deinit {
        try? stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
