import Foundation
import Testing
import TestSupport

/// The README's curl walkthrough, run word for word against a real server.
@Suite struct WalkthroughTests {
    /// The shell block between the walkthrough markers of README.md.
    static func walkthrough() throws -> String {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        guard let start = text.range(of: "<!-- walkthrough:start -->\n```sh\n"),
              let end = text.range(of: "```\n<!-- walkthrough:end -->") else {
            throw ShellError(message: "README.md has no walkthrough block")
        }
        return String(text[start.upperBound..<end.lowerBound])
    }

    @Test func theReadmeWalkthroughWorks() throws {
        let server = try TestServer()
        let folder = try Media.scratch()
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: folder.appendingPathComponent("in.mov").path)
        let script = folder.appendingPathComponent("walkthrough.sh").path
        try ("set -euo pipefail\ncd '\(folder.path)'\n" + Self.walkthrough()).write(toFile: script, atomically: true, encoding: .utf8)
        let run = try Shell.run("bash", [script], environment: ["BASE": server.base])
        #expect(run.status == 0, "\(run.stderr)\n\(run.stdout.suffix(2000))")
        // The event stream ends with the job's final state; the poll after it says the same, each on its own.
        let events = run.stdout.components(separatedBy: "\n\n").filter { $0.contains("event: state\n") }
        #expect(events.last?.contains(#""state":"succeeded""#) == true, "the stream's last state: \(events.last ?? "none")")
        #expect(run.stdout.contains(#""state": "succeeded""#), "the poll (jq) shows the job succeeded")
        let probe = try Probe.read(folder.appendingPathComponent("out.mp4").path)
        #expect(probe.video?.codec_name == "h264" && probe.video?.width == 640 && probe.audio?.codec_name == "aac")
        let lastLine = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
        #expect(["canceled", "running", "queued", "job_finished"].contains(lastLine), "cancel printed \(lastLine)")
    }
}
