import Foundation

/// Tests/Outbound/peer.py, started for a test: a webhook receiver verifying signatures with the `standardwebhooks`
/// package, and a media server for inputs by URL (see the script for its paths). Killed with the test process.
public final class OutboundPeer: @unchecked Sendable {
    // @unchecked: set in init, only read afterwards; Process is thread-safe.
    public let process = Process()
    public let port: Int
    public let records: String
    public let media: URL

    public var base: String { "http://127.0.0.1:\(port)" }

    /// Starts the peer on `port` (by default a free one).
    public init(secret: String, port wanted: Int? = nil) throws {
        let folder = try Media.scratch()
        media = folder.appendingPathComponent("media", isDirectory: true)
        try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
        records = folder.appendingPathComponent("records.jsonl").path
        let portFile = folder.appendingPathComponent("peer.port").path
        guard FileManager.default.isExecutableFile(atPath: ".venv/bin/python") else {
            throw ShellError(message: ".venv/bin/python is missing: run scripts/venv (scripts/test does)")
        }
        process.executableURL = URL(fileURLWithPath: ".venv/bin/python")
        process.arguments = ["Tests/Outbound/peer.py", secret, records, media.path, portFile] + (wanted.map { [String($0)] } ?? [])
        try launchTracked(process, logPath: folder.appendingPathComponent("peer.log").path)
        var found: Int?
        let deadline = Date().addingTimeInterval(20)
        while found == nil && Date() < deadline && process.isRunning {
            usleep(20_000)
            found = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) }
        }
        guard let found else {
            process.terminate()
            throw ShellError(message: "the peer did not start: \((try? String(contentsOfFile: folder.appendingPathComponent("peer.log").path, encoding: .utf8)) ?? "")")
        }
        port = found
    }

    /// Every request so far, oldest first.
    public func requests() -> [[String: Any]] {
        let text = (try? String(contentsOfFile: records, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The webhook deliveries received for `job`, oldest first.
    public func deliveries(job: String) -> [[String: Any]] { requests().filter { $0["job"] as? String == job } }

    deinit {
        kill(process.processIdentifier, SIGKILL)
        runningServers.withLock { $0.removeAll { $0 == process.processIdentifier } }
    }
}
