import Foundation

/// A real `transcoderd work` child process: a worker node on a data directory and a store, its log in a file.
public final class WorkerNode: @unchecked Sendable {
    // @unchecked: the fields are set in init and only read afterwards; the process handle is thread-safe.
    public let process = Process()
    public let logPath: String

    /// Starts `work --data DATA --store STORE` with `arguments` added and waits until it says it is ready.
    public init(data: URL, store: String, _ arguments: [String] = []) throws {
        logPath = data.deletingLastPathComponent().appendingPathComponent("worker-\(UUID().uuidString.prefix(6)).log").path
        process.executableURL = URL(fileURLWithPath: Binary.path)
        process.arguments = ["work", "--data", data.path, "--store", store] + arguments
        try launchTracked(process, logPath: logPath)
        let ready = eventually(30) { !process.isRunning || log.contains("\"worker node ready\"") }
        guard ready, process.isRunning else {
            kill()
            throw ShellError(message: "the worker did not start: \(log)")
        }
    }

    public var pid: Int32 { process.processIdentifier }

    /// The node's log so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The log's JSON lines whose message is `message`.
    public func entries(_ message: String) -> [[String: Any]] {
        log.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["msg"] as? String == message || object["message"] as? String == message else { return nil }
            return object
        }
    }

    public func signal(_ number: Int32) { Foundation.kill(pid, number) }

    /// Kills the node at once and waits for it.
    public func kill() {
        if process.isRunning {
            Foundation.kill(pid, SIGKILL)
            process.waitUntilExit()
        }
        runningServers.withLock { $0.removeAll { $0 == pid } }
    }

    deinit { kill() }
}
