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

    /// Every check schemathesis has, positive-data acceptance included: a request the document allows must not be
    /// refused, one it forbids must be.
    @Test func schemathesisFindsNothingWrong() throws {
        let server = try TestServer()
        // A finished job gives the fuzzer real ids to follow.
        _ = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))])
        let config = try Media.scratch().appendingPathComponent("schemathesis.toml")
        // The one exception: media cannot be described by a schema. Bytes the document allows for a file are
        // refused with 422 when FFmpeg cannot read them, and an upload id the document allows (any UUID) is refused
        // with 422 when no upload has it; for the operations that take files or upload ids, 422 is an answer to
        // valid data. Every other status is judged as schemathesis does by default.
        // A second, for one tool fault: for POST /v1/jobs schemathesis 4.32.5 reports a schema-violating multipart
        // request accepted (video.color.transfer made a boolean), but the request it sends has video.color null,
        // which is valid (seen on the wire through a logging proxy): the mutation does not survive its encoding of
        // the JSON part. Refusals of bad job requests are checked in APITests instead (bad JSON, unknown keys and
        // parts, settings out of range, wrong types).
        // A third, for another: in the multipart form of POST /v1/jobs, its coverage phase sends settings that break
        // the document's own cross-field rules (segmentDuration or renditions without "container": "hls", which the
        // Settings schema forbids through dependentSchemas and anyOf) as valid data, and counts the 400 that names the
        // key as a wrongly refused request (and it will not take 400 as an expected status). The acceptance check is
        // off for that one operation; valid jobs, ladders and thumbnails included, are submitted and must succeed in
        // APITests, StreamingTests and WatermarkTests.
        // A fourth, for tus: which headers go together (Upload-Length or Upload-Defer-Length, not both), what
        // Upload-Metadata and Upload-Checksum hold, and whether an offset is the upload's, cannot be said in the
        // document; 400, 404, 409, 413, 423 and 460 are answers to requests it allows. Its negative cases for them are
        // off: they include an unknown header, which no HTTP server may refuse, and a Tus-Resumable other than 1.0.0,
        // which tus says to refuse with 412, not a status it expects. TusTests checks each refusal. Its hooks
        // (Tests/Contract) let it send tus chunks, application/offset+octet-stream, as raw bytes.
        // Every check is switched on here, not with --checks on the command line, which would override the
        // per-operation settings below.
        try """
            checks.enabled = true

            [[operations]]
            include-path-regex = "^/v1/tus"
            checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "413", "422", "423", "460"]
            checks.negative_data_rejection.enabled = false

            [[operations]]
            include-method = ["POST", "PUT"]
            include-path-regex = "^/v1/uploads"
            checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422"]

            [[operations]]
            include-name = "POST /v1/jobs"
            checks.positive_data_acceptance.enabled = false
            checks.negative_data_rejection.enabled = false
            """.write(to: config, atomically: true, encoding: .utf8)
        let run = try Shell.run(try tool("schemathesis"), [
            "--config-file", config.path,
            "run", Self.root.appendingPathComponent("openapi.yaml").path, "--url", server.base,
            "--max-examples", "25", "--seed", "1", "--no-color",
        ], environment: ["SCHEMATHESIS_HOOKS": "schemathesis_hooks", "NO_COLOR": "1",
                          "PYTHONPATH": Self.root.appendingPathComponent("Tests/Contract").path])
        #expect(run.status == 0, "\(run.stdout.suffix(4000))")
        #expect(run.stdout.contains(" passed") && !run.stdout.contains("failed"), "\(run.stdout.suffix(2000))")
        #expect(try server.json("/healthz").status == 200, "the server still serves")
    }

    /// The document reads as written: a description holding a comma in YAML's flow style, unquoted, is cut there and
    /// the rest becomes a key of its own with no value (`coverArt` and the tus answers were), which schemathesis and
    /// generated clients take as one more property or field.
    @Test func theDocumentHasNoKeyWithoutAValue() throws {
        let script = """
            import sys, yaml
            def walk(node, path):
                if isinstance(node, dict):
                    for key, value in node.items():
                        if value is None:
                            print(path + "/" + str(key))
                        walk(value, path + "/" + str(key))
                elif isinstance(node, list):
                    for index, value in enumerate(node):
                        walk(value, path + "/" + str(index))
            walk(yaml.safe_load(open(sys.argv[1])), "")
            """
        let run = try Shell.run(try tool("python"), ["-c", script, Self.root.appendingPathComponent("openapi.yaml").path])
        #expect(run.status == 0 && run.stdout.isEmpty, "keys without a value: \(run.stdout) \(run.stderr)")
    }

    @Test func metricsParseAsPrometheusText() throws {
        let server = try TestServer()
        _ = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))])
        _ = try eventually { (try server.json("/v1/jobs?state=succeeded").object["jobs"] as? [Any])?.count == 1 }
        // An upload its client gives up on is counted (499), not left out of the figures and the log.
        _ = try Shell.run("curl", ["-s", "-T", try Media.path(.tenSeconds), "--limit-rate", "20k", "--max-time", "1",
                                   server.base + "/v1/uploads/given-up.mp4"])
        #expect(try eventually(10) { (try server.curl("/metrics").body).contains("status=\"499\"") }, "the abandoned upload is counted")
        // A malformed request after a good one on the same connection is counted as its own (it was not, once).
        let client = try RawClient(port: server.port)
        client.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(client.read(until: "}").hasPrefix("HTTP/1.1 200"))
        client.send("NOT A REQUEST\r\n\r\n")
        #expect(client.read(until: "}").hasPrefix("HTTP/1.1 400"))
        #expect(try eventually(10) { (try server.curl("/metrics").body).contains(#"route="unmatched",status="400""#) })
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
        #expect(values["transcoderd_store_up{}"] == 1)
        #expect(values["transcoderd_jobs{state=succeeded}"] == 1)
        #expect(values["transcoderd_jobs_finished_total{result=succeeded}"] == 1)
        // The results not seen yet are there at 0 (an increase from no series at all reads as none).
        #expect(values["transcoderd_jobs_finished_total{result=failed}"] == 0 && values["transcoderd_jobs_finished_total{result=canceled}"] == 0)
        #expect(values["transcoderd_transcode_duration_seconds_count{}"] == 1)
        #expect((values["transcoderd_http_requests_total{route=POST /v1/jobs,status=201}"] ?? 0) >= 1)
        #expect((values["transcoderd_bytes_uploaded_total{}"] ?? 0) > 100_000)
        #expect(values["transcoderd_sse_clients{}"] == 0)
        #expect(values["transcoderd_http_requests_total{route=unmatched,status=400}"] == 1, "\(values.keys.filter { $0.contains("400") })")
        #expect(values.contains { $0.key.hasPrefix("transcoderd_http_requests_total{route=PUT /v1/uploads") && $0.key.hasSuffix("status=499}") },
                "\(values.keys.filter { $0.contains("499") })")
    }
}
