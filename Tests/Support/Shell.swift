import Foundation
import Locks

/// Runs command-line tools (ffmpeg, ffprobe, the built binary) for tests.
public enum Shell {
    /// What a finished process left.
    public struct Output: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    private static let launching = LockedValue(())

    /// Starts `process`. Launches are serialised: Foundation's Process on Linux has crashed the test runner (a
    /// null call on a dispatch thread) when many tests started children at the same moment.
    public static func launch(_ process: Process) throws {
        try launching.withLock { _ in try process.run() }
    }

    /// Runs `executable` (looked up in PATH) with `arguments` and waits for it.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> Output {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [executable] + arguments
        if let environment {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outURL = directory.appendingPathComponent("out"), errURL = directory.appendingPathComponent("err")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try launch(process)
        process.waitUntilExit()
        try out.close()
        try err.close()
        return Output(status: process.terminationStatus,
                      stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
                      stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? "")
    }

    /// Writes an executable script (a stub child) at `path`. Through `install`, in a process of its own: a file this
    /// process had open for writing while another test's thread forked a child (which holds the descriptor until
    /// it execs) could not be executed for a moment ("Text file busy").
    public static func writeScript(_ text: String, to path: String) throws {
        let draft = path + ".draft"
        try Data(text.utf8).write(to: URL(fileURLWithPath: draft))
        defer { unlink(draft) }
        try check("install", ["-m", "755", draft, path])
    }

    /// Runs a tool that must succeed, returning its stdout.
    @discardableResult
    public static func check(_ executable: String, _ arguments: [String]) throws -> String {
        let output = try run(executable, arguments)
        guard output.status == 0 else {
            throw ShellError(message: "\(executable) \(arguments.joined(separator: " ")) exited \(output.status): \(output.stderr.suffix(2000))")
        }
        return output.stdout
    }
}

/// A tool that failed in a test helper.
public struct ShellError: Error, CustomStringConvertible {
    public let message: String

    public init(message: String) { self.message = message }

    public var description: String { message }
}
