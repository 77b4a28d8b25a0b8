import Foundation
import Testing
import TestSupport

/// The running server against openapi.yaml (schemathesis), and /metrics through a real Prometheus parser.
/// Both tools come from the project's .venv, which scripts/test creates (scripts/venv).
@Suite struct ContractTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let venv = root.appendingPathComponent(".venv/bin")

    private func tool(_ name: String) throws -> String {
        let path = Self.venv.appendingPathComponent(name).path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ShellError(message: "\(path) is missing: run scripts/venv (scripts/test does)")
        }
        return path
    }

    @Test func schemathesisFindsNothingWrong() throws {
        let server = try TestServer()
        // A finished job gives the fuzzer real ids to follow.
        _ = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))])
        let run = try Shell.run(try tool("schemathesis"), [
            "run", Self.root.appendingPathComponent("openapi.yaml").path, "--url", server.base,
            "--checks", "not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance",
            "--max-examples", "25", "--seed", "1", "--no-color",
        ], environment: ["SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"])
        #expect(run.status == 0, "\(run.stdout.suffix(4000))")
        #expect(run.stdout.contains(" passed"))
        #expect(try server.json("/healthz").status == 200, "the server still serves")
    }

    @Test func metricsParseAsPrometheusText() throws {
        let server = try TestServer()
        _ = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))])
        _ = try eventually { (try server.json("/v1/jobs?state=succeeded").object["jobs"] as? [Any])?.count == 1 }
        let folder = try Media.scratch()
        let page = folder.appendingPathComponent("metrics.txt").path
        _ = try server.curl("/metrics", ["-o", page])
        let script = """
            import sys
            from prometheus_client.parser import text_string_to_metric_families
            samples = {}
            for family in text_string_to_metric_families(open(sys.argv[1]).read()):
                for sample in family.samples:
                    key = sample.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())) + "}"
                    samples[key] = sample.value
            for key in sorted(samples):
                print(key, samples[key], sep="\t")
            """
        let run = try Shell.run(try tool("python"), ["-c", script, page])
        #expect(run.status == 0, "\(run.stderr)")
        let values = Dictionary(uniqueKeysWithValues: run.stdout.split(separator: "\n").compactMap { line -> (String, Double)? in
            let parts = line.split(separator: "\t")
            guard parts.count == 2, let value = Double(parts[1]) else { return nil }
            return (String(parts[0]), value)
        })
        #expect(values["transcoderd_jobs{state=succeeded}"] == 1)
        #expect(values["transcoderd_jobs_finished_total{result=succeeded}"] == 1)
        #expect(values["transcoderd_transcode_duration_seconds_count{}"] == 1)
        #expect((values["transcoderd_http_requests_total{route=POST /v1/jobs,status=201}"] ?? 0) >= 1)
        #expect((values["transcoderd_bytes_uploaded_total{}"] ?? 0) > 100_000)
        #expect(values["transcoderd_sse_clients{}"] == 0)
    }
}
