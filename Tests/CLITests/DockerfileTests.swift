import Foundation
import Testing
import TestSupport

/// The Dockerfile passes hadolint (from .venv, made by scripts/venv) with the project's .hadolint.yaml.
@Suite struct DockerfileTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func hadolintIsClean() throws {
        let hadolint = Self.root.appendingPathComponent(".venv/bin/hadolint").path
        guard FileManager.default.isExecutableFile(atPath: hadolint) else {
            throw ShellError(message: "\(hadolint) is missing: run scripts/venv (scripts/test does)")
        }
        let run = try Shell.run(hadolint, ["--no-color", "--config", Self.root.appendingPathComponent(".hadolint.yaml").path,
                                           Self.root.appendingPathComponent("Dockerfile").path])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
    }

    @Test func theImageIsConfiguredForContainers() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("Dockerfile"), encoding: .utf8)
        for line in ["ARG SWIFT_IMAGE=swift:6.3-bookworm", "ARG BASE_IMAGE=debian:bookworm-slim", "--static-swift-stdlib",
                     "VOLUME /data", "EXPOSE 8080", "STOPSIGNAL SIGTERM", "TRANSCODER_HOST=0.0.0.0", "transcoderd\", \"healthcheck\""] {
            #expect(text.contains(line), "Dockerfile has \(line)")
        }
        // Both ARGs come before the first FROM, so both stages can use them.
        let firstFrom = try #require(text.range(of: "\nFROM "))
        #expect(text[..<firstFrom.lowerBound].contains("ARG BASE_IMAGE"))
    }
}
