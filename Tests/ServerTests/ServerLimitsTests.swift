import Foundation
import Testing
import TestSupport

/// Limits and options that need a server of their own.
@Suite struct ServerLimitsTests {
    @Test func aTwoGigabyteUploadStreamsWithFlatMemory() throws {
        let server = try TestServer()
        let folder = try Media.scratch()
        let sparse = folder.appendingPathComponent("sparse.bin").path
        try Shell.check("truncate", ["-s", "2G", sparse])
        let (status, body) = try server.curl("/v1/uploads/", ["-T", sparse])
        // Two gigabytes of zeros are no media: they stream to disk, get probed, and are refused.
        #expect(status == 422, "\(body)")
        let peak = server.peakMemory
        #expect(peak > 0 && peak < 200 * 1024 * 1024, "peak RSS \(peak / 1024 / 1024) MiB")
        #expect(Media.files(in: server.data.appendingPathComponent("uploads")).isEmpty)
        #expect(try server.json("/healthz").status == 200)
    }

    /// A client that gives up (a timeout: its connection closed) while its request waits for a thread does not have
    /// it run: the job it asked for is not made (a client that tries again would have two). The close read like a
    /// half-close (`nc -N`), so the request ran; an interim `100 Continue` now draws the reset a closed socket gives.
    @Test func aRequestWhoseClientClosedWhileItWaitedForAThreadIsNotRun() throws {
        let server = try TestServer(["--probe-threads", "1"])
        defer { _ = server.stop() }
        // The one probe thread held: every child that could probe (the spares) is stopped, and an upload's probe waits.
        #expect(eventually(10) { !server.jobChildren.isEmpty })
        let stopped = server.jobChildren
        for child in stopped { kill(child, SIGSTOP) }
        defer { for child in stopped { kill(child, SIGCONT) } }
        let input = try Media.path(.audioOnly)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: input)[.size] as? Int)
        let held = Process()
        held.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        held.arguments = ["-s", "-o", "/dev/null", "-T", input, server.base + "/v1/uploads/held.m4a"]
        try held.run()
        // The held upload is read (its body whole on disk) and its probe waits on a stopped child: a fixed 1.5 s
        // was not always enough on a busy machine, and the request below took the probe thread first.
        #expect(eventually(20) { server.hasWholeUploadBody(size: size) }, "the held upload's body arrived")
        usleep(500_000)
        // A whole job request, then the client gives up.
        let gaveUp = try Shell.run("curl", ["-s", "--max-time", "2", "-F", "file=@" + input, "-F", #"settings={"container": "m4a"}"#,
                                            server.base + "/v1/jobs"])
        #expect(gaveUp.status == 28, "curl timed out: \(gaveUp.status) \(gaveUp.stdout)")
        for child in stopped { kill(child, SIGCONT) }
        held.waitUntilExit()
        // The one probe thread takes its work in turn: once an upload sent now is answered, the request that waited
        // before it has been dropped, or run.
        #expect(try server.json("/v1/uploads/after.m4a", ["-T", input]).status == 201)
        let listing = try server.json("/v1/jobs")
        #expect(listing.status == 200)
        let jobs = try #require(listing.object["jobs"] as? [[String: Any]], "\(listing.object)")
        #expect(jobs.isEmpty, "\(jobs.count) job made for a client that had left")
        // A client that only stopped sending (half-closed, HTTP/1.1) is still answered, past any interim answer.
        let halfClosed = try RawClient(port: server.port)
        halfClosed.send("GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        shutdown(halfClosed.fd, Int32(SHUT_WR))
        let answer = halfClosed.read()
        #expect(answer.replacingOccurrences(of: "HTTP/1.1 100 Continue\r\n\r\n", with: "").hasPrefix("HTTP/1.1 200"), "\(answer.prefix(200))")
    }

    @Test func uploadsOverTheLimitGet413() throws {
        let server = try TestServer(["--max-upload-bytes", "100000"])
        let (status, body) = try server.curl("/v1/uploads/", ["-T", try Media.path(.standard)])
        #expect(status == 413, "\(body)")
        #expect(body.contains("\"code\""))
        let chunked = try server.curl("/v1/uploads", ["-X", "POST", "-H", "Transfer-Encoding: chunked", "-T", try Media.path(.standard)])
        #expect(chunked.status == 413)
        #expect(Media.files(in: server.data.appendingPathComponent("uploads")).isEmpty)
    }

    @Test func aTokenGuardsEverythingButHealth() throws {
        let server = try TestServer(["--cors-origin", "http://player.test"], environment: ["TRANSCODER_TOKEN": "s3cret"])
        #expect(try server.json("/healthz").status == 200)
        #expect(try server.json("/readyz").status == 200)
        let denied = try Shell.run("curl", ["-s", "-i", server.base + "/v1/jobs"]).stdout
        #expect(denied.hasPrefix("HTTP/1.1 401") && denied.contains("WWW-Authenticate: Bearer\r\n"), "\(denied)")
        // A wrong token is said to be one (RFC 6750), told from one not sent.
        let wrong = try Shell.run("curl", ["-s", "-i", "-H", "Authorization: Bearer wrong", server.base + "/v1/jobs"]).stdout
        #expect(wrong.hasPrefix("HTTP/1.1 401") && wrong.contains(#"WWW-Authenticate: Bearer error="invalid_token""#), "\(wrong)")
        #expect(try server.json("/v1/jobs", ["-H", "Authorization: Bearer s3cret"]).status == 200)
        // A player or an upload page on another origin can read the refusal (else a browser shows a network error,
        // which tus clients retry forever); the rest of the API stays same-origin.
        let origin = ["-H", "Origin: http://player.test"]
        let output = try Shell.run("curl", ["-s", "-i"] + origin + [server.base + "/v1/jobs/x/output/master.m3u8"]).stdout
        #expect(output.hasPrefix("HTTP/1.1 401") && output.contains("Access-Control-Allow-Origin: http://player.test\r\n"), "\(output)")
        let tus = try Shell.run("curl", ["-s", "-i", "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0"] + origin
                                + [server.base + "/v1/tus/00000000-0000-4000-8000-000000000000"]).stdout
        #expect(tus.hasPrefix("HTTP/1.1 401") && tus.contains("Access-Control-Allow-Origin: http://player.test\r\n")
                && tus.contains("Tus-Resumable: 1.0.0"), "\(tus)")
        let jobs = try Shell.run("curl", ["-s", "-i"] + origin + [server.base + "/v1/jobs"]).stdout
        #expect(jobs.hasPrefix("HTTP/1.1 401") && !jobs.contains("Access-Control-Allow-Origin"), "\(jobs)")
    }

    @Test func slowHeadersTimeOut() throws {
        let server = try TestServer(["--header-timeout", "1"])
        let client = try RawClient(port: server.port)
        client.send("GET /healthz HTTP/1.1\r\n")
        let started = Date()
        let answer = client.read(timeout: 5)
        #expect(answer.hasPrefix("HTTP/1.1 408"))
        #expect(Date().timeIntervalSince(started) < 3)
        // A request like any other: its id in the answer, a line in the log, a count in the metrics (it had an
        // empty X-Request-Id, and neither).
        let id = answer.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("x-request-id:") }?
            .dropFirst(13).trimmingCharacters(in: .whitespaces) ?? ""
        #expect(!id.isEmpty, "\(answer)")
        #expect(eventually(3) { server.log.split(separator: "\n").contains { $0.contains(#""request_id":"\#(id)""#) && $0.contains(#""status":408"#) } },
                "\(server.log.suffix(500))")
        let metrics = try server.curl("/metrics").body
        #expect(metrics.contains(#"status="408""#), "\(metrics.split(separator: "\n").filter { $0.contains("408") })")
        // An empty line after a request (passed over, RFC 9112 §2.2) starts no head: the connection waits for its
        // next request as long as an idle one, not the head's second, after which it was sent an unasked 408.
        let kept = try RawClient(port: server.port)
        kept.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\r\n")
        #expect(kept.read(until: "}").hasPrefix("HTTP/1.1 200"))
        let unasked = kept.read(timeout: 2.5)
        #expect(unasked.isEmpty && !kept.hasBeenClosedByPeer, "\(unasked)")
        kept.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(kept.read(until: "}").hasPrefix("HTTP/1.1 200"))
        // A request refused before its head is whole is timed from its first bytes, not from the answer before it:
        // a kept connection's idle seconds went into the log's duration and the latency histogram.
        // The logged duration of the request `answer` answered (found by its X-Request-Id).
        func loggedMilliseconds(_ answer: String) -> Double? {
            let id = answer.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("x-request-id:") }?
                .dropFirst(13).trimmingCharacters(in: .whitespaces) ?? "none"
            var logged: Double?
            _ = eventually(3) {
                let line = server.log.split(separator: "\n").first { $0.contains(#""request_id":"\#(id)""#) }
                logged = line.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }?["duration_ms"] as? Double
                return logged != nil
            }
            return logged
        }
        usleep(2_000_000)
        kept.send("BAD REQUEST\r\n\r\n")
        let malformed = kept.read(until: "}")
        #expect(malformed.hasPrefix("HTTP/1.1 400"), "\(malformed)")
        let idle = loggedMilliseconds(malformed)
        #expect((idle ?? .infinity) < 1000, "a malformed request after 2 s idle took \(idle ?? -1) ms")
        // One whose head came in two parts a second apart took that second.
        let split = try RawClient(port: server.port)
        split.send("GET /x")
        usleep(1_000_000)
        split.send(" BAD\r\n\r\n")
        let splitAnswer = split.read(until: "}")
        let slow = loggedMilliseconds(splitAnswer)
        #expect((slow ?? 0) >= 900, "a head sent over a second took \(slow ?? -1) ms: \(splitAnswer)")
        // Empty lines alone, one every 0.4 s, hold no connection: each was passed over and counted as activity, so
        // neither the head's timeout nor the idle one ever ended it (4096 of them filled the server for 2 bytes each).
        let idler = try RawClient(port: server.port)
        var refused = ""
        for _ in 0..<15 where refused.isEmpty {
            idler.send("\r\n")
            refused = idler.read(timeout: 0.4)
        }
        #expect(refused.hasPrefix("HTTP/1.1 400") || refused.hasPrefix("HTTP/1.1 408"), "\(refused)")
    }

    @Test func invalidOptionsStopStartUpWithOneLine() throws {
        let run = try Shell.run(Binary.path, ["serve", "--port", "abc"])
        #expect(run.status == 2 && run.stderr == "error: --port: expected 0-65535, got \"abc\"\n")
        let env = try Shell.run(Binary.path, ["serve"], environment: ["TRANSCODER_WORKERS": "0"])
        #expect(env.status == 2 && env.stderr.contains("--workers: 0 (an API-only node) needs a shared --store"), "\(env.stderr)")
        let tooMany = try Shell.run(Binary.path, ["serve", "--workers", "65"])
        #expect(tooMany.status == 2 && tooMany.stderr.contains("--workers: expected 0-64"), "\(tooMany.stderr)")
        // A server-wide webhook URL on an address the outbound policy refuses: it started, and every event failed.
        // (An unusable data directory: a server that would start instead stops at once.)
        let privateHook = try Shell.run(Binary.path, ["serve", "--port", "0", "--data", "/dev/null/data"], environment: ["TRANSCODER_WEBHOOK_URL": "http://10.0.0.5/hook"])
        #expect(privateHook.status == 2 && privateHook.stderr.contains("--webhook-url: 10.0.0.5 is a private address"), "\(privateHook.stderr)")
        // A data directory that cannot be created is refused at start, not at the first upload.
        let unusable = try Shell.run(Binary.path, ["serve", "--port", "0", "--data", "/dev/null/data"])
        #expect(unusable.status == 1 && unusable.stderr.hasPrefix("error: Cannot create /dev/null/data"), "\(unusable.stderr)")
    }

    /// A second server on a port a first one listens on stops at start: the loops' SO_REUSEPORT let it bind as well,
    /// and the two shared the connections, half the requests answered from the other's data folder.
    @Test func aServerOnAPortAnotherListensOnDoesNotStart() throws {
        let first = try TestServer()
        let other = try Media.scratch().appendingPathComponent("data").path
        let second = try Shell.run("/usr/bin/timeout", ["20", Binary.path, "serve", "--host", "127.0.0.1", "--port", String(first.port),
                                                          "--data", other])
        #expect(second.status == 1 && second.stderr.contains("listening on 127.0.0.1:\(first.port)")
                && second.stderr.contains("another process listens there"), "\(second.status): \(second.stderr)")
        #expect(try first.json("/healthz").status == 200)
    }

    @Test func sigtermStopsCleanlyAndJobsSurviveARestart() throws {
        let first = try TestServer()
        let created = try first.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))])
        let id = try #require(created.object["id"] as? String)
        _ = try eventually { try first.json("/v1/jobs/\(id)").object["state"] as? String == "succeeded" }
        #expect(first.stop() == 0)
        #expect(first.log.contains("\"stopped\""))
        let second = try TestServer([], data: first.data)
        #expect(try second.json("/v1/jobs/\(id)").object["state"] as? String == "succeeded")
        let download = try second.curl("/v1/jobs/\(id)/output", ["-o", "/dev/null"])
        #expect(download.status == 200, "\(download.body.prefix(300))")
    }

    /// Starts an upload at 100 kB/s (curl -T) and waits until the server has its partial file.
    private func slowUpload(to server: TestServer) throws -> Process {
        let slow = Process()
        slow.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        slow.arguments = ["curl", "-s", "-o", "/dev/null", "--limit-rate", "100k", "-T", try Media.path(.tenSeconds),
                          server.base + "/v1/uploads/"]
        try Shell.launch(slow)
        let uploads = server.data.appendingPathComponent("uploads")
        #expect(eventually(10) { Media.files(in: uploads).contains { $0.hasSuffix(".partial") } }, "the upload is under way")
        return slow
    }

    /// A server asked to stop claims no job while its HTTP requests drain (up to 10 s): one claimed then had only
    /// the rest of the grace, and went back to the queue half done where another node, or the next start, could
    /// have run it whole. The job here is made by a request in flight at the signal (an upload and submit at about
    /// 3 s), with the one worker idle: before, the worker took it at once.
    @Test func aStoppingServerClaimsNoJobWhileItsRequestsDrain() throws {
        let server = try TestServer(["--workers", "1", "--shutdown-grace", "30"])
        let source = try Media.path(.standard)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int)
        let answer = Pipe()
        let submit = Process()
        submit.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        submit.arguments = ["curl", "-s", "--limit-rate", String(max(4096, size / 3)), "-F", "file=@" + source, server.base + "/v1/jobs"]
        submit.standardOutput = answer
        try Shell.launch(submit)
        defer { submit.terminate() }
        let uploads = server.data.appendingPathComponent("uploads")
        #expect(eventually(10) { Media.files(in: uploads).contains { $0.hasSuffix(".partial") } }, "the upload is under way")
        #expect(server.stop() == 0)
        submit.waitUntilExit()
        let created = try JSONSerialization.jsonObject(with: answer.fileHandleForReading.readDataToEndOfFile()) as? [String: Any]
        let id = try #require(created?["id"] as? String, "the job was made during the drain: \(created ?? [:])")
        let started = server.log.contains(#""job started","job_id":"\#(id)""#)
        #expect(!started, "the job made while the server stopped was not claimed")
        let next = try TestServer([], data: server.data)
        #expect(eventually(60) { (try? next.json("/v1/jobs/\(id)").object["state"] as? String) == "succeeded" })
        #expect(try next.json("/v1/jobs/\(id)").object["attempts"] as? Int == 1, "taken whole by the next start")
    }

    /// A server killed mid-upload leaves its temporary file; the next start removes it (and nothing else).
    @Test func partialUploadsOfAKilledServerAreRemovedAtTheNextStart() throws {
        let first = try TestServer()
        let kept = try first.json("/v1/uploads/", ["-T", try Media.path(.standard)])
        let keptID = try #require(kept.object["id"] as? String)
        let uploads = first.data.appendingPathComponent("uploads")
        let slow = try slowUpload(to: first)
        defer { slow.terminate() }
        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()
        #expect(Media.files(in: uploads).contains { $0.hasSuffix(".partial") }, "the killed server left its partial file")

        let second = try TestServer([], data: first.data)
        #expect(Media.files(in: uploads) == [keptID], "\(Media.files(in: uploads))")
        #expect(second.log.contains("removed partial uploads of a previous process"))
    }

    /// A SIGTERM sent the moment the server says it is listening stops it, cleanly. The server is started with
    /// SIGTERM blocked (a wrapper blocks it and execs the server, as some supervisors leave it): the signal waits,
    /// pending, for the server's signal thread. The Dispatch signal sources used before discarded such a pending
    /// signal (`signal(SIG_IGN)`), and the server ran on: 12 of 15 starts hung that way.
    @Test func aSIGTERMRightAfterStartStopsTheServer() throws {
        let blocking = ["python3", "-c",
                        "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM]); os.execvp(sys.argv[1], sys.argv[1:])"]
        for _ in 0..<5 {
            let server = try TestServer(wrapper: blocking)
            let pid = try #require(server.serverPID)
            let blocked = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8))?
                .split(separator: "\n").first { $0.hasPrefix("SigBlk:") }
                .flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) } ?? 0
            #expect(blocked & (1 << (UInt64(SIGTERM) - 1)) != 0, "the server starts with SIGTERM blocked")
            kill(pid, SIGTERM)
            let exited = eventually(10) { !server.process.isRunning }
            if !exited { kill(pid, SIGKILL) }
            #expect(exited && server.process.terminationReason == .exit && server.process.terminationStatus == 0,
                    "the server shut down on SIGTERM, not killed by it")
            #expect(server.log.contains("\"shutting down\"") && server.log.contains("\"stopped\""))
        }
    }

    @Test func shutdownSendsRunningJobsBackAndASecondSignalEndsTheGrace() throws {
        let first = try TestServer(["--shutdown-grace", "0"])
        let created = try first.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.long)), "-F", #"settings={"video":{"preset":"veryslow"}}"#])
        let id = try #require(created.object["id"] as? String)
        _ = try eventually { try first.json("/v1/jobs/\(id)").object["state"] as? String == "running" }
        #expect(first.stop() == 0)
        let second = try TestServer(["--shutdown-grace", "60"], data: first.data)
        let resumed = try second.json("/v1/jobs/\(id)").object
        #expect(["queued", "running"].contains(resumed["state"] as? String ?? ""), "\(resumed["state"] ?? "")")
        #expect(resumed["attempts"] as? Int == 1, "a clean stop is not a crash")
        _ = try eventually { try second.json("/v1/jobs/\(id)").object["state"] as? String == "running" }
        // With a long grace the first SIGTERM waits for the job; a second one ends the grace: the job goes back to
        // the queue at once, a clean stop still (it ended the process with the job recorded as running, which the
        // next start counted as a crash: an attempt lost each time).
        kill(second.process.processIdentifier, SIGTERM)
        usleep(300_000)
        #expect(second.process.isRunning, "the first signal waits for the running job")
        let sent = Date()
        kill(second.process.processIdentifier, SIGTERM)
        second.process.waitUntilExit()
        #expect(Date().timeIntervalSince(sent) < 3, "stopped \(Date().timeIntervalSince(sent)) s after the second signal")
        #expect(second.process.terminationStatus == 0 && second.log.contains("shutting down now"), "\(second.log.suffix(600))")
        let third = try TestServer(["--shutdown-grace", "0"], data: first.data)
        let again = try third.json("/v1/jobs/\(id)").object
        #expect(["queued", "running"].contains(again["state"] as? String ?? "") && again["attempts"] as? Int == 1, "not counted as a crash: \(again)")
        _ = third.stop()
    }

    /// Out of file descriptors (a hard limit below the connection cap): the queued connection cannot be accepted,
    /// and the listener must not be watched until some are free again.
    @Test func runningOutOfFileDescriptorsNeitherSpinsNorStopsAccepting() throws {
        let server = try TestServer(["--max-connections", "1000"], wrapper: ["prlimit", "--nofile=96:96", "--"])
        // A cap the limit cannot hold is said at start (files for uploads and jobs run out past it).
        #expect(server.log.contains("the open-file limit holds fewer connections than --max-connections"), "\(server.log.prefix(800))")
        let pid = try #require(server.serverPID)
        let open = { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0 }
        var clients: [RawClient] = []
        while open() < 96, clients.count < 200 {
            clients.append(try RawClient(port: server.port))
            usleep(2_000)
        }
        // A few more wait in the listen queue.
        for _ in 0..<3 { clients.append(try RawClient(port: server.port)) }
        let cpu = { () -> Double in
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
            return fields.count > 13 ? (Double(fields[11])! + Double(fields[12])!) / Double(sysconf(Int32(_SC_CLK_TCK))) : 0
        }
        let before = cpu()
        let linesBefore = server.log.components(separatedBy: "out of file descriptors").count - 1
        sleep(2)
        let used = cpu() - before
        let refusals = server.log.components(separatedBy: "out of file descriptors").count - 1 - linesBefore
        // Watched on, the listener woke the loop without end: two seconds of CPU and thousands of log lines. Rested,
        // each event loop (up to 4) logs once a second at most while a connection waits on its listener.
        #expect(refusals >= 1 && refusals <= 12, "a line a second for each event loop at most: \(refusals)")
        #expect(used < 0.5, "the loop rests: \(used) s of CPU in 2 s")
        // Descriptors free again: the waiting connections are taken and answered.
        let waiting = Array(clients.suffix(3)) // a slice would keep the others open
        clients.removeAll()
        for client in waiting { client.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") }
        for client in waiting { #expect(client.read(until: "}", timeout: 5).hasPrefix("HTTP/1.1 200")) }
    }

    @Test func ipv6AndTheConnectionCapAndIdleTimeout() throws {
        let v6 = try TestServer(["--host", "::1"])
        let answer = try Shell.run("curl", ["-s", "-g", "http://[::1]:\(v6.port)/healthz"])
        #expect(answer.stdout == #"{"status":"ok"}"#, "\(answer.stderr)")
        // `::` is every address, as --host's help says: IPv4 clients too (they were refused).
        let every = try TestServer(["--host", "::"])
        for url in ["http://[::1]:\(every.port)/healthz", "http://127.0.0.1:\(every.port)/healthz"] {
            let reply = try Shell.run("curl", ["-s", "-g", url])
            #expect(reply.stdout == #"{"status":"ok"}"#, "\(url): \(reply.stderr)")
        }

        // The cap counts over every event loop: each loop had its share (5 / 2 loops = 2), and the kernel spreads
        // connections by a hash of the client's port, so a loop refused while the other had room.
        // Five: no number of loops (1 to 4) shares it evenly, so some loop always went over its share.
        let full = try TestServer(["--max-connections", "5"])
        var clients: [RawClient] = []
        for _ in 0..<5 { clients.append(try RawClient(port: full.port)) }
        for client in clients { client.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") }
        let answers = clients.map { $0.read(until: "}", timeout: 3) }
        #expect(answers.allSatisfy { $0.hasPrefix("HTTP/1.1 200") }, "all five within the cap: \(answers.map { $0.prefix(12) })")
        // Over the cap a connection's request is read: a liveness probe is answered (a probe failing under load
        // had the server restarted), anything else gets 503 and why; both close after.
        let probe = try RawClient(port: full.port), other = try RawClient(port: full.port)
        probe.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        other.send("GET /v1/presets HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let alive = probe.read(until: "}", timeout: 3), refused = other.read(until: "}", timeout: 3)
        #expect(alive.hasPrefix("HTTP/1.1 200") && alive.contains("Connection: close"), "\(alive)")
        #expect(refused.hasPrefix("HTTP/1.1 503") && refused.contains("Retry-After: 1") && refused.contains("too_many_connections")
                && refused.contains("Connection: close"), "\(refused)")
        #expect(eventually(3) { probe.hasBeenClosedByPeer && other.hasBeenClosedByPeer })
        // Past the cap and its 32 spare connections, the answer is written at once, before any request. Which of 33
        // connections is the one past them depends on which loop accepts first.
        var spares: [RawClient] = []
        for _ in 0..<33 { spares.append(try RawClient(port: full.port)) }
        var atOnce: [String] = []
        var unanswered = spares
        let deadline = Date().addingTimeInterval(3)
        while atOnce.isEmpty && Date() < deadline {
            usleep(100_000)
            let answers = unanswered.map { $0.read(until: "}", timeout: 0.01) }
            atOnce += answers.filter { !$0.isEmpty }
            unanswered = zip(unanswered, answers).filter { $0.1.isEmpty }.map(\.0)
        }
        usleep(300_000) // a second one, were there one, would be there by now
        atOnce += unanswered.map { $0.read(until: "}", timeout: 0.01) }.filter { !$0.isEmpty }
        #expect(atOnce.count == 1 && atOnce.allSatisfy { $0.hasPrefix("HTTP/1.1 503") && $0.contains("too_many_connections") },
                "\(atOnce.map { $0.prefix(40) })")
        // Past them, clients that send their request as soon as they connect (most do) read the 503 and then the
        // connection's clean end: the server lingers after it (RFC 9112 §9.6) instead of closing with the request
        // unread or still arriving, which reset the connection (half of such clients read ECONNRESET, and a reset
        // that overtakes the answer destroys it).
        let serverPID = try #require(full.serverPID)
        func openDescriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(serverPID)/fd").count) ?? -1 }
        // The one turned away above lingers too, for a second or two: counted once it has gone.
        var before = openDescriptors()
        for _ in 0..<10 {
            usleep(1_200_000)
            let now = openDescriptors()
            if now == before { break }
            before = now
        }
        var turnedAway: [RawClient] = []
        for _ in 0..<12 {
            let client = try RawClient(port: full.port)
            // Half a plain request, half an upload that is still arriving when the server has answered.
            if turnedAway.count % 2 == 0 {
                client.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            } else {
                client.send("POST /v1/uploads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 262144\r\n\r\n")
                client.send(Data(count: 262_144))
            }
            turnedAway.append(client)
        }
        // Each answered as it is accepted, and then held, lingering a second or two: counted before the reads below,
        // which on a busy machine took longer than the second.
        #expect(eventually(1) { openDescriptors() == before + 12 }, "lingering: \(openDescriptors()) descriptors, \(before) before")
        usleep(300_000)
        #expect(openDescriptors() == before + 12, "still lingering a moment on: \(openDescriptors()) descriptors, \(before) before")
        let turnedAwayAnswers = turnedAway.map { $0.read(until: "}", timeout: 3) }
        #expect(turnedAwayAnswers.allSatisfy { $0.hasPrefix("HTTP/1.1 503") && $0.contains("Retry-After: 1") && $0.hasSuffix("}}") },
                "\(turnedAwayAnswers.map { $0.prefix(40) })")
        let endings = turnedAway.map(\.isClosedByPeer)
        #expect(endings.allSatisfy { $0 }, "a clean end of file after the answer, not a reset: \(endings)")
        // Then each closes on its own (these clients never close).
        #expect(eventually(5) { openDescriptors() == before }, "closed after lingering: \(openDescriptors()), \(before) before")
        turnedAway.removeAll()
        spares.removeAll()
        clients.removeAll()

        let capped = try TestServer(["--idle-timeout", "3"])
        // Idle keep-alive connections are closed after --idle-timeout (3 s, checked once a second): open before it,
        // closed within four seconds; each looked at without waiting.
        let idle = try RawClient(port: capped.port)
        idle.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(idle.read(until: "}", timeout: 3).hasPrefix("HTTP/1.1 200"))
        usleep(1_000_000)
        #expect(!idle.hasBeenClosedByPeer, "still open before the timeout")
        #expect(eventually(8) { idle.hasBeenClosedByPeer }, "closed after the timeout")
        #expect(try capped.json("/healthz").status == 200)
        // A new connection that sends nothing has --header-timeout for its first request, not the idle minute.
        let quick = try TestServer(["--header-timeout", "1"])
        let silent = try RawClient(port: quick.port)
        #expect(eventually(10) { silent.hasBeenClosedByPeer }, "a silent connection is closed after the head's time, not the idle minute")
    }

    /// Sends as much of `bytes` as the socket takes now; how much that was.
    private func sendWithoutWaiting(_ bytes: [UInt8], on client: RawClient) -> Int {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.send(client.fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            if count <= 0 { break }
            sent += count
        }
        return sent
    }

    /// Bytes a client sends ahead while its answer is pending (here an event stream, pending for as long as the
    /// job's input is fetched from a peer that never answers) are read a little, then left in the socket: an event
    /// stream stays open for hours, and every one held up to 1.25 MiB of them, outside the body budget.
    @Test func bytesSentAheadOfAPendingAnswerAreReadALittle() throws {
        let silent = try SilentListener(backlog: 8)
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8", "--fetch-stall-timeout", "120"])
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json",
                                                   "-d", #"{"input": {"url": "http://127.0.0.1:\#(silent.port)/clip.mp4"}}"#])
        let id = try #require(created.object["id"] as? String, "\(created.object)")
        // What the server took of what `client` sent: what was sent, less what waits in the client's send queue and
        // the server's receive queue (the kernel's own table of the two ends of the connection).
        func taken(by client: RawClient, of sent: Int) -> Int {
            var local = sockaddr_in()
            var localLength = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(client.fd, $0, &localLength) } }
            let clientPort = Int(UInt16(bigEndian: local.sin_port))
            var waiting = 0
            // Read to its end (a /proc file says it is empty: a single read got its first page only).
            let table = String(decoding: FileHandle(forReadingAtPath: "/proc/net/tcp")?.readDataToEndOfFile() ?? Data(), as: UTF8.self)
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 4, fields[3] == "01" else { continue }
                let ports = [fields[1], fields[2]].map { Int($0.split(separator: ":")[1], radix: 16) ?? -1 }
                let queues = fields[4].split(separator: ":").map { Int($0, radix: 16) ?? 0 }
                if ports == [clientPort, server.port] { waiting += queues[0] }
                if ports == [server.port, clientPort] { waiting += queues[1] }
            }
            return sent - waiting
        }
        let stream = try RawClient(port: server.port)
        stream.send("GET /v1/jobs/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(stream.read(until: "event: state", timeout: 5).hasPrefix("HTTP/1.1 200"))
        let chunk = [UInt8](repeating: 0x61, count: 64 * 1024)
        var sent = 0
        while sent < 4 << 20 {
            let count = Glibc.send(stream.fd, chunk, chunk.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            if count <= 0 { break }
            sent += count
        }
        usleep(500_000)
        #expect(sent > 1 << 20, "the socket took \(sent) bytes")
        #expect(taken(by: stream, of: sent) <= 64 * 1024, "the server read \(taken(by: stream, of: sent)) of \(sent) bytes sent ahead")
        // The same bytes sent with the request's head, in one go: the read that took the head took up to 256 KiB of
        // them, held for the stream's life. A head's read is the head's limit and the 64 KiB at most. Five times:
        // loopback may hand the bytes over in pieces, and a first read that woke after one piece only took less.
        var streams: [RawClient] = []
        for _ in 0..<5 {
            let together = try RawClient(port: server.port)
            streams.append(together)
            let head = Array("GET /v1/jobs/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            let sentTogether = sendWithoutWaiting(head + [UInt8](repeating: 0x61, count: 1 << 20), on: together)
            #expect(together.read(until: "event: state", timeout: 5).hasPrefix("HTTP/1.1 200"))
            usleep(300_000)
            #expect(taken(by: together, of: sentTogether) <= 16 * 1024 + 64 * 1024,
                    "the server read \(taken(by: together, of: sentTogether)) of \(sentTogether) bytes sent with the head")
        }
        // Sent behind a body (the read that took the body took up to 256 KiB of what followed it): a small POST's
        // head alone, then its body, an event stream's head and 1 MiB, in one go.
        for _ in 0..<5 {
            let behind = try RawClient(port: server.port)
            streams.append(behind)
            let post = "POST /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
            behind.send(post)
            // The head taken alone (its read, then the body's: the body's read is the one under test).
            #expect(eventually(5) { taken(by: behind, of: post.utf8.count) == post.utf8.count }, "the head was read")
            let sentBehind = sendWithoutWaiting(Array("{}GET /v1/jobs/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
                                                 + [UInt8](repeating: 0x61, count: 1 << 20), on: behind)
            #expect(behind.read(until: "event: state", timeout: 5).contains("HTTP/1.1 200"))
            usleep(300_000)
            let total = sentBehind + post.utf8.count
            #expect(taken(by: behind, of: total) <= post.utf8.count + 16 * 1024 + 64 * 1024,
                    "the server read \(taken(by: behind, of: total)) of \(total) bytes sent behind a body")
        }
        #expect(try server.json("/healthz").status == 200)
        silent.close() // the fetch's connection is reset: the server stops without waiting out the stall
        // Reading starts again once answers go out: 2000 requests sent at once (more than the 64 KiB kept) are all
        // answered, in order, on the one connection.
        let pipelined = try RawClient(port: server.port)
        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: \(String(repeating: "p", count: 20))\r\n\r\n"
        pipelined.send(String(repeating: request, count: 2000))
        shutdown(pipelined.fd, Int32(SHUT_WR))
        let answers = pipelined.read(timeout: 60)
        #expect(answers.components(separatedBy: "HTTP/1.1 200 ").count - 1 == 2000 && pipelined.hasBeenClosedByPeer,
                "\(answers.components(separatedBy: "HTTP/1.1 200 ").count - 1) answers")
    }
}
