import Foundation
import Testing
import TestSupport

/// Inputs fetched by URL from a real HTTP server (Tests/Outbound/peer.py), and every way the address policy, the
/// size limit, the stall timeout or the other server can refuse them: a clear 422, and nothing left behind.
@Suite struct URLInputTests {
    private func fetch(_ server: TestServer, _ url: String) throws -> (status: Int, object: [String: Any]) {
        // Bounded: a download the server fails to stop fails the test rather than hanging it.
        try server.json("/v1/uploads", ["-m", "60", "-H", "Content-Type: application/json", "-d", #"{"url": "\#(url)"}"#])
    }

    private func code(_ answer: (status: Int, object: [String: Any])) -> String? {
        (answer.object["error"] as? [String: Any])?["code"] as? String
    }

    /// Nothing of a refused download stays in the uploads folder.
    private func uploadsFolder(_ server: TestServer) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: server.data.appendingPathComponent("uploads").path)
    }

    @Test func anAllowedURLBecomesAnUploadAndAJobRunsOnIt() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let source = try Media.path(.standard)
        try FileManager.default.copyItem(atPath: source, toPath: peer.media.appendingPathComponent("clip.mp4").path)
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8"])
        // Through a redirect, as buckets and CDNs answer.
        let target = peer.base + "/media/clip.mp4"
        let answer = try fetch(server, peer.base + "/redirect?to=" + target.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
        #expect(answer.status == 201, "\(answer.object)")
        let sha = String(try Shell.check("sha256sum", [source]).prefix(64))
        let size = try #require(try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int)
        #expect(answer.object["sha256"] as? String == sha && answer.object["size"] as? Int == size && answer.object["filename"] as? String == "clip.mp4",
                "\(answer.object)")
        // Without a Content-Disposition, named after where the redirect led, not after the redirecting path.
        let unnamed = peer.base + "/slow-media/clip.mp4"
        let led = try fetch(server, peer.base + "/redirect?to=" + unnamed.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
        #expect(led.status == 201 && led.object["filename"] as? String == "clip.mp4", "\(led.object)")
        // A host name outside ASCII is fetched by its IDNA form (libcurl, without a locale, took the name as given
        // for a bad URL: accepted, then failed as invalid_url). curl resolves every *.localhost to loopback.
        let port = try #require(URL(string: peer.base)?.port)
        let international = try fetch(server, "http://éxample.localhost:\(port)/media/clip.mp4")
        #expect(international.status == 201 && international.object["sha256"] as? String == sha, "\(international.object)")
        let id = try #require(answer.object["id"] as? String)
        let job = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(id)"}"#])
        let jobID = try #require(job.object["id"] as? String)
        #expect(try eventually(60) { try server.json("/v1/jobs/\(jobID)").object["state"] as? String == "succeeded" })
    }

    @Test func privateAddressesAreRefusedWhereverTheURLLeads() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: peer.media.appendingPathComponent("clip.mp4").path)
        let closed = try TestServer()
        for (url, kind) in [
            (peer.base + "/media/clip.mp4", "loopback"),
            ("http://localhost:\(peer.port)/media/clip.mp4", "loopback"), // a name that resolves to loopback
            ("http://[::ffff:127.0.0.1]:\(peer.port)/media/clip.mp4", "loopback"),
            ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
            ("http://10.0.0.1:9/x", "private"),
        ] {
            let answer = try fetch(closed, url)
            let message = (answer.object["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(answer.status == 422 && code(answer) == "url_not_allowed" && message.contains(kind), "\(url): \(answer.object)")
            // Where a name leads stays unsaid: the answer would map the network behind the server.
            if url.hasPrefix("http://localhost") { #expect(!message.contains("127.0.0.1") && !message.contains("::1"), "\(message)") }
        }
        #expect(peer.requests().isEmpty, "no request reached the peer")
        // Allowed: loopback. A redirect from there to the metadata address is still refused, at connect time.
        let open = try TestServer(["--allow-private-urls", "127.0.0.0/8"])
        let redirected = try fetch(open, peer.base + "/redirect?to=http%3A%2F%2F169.254.169.254%2Flatest%2Fmeta-data%2F")
        #expect(redirected.status == 422 && code(redirected) == "url_not_allowed", "\(redirected.object)")
        #expect(((redirected.object["error"] as? [String: Any])?["message"] as? String)?.contains("cloud metadata") == true)
        // Nor what libcurl cannot use (a port past 65535, a space): each was accepted, and failed only when fetched.
        for scheme in ["ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://127.0.0.1/", "HTTP://", "http://127.0.0.1:99999/x",
                       "http://127.0.0.1:99999999999999999999/x", "http://127.0.0.1/a b.mp4",
                       "http://127.0.0.1:99999999999999999999/a|b", "http://[1.2.3.4]/x", "http://[v1.x]/x", "http://ex%2Fample.com/x"] {
            let answer = try fetch(open, scheme)
            #expect(answer.status == 422 && code(answer) == "invalid_url", "\(scheme): \(answer.object)")
            // The same code for a job's input URL, which said 400 invalid_request.
            let job = try open.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": {"url": "\#(scheme)"}}"#])
            #expect(job.status == 422 && code(job) == "invalid_url", "\(scheme): \(job.object)")
        }
        // Text URLComponents mends (percent-encodes) before the port: the port was read at the mended string's
        // offsets, past the end of this one, and the server crashed. Answered, whatever the answer.
        for mended in ["http://a{b@127.0.0.1:9/x", "http://user:p{w@127.0.0.1:9"] {
            #expect(try fetch(open, mended).status != 0, "\(mended)")
            let job = try open.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": {"url": "\#(mended)"}}"#])
            #expect(job.status != 0, "\(mended): \(job.object)")
            #expect(try open.json("/healthz").status == 200, "the server still serves after \(mended)")
        }
        #expect(try uploadsFolder(closed).isEmpty && uploadsFolder(open).isEmpty)
    }

    @Test func missingStalledOversizedAndUnreadableDownloadsFailClearlyAndLeaveNothing() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let text = peer.media.appendingPathComponent("notes.mp4")
        try Data("not media at all".utf8).write(to: text)
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8", "--max-upload-bytes", "1000000", "--fetch-stall-timeout", "4"])
        // /trickle sends 100 bytes every half second: never silent for the stall timeout, but far under 1 KiB a second.
        // /silent sends its head and no byte of its body: the other stall. /error-stall answers 503 and stops
        // partway through its body: the answer is the status, without waiting for the rest (it was read, and stalled).
        for (path, expected) in [("/missing", "http_status"), ("/error-stall", "http_status"), ("/stall", "stalled"), ("/trickle?bytes=100&every=0.5", "stalled"), ("/silent", "stalled"),
                                 ("/big", "too_large"), ("/big-chunked", "too_large"), ("/media/notes.mp4", "unsupported_format")] {
            let started = Date()
            let answer = try fetch(server, peer.base + path)
            #expect(answer.status == 422, "\(path): \(answer.object)")
            #expect(code(answer) == expected, "\(path): \(answer.object)")
            if expected == "stalled" { #expect(Date().timeIntervalSince(started) < 12, "\(path): the stall timeout, not the total one") }
            if path == "/error-stall" {
                #expect(((answer.object["error"] as? [String: Any])?["message"] as? String)?.contains("503") == true)
                // A round trip, a curl process started on a busy machine included, in under 3.5 s.
                #expect(Date().timeIntervalSince(started) < 3.5, "answered without waiting out the 4 s stall")
            }
            if path == "/silent" { #expect(((answer.object["error"] as? [String: Any])?["message"] as? String)?.contains("No bytes arrived") == true) }
            let left = try uploadsFolder(server)
            #expect(left.isEmpty, "\(path) left \(left)")
        }
        #expect(try server.json("/healthz").status == 200)
    }

    /// A download that hangs holds a fetch thread, not the probe pool: uploads meanwhile are stored at once.
    @Test func aHangingFetchNeverHoldsUpUploads() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8", "--probe-threads", "1", "--fetch-threads", "2",
                                     "--fetch-stall-timeout", "20"])
        let hanging = DispatchGroup()
        for _ in 0..<2 {
            hanging.enter()
            Thread {
                _ = try? self.fetch(server, peer.base + "/stall")
                hanging.leave()
            }.start()
        }
        #expect(eventually(10) { peer.requests().filter { $0["path"] as? String == "/stall" }.count == 2 })
        let song = try Media.path(.audioOnly)
        let started = Date()
        let upload = try server.json("/v1/uploads/", ["-T", song])
        #expect(upload.status == 201 && Date().timeIntervalSince(started) < 10, "\(upload.object), \(Date().timeIntervalSince(started)) s")
        #expect(try server.json("/v1/jobs").status == 200)
        hanging.wait()
    }

    /// A client that gives up on its request stops the download: it would otherwise hold a fetch thread until the
    /// other server finished (here a steady 10 KB/s, 100 s for the whole body) and store an upload nobody knows of.
    @Test func aFetchStopsWhenItsClientLeaves() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8", "--fetch-threads", "1"])
        // The client hangs up once the download is under way (whenever a loaded machine gets there).
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        client.arguments = ["-s", "-o", "/dev/null", "-H", "Content-Type: application/json",
                            "-d", #"{"url": "\#(peer.base)/trickle?bytes=1000&every=0.1"}"#, server.base + "/v1/uploads"]
        try client.run()
        #expect(eventually(30) { peer.requests().contains { ($0["path"] as? String)?.hasPrefix("/trickle?") == true } })
        Thread.sleep(forTimeInterval: 0.5)
        kill(client.processIdentifier, SIGKILL) // not SIGTERM: the test process's children may ignore it
        client.waitUntilExit()
        #expect(eventually(10) { peer.requests().contains { $0["path"] as? String == "/trickle-closed" } },
                "the server hung up on the other server")
        #expect(try eventually(10) { try uploadsFolder(server).isEmpty }, "the partial download is removed")
        #expect(eventually(10) { server.log.contains("the client left") })
        // The only fetch thread is free again.
        try FileManager.default.copyItem(atPath: try Media.path(.audioOnly), toPath: peer.media.appendingPathComponent("a.m4a").path)
        #expect(try fetch(server, peer.base + "/media/a.m4a").status == 201)
    }

    @Test func credentialsInURLsAreNeverLogged() throws {
        let server = try TestServer()
        let url = "http://user:hunter2@10.1.2.3/v.mp4?X-Amz-Signature=deadbeefcafe&X-Amz-Credential=AKIAEXAMPLE&part=1"
        let answer = try fetch(server, url)
        #expect(answer.status == 422)
        let log = server.log
        #expect(log.contains("fetching an upload failed") && log.contains("part=1"), "the failure is logged, redacted")
        for secret in ["hunter2", "deadbeefcafe", "AKIAEXAMPLE"] {
            #expect(!log.contains(secret) && !(answer.object.description.contains(secret)), "\(secret) leaked")
        }
        // Spellings with no host to URLComponents, which libcurl reads as credentials: refused as not URLs, before
        // libcurl sees them. They were fetched (with the password sent) and logged whole.
        for spelling in ["http:/user:hunter3@10.1.2.3/v.mp4", "http:///user:hunter3@10.1.2.3/v.mp4", "http:user:hunter3@10.1.2.3/v.mp4"] {
            let refused = try fetch(server, spelling)
            let message = (refused.object["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(refused.status == 422 && code(refused) == "invalid_url" && message.hasPrefix("url: not an http or https URL with a host"),
                    "\(spelling): \(refused.object)")
        }
        #expect(!server.log.contains("hunter3"), "\(server.log)")
    }
}

/// Jobs whose input is a URL: the API answers at once, a worker fetches (phase `fetching`), then transcodes.
@Suite struct URLInputJobTests {
    private func create(_ server: TestServer, _ input: String) throws -> (status: Int, object: [String: Any]) {
        try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": \#(input), "settings": {"video": {"width": 320}}}"#])
    }

    /// A server that takes longer to answer than --stall-timeout (here 8 s against 4) is waited for: the download's
    /// own stall timeout (30 s) says when it is stuck. Only bytes counted as progress, and the job failed for good
    /// as stalled before the first one came.
    @Test func aSlowAnsweringServerIsNotAStall() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: peer.media.appendingPathComponent("clip.mp4").path)
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8", "--stall-timeout", "4"])
        let created = try create(server, #"{"url": "\#(peer.base)/late-media/clip.mp4"}"#)
        let id = try #require(created.object["id"] as? String, "\(created.object)")
        var job: [String: Any] = [:]
        #expect(try eventually(90) {
            job = try server.json("/v1/jobs/\(id)").object
            return ["succeeded", "failed", "canceled"].contains(job["state"] as? String ?? "")
        })
        #expect(job["state"] as? String == "succeeded", "\(job["error"] ?? job)")
    }

    @Test func aJobFetchesItsInputShowingTheDownloadThenTranscodesIt() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let source = try Media.path(.standard)
        try FileManager.default.copyItem(atPath: source, toPath: peer.media.appendingPathComponent("clip.mp4").path)
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8"])
        let created = try create(server, #"{"url": "\#(peer.base)/slow-media/clip.mp4?token=s3cret"}"#)
        #expect(created.status == 201, "\(created.object)")
        let id = try #require(created.object["id"] as? String)
        let input = created.object["input"] as? [String: Any]
        #expect(input?["url"] as? String == peer.base + "/slow-media/clip.mp4?token=REDACTED" && input?["filename"] as? String == "clip.mp4",
                "the URL is shown without its token: \(input ?? [:])")
        #expect(input?.keys.contains("size") == true && input?["size"] is NSNull, "null, not left out, until fetched: \(input ?? [:])")
        var fetching: [[String: Any]] = []
        let done = try eventually(60) {
            let job = try server.json("/v1/jobs/\(id)").object
            if let progress = job["progress"] as? [String: Any], progress["phase"] as? String == "fetching" { fetching.append(progress) }
            return job["state"] as? String == "succeeded"
        }
        let final = try server.json("/v1/jobs/\(id)").object
        #expect(done, "\(final)")
        let size = try #require(try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int)
        #expect(fetching.contains { ($0["bytes"] as? Int ?? 0) > 0 && ($0["fraction"] as? Double ?? 0) > 0 && $0["totalBytes"] as? Int == size },
                "the download shows in the job's progress: \(fetching.suffix(3))")
        let job = try server.json("/v1/jobs/\(id)").object
        #expect((job["progress"] as? [String: Any])?["phase"] as? String == "transcoding")
        let upload = try server.json("/v1/uploads/\((job["input"] as? [String: Any])?["id"] as? String ?? "")").object
        let sha = String(try Shell.check("sha256sum", [source]).prefix(64))
        #expect(upload["size"] as? Int == size && upload["sha256"] as? String == sha)
        let tracks = (job["output"] as? [String: Any])?["tracks"] as? [[String: Any]]
        #expect(tracks?.contains { $0["width"] as? Int == 320 } == true)
        #expect(!server.log.contains("s3cret"))
    }

    /// Two attempts of one job fetching its URL at once (in a cluster: a paused worker whose lease was taken over):
    /// the one that records the bytes second uses the first's, and removes only its own file. Here the other attempt
    /// (the second claim) records its copy while this one still downloads. Before, each attempt stored the bytes
    /// under the same name and the loser removed it, so the job failed ("no longer waits for its bytes") and, in a
    /// cluster, the winner's input was gone.
    @Test func anInputRecordedByAnotherAttemptMeanwhileIsUsed() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let source = try Media.path(.standard)
        try FileManager.default.copyItem(atPath: source, toPath: peer.media.appendingPathComponent("clip.mp4").path)
        let server = try TestServer(["--allow-private-urls", "127.0.0.0/8"])
        let created = try create(server, #"{"url": "\#(peer.base)/slow-media/clip.mp4"}"#)
        let id = try #require(created.object["id"] as? String)
        let upload = try #require((created.object["input"] as? [String: Any])?["id"] as? String)
        #expect(try eventually(20) {
            let progress = try server.json("/v1/jobs/\(id)").object["progress"] as? [String: Any]
            return progress?["phase"] as? String == "fetching" && (progress?["bytes"] as? Int ?? 0) > 0
        })
        // What the other attempt leaves: its copy under its own name, recorded.
        let other = server.data.appendingPathComponent("uploads/\(upload).2")
        try FileManager.default.copyItem(atPath: source, toPath: other.path)
        let sha = String(try Shell.check("sha256sum", [source]).prefix(64))
        let size = try #require(try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int)
        let waiting = try #require(try Shell.check("sqlite3", [server.data.appendingPathComponent("transcoderd.sqlite").path,
                                                              "SELECT count(*) FROM uploads WHERE id = '\(upload)' AND sha256 = ''"]).first)
        #expect(waiting == "1", "the upload still waits for its bytes")
        _ = try Shell.check("sqlite3", ["-cmd", ".timeout 5000", server.data.appendingPathComponent("transcoderd.sqlite").path,
                                        "UPDATE uploads SET sha256 = '\(sha)', size = \(size), path = 'uploads/\(upload).2' WHERE id = '\(upload)'"])
        let done = try eventually(60) { ["succeeded", "failed"].contains(try server.json("/v1/jobs/\(id)").object["state"] as? String ?? "") }
        let job = try server.json("/v1/jobs/\(id)").object
        #expect(done && job["state"] as? String == "succeeded", "\(job["error"] ?? "")")
        #expect(FileManager.default.fileExists(atPath: other.path), "the recorded copy stays")
        #expect(!FileManager.default.fileExists(atPath: server.data.appendingPathComponent("uploads/\(upload)").path),
                "this attempt's own copy is removed")
    }

    @Test func refusedMissingAndCanceledFetchesEndTheJobClearly() throws {
        let peer = try OutboundPeer(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let server = try TestServer()
        // A literal private address is refused at once; a name only when the worker connects.
        let literal = try create(server, #"{"url": "http://127.0.0.1:\#(peer.port)/media/x.mp4"}"#)
        #expect(literal.status == 422 && (literal.object["error"] as? [String: Any])?["code"] as? String == "url_not_allowed")
        let named = try #require(try create(server, #"{"url": "http://localhost:\#(peer.port)/media/x.mp4"}"#).object["id"] as? String)
        #expect(try eventually(30) { try server.json("/v1/jobs/\(named)").object["state"] as? String == "failed" })
        let error = try server.json("/v1/jobs/\(named)").object["error"] as? [String: Any]
        #expect(error?["code"] as? String == "url_not_allowed" && (error?["message"] as? String)?.contains("loopback") == true, "\(error ?? [:])")
        #expect(peer.requests().isEmpty)

        let open = try TestServer(["--allow-private-urls", "127.0.0.0/8"])
        let missing = try #require(try create(open, #"{"url": "\#(peer.base)/missing"}"#).object["id"] as? String)
        #expect(try eventually(30) { try open.json("/v1/jobs/\(missing)").object["state"] as? String == "failed" })
        #expect((try open.json("/v1/jobs/\(missing)").object["error"] as? [String: Any])?["code"] as? String == "http_status")
        #expect(peer.requests().filter { $0["path"] as? String == "/missing" }.count == 1, "a 404 is not asked again")
        // A 503 (a bucket shedding load, a server restarting) is asked again after a wait, as the job's next attempt:
        // it failed the job for good.
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: peer.media.appendingPathComponent("later.mp4").path)
        // Its answer names the file (Content-Disposition, a quoted name with `;`, a folder and a control character):
        // the input is named so, not after the URL, cleaned as any upload's name.
        let later = try #require(try create(open, #"{"url": "\#(peer.base)/flaky-media/later.mp4?as=dir%2Ffinal%3B%20cut%01.mp4"}"#).object["id"] as? String)
        #expect(try eventually(60) { try open.json("/v1/jobs/\(later)").object["state"] as? String == "succeeded" },
                "\((try? open.json("/v1/jobs/\(later)").object) ?? [:])")
        let inputName = (try open.json("/v1/jobs/\(later)").object["input"] as? [String: Any])?["filename"] as? String
        #expect(inputName == "final; cut.mp4", "\(inputName ?? "none")")
        let tries = peer.requests().filter { ($0["path"] as? String)?.hasPrefix("/flaky-media/later.mp4") == true }
            .compactMap { $0["received"] as? Double }
        #expect(tries.count == 2 && tries[1] - tries[0] >= 4.5, "asked again after the wait: \(tries)")
        #expect(try open.json("/v1/jobs/\(later)").object["attempts"] as? Int == 2)
        // One that asks to be left alone longer (503 with Retry-After: 16, for 16 s) is asked again when it said: the
        // three attempts were spent 5 and 10 s apart, and the job failed.
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: peer.media.appendingPathComponent("busy.mp4").path)
        let busy = try #require(try create(open, #"{"url": "\#(peer.base)/busy-media/busy.mp4"}"#).object["id"] as? String)
        #expect(try eventually(90) { ["succeeded", "failed"].contains(try open.json("/v1/jobs/\(busy)").object["state"] as? String ?? "") })
        let asks = peer.requests().filter { $0["path"] as? String == "/busy-media/busy.mp4" }.compactMap { $0["received"] as? Double }
        #expect(try open.json("/v1/jobs/\(busy)").object["state"] as? String == "succeeded" && asks.count == 2
                && asks[1] - asks[0] >= 15.5, "asked again when the server said: \(asks), \((try? open.json("/v1/jobs/\(busy)").object) ?? [:])")
        // Canceled while the download hangs: it stops at once.
        let hanging = try #require(try create(open, #"{"url": "\#(peer.base)/stall"}"#).object["id"] as? String)
        #expect(try eventually(30) { (try open.json("/v1/jobs/\(hanging)").object["progress"] as? [String: Any])?["phase"] as? String == "fetching" })
        let asked = Date()
        _ = try open.curl("/v1/jobs/\(hanging)/cancel", ["-X", "POST"])
        #expect(try eventually(10) { try open.json("/v1/jobs/\(hanging)").object["state"] as? String == "canceled" })
        #expect(Date().timeIntervalSince(asked) < 5)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: open.data.appendingPathComponent("uploads").path)
        #expect(leftovers.allSatisfy { !$0.hasSuffix(".partial") }, "\(leftovers)")
    }
}
