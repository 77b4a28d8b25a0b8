import Foundation
import Testing
import TestSupport

/// Tests/Fuzz/http_fuzz.py (hypothesis, from .venv) throws malformed and hostile HTTP at a real server for a bounded
/// time: no 5xx for client mistakes, no crash, health still answered, nothing left on disk, memory flat.
@Suite struct FuzzTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func hostileHTTPNeverBreaksTheServer() throws {
        let python = Self.root.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw ShellError(message: "\(python) is missing: run scripts/venv (scripts/test does)")
        }
        let server = try TestServer()
        let run = try Shell.run(python, [Self.root.appendingPathComponent("Tests/Fuzz/http_fuzz.py").path, String(server.port), "20"])
        #expect(run.status == 0, "\(run.stdout.suffix(3000))\(run.stderr.suffix(3000))")
        #expect(server.process.isRunning)
        #expect(try server.json("/healthz").status == 200)
        let leftovers = Media.files(in: server.data.appendingPathComponent("uploads"))
        #expect(eventually(5) { Media.files(in: server.data.appendingPathComponent("uploads")).isEmpty }, "left: \(leftovers)")
        #expect(server.peakMemory < 150 * 1024 * 1024, "peak RSS \(server.peakMemory / 1_048_576) MiB")
    }
}
