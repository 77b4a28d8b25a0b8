import Foundation
import Testing
import TestSupport

/// A ladder played by a real browser: headless Chromium (Debian's `chromium`, which plays HLS natively) loads a page
/// from another origin that plays the job's master playlist from the server, through CORS.
@Suite struct PlaybackTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func chromiumPlaysTheLadderFromTheServer() throws {
        let chromium = "/usr/bin/chromium"
        guard FileManager.default.isExecutableFile(atPath: chromium) else {
            throw ShellError(message: "\(chromium) is missing: run scripts/deps (scripts/test does)")
        }
        let folder = try Media.scratch()
        // The page's own server first: its port is the origin the API must allow.
        let portFile = folder.appendingPathComponent("port").path, resultFile = folder.appendingPathComponent("result.json").path
        let page = Process()
        page.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        page.arguments = [Self.root.appendingPathComponent("Tests/Streaming/play_page.py").path, portFile, resultFile]
        try Shell.launch(page)
        // SIGKILL: a child of the test runner starts with SIGTERM blocked (the runner's threads block it).
        defer { kill(page.processIdentifier, SIGKILL); page.waitUntilExit() }
        #expect(eventually(10) { FileManager.default.fileExists(atPath: portFile) && ((try? String(contentsOfFile: portFile, encoding: .utf8)) ?? "") != "" })
        let pagePort = try String(contentsOfFile: portFile, encoding: .utf8)
        let origin = "http://127.0.0.1:\(pagePort)"

        let server = try TestServer(["--cors-origin", origin])
        let input = try #require(try server.json("/v1/uploads/", ["-T", try Media.path(.tenSeconds)]).object["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(input)", "settings": {"container": "hls", "segmentDuration": 2}}"#])
        let id = try #require(created.object["id"] as? String)
        #expect(try eventually(60) { try server.json("/v1/jobs/\(id)").object["state"] as? String == "succeeded" })
        let master = server.base + "/v1/jobs/\(id)/output/master.m3u8"

        let profile = folder.appendingPathComponent("profile").path
        let browser = Process()
        browser.executableURL = URL(fileURLWithPath: chromium)
        browser.arguments = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--mute-audio",
                             "--disable-crash-reporter", "--disable-breakpad",
                             "--autoplay-policy=no-user-gesture-required", "--user-data-dir=" + profile,
                             origin + "/?src=" + (master.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? master)]
        browser.standardOutput = FileHandle.nullDevice
        browser.standardError = FileHandle.nullDevice
        try Shell.launch(browser)
        defer { kill(browser.processIdentifier, SIGKILL); browser.waitUntilExit() }
        #expect(eventually(60) { FileManager.default.fileExists(atPath: resultFile) }, "the page reported")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: resultFile))) as? [String: Any])
        #expect(report["support"] as? String == "maybe" || report["support"] as? String == "probably", "\(report)")
        #expect(report["error"] == nil && report["timeout"] == nil, "\(report)")
        #expect(abs((report["duration"] as? Double ?? 0) - 10) < 0.2, "the playlist's duration: \(report)")
        #expect((report["width"] as? Int ?? 0) > 0 && (report["height"] as? Int ?? 0) > 0, "\(report)")
        #expect(report["ended"] as? Bool == true && abs((report["time"] as? Double ?? 0) - 10) < 0.3, "played to the end: \(report)")
    }
}
