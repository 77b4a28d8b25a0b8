import Foundation
import Testing
import TestSupport

/// The API of a real `transcoderd serve` on 127.0.0.1, driven with curl and raw sockets.
@Suite(.serialized) struct APITests {
    static let shared = Result { try TestServer() }

    private var server: TestServer { get throws { try Self.shared.get() } }

    private func upload(_ path: String) throws -> [String: Any] {
        let (status, object) = try server.json("/v1/uploads/", ["-T", path])
        #expect(status == 201, "\(object)")
        return object
    }

    private func waitForState(_ id: String, _ states: Set<String>, seconds: Double = 60) throws -> [String: Any] {
        var job: [String: Any] = [:]
        _ = try eventually(seconds) {
            job = try server.json("/v1/jobs/\(id)").object
            return states.contains(job["state"] as? String ?? "")
        }
        return job
    }

    private var uploadFolderEntries: [String] {
        get throws { Media.files(in: try server.data.appendingPathComponent("uploads")) }
    }

    @Test func healthReadinessAndUnknownRoutes() throws {
        #expect(try server.json("/healthz").object["status"] as? String == "ok")
        #expect(try server.json("/readyz").status == 200)
        let missing = try server.json("/nope")
        #expect(missing.status == 404 && (missing.object["error"] as? [String: Any])?["code"] as? String == "not_found")
        for method in ["TRACE", "FOO", "DELETE", "PUT"] {
            let output = try Shell.run("curl", ["-s", "-i", "-X", method, try server.base + "/healthz"])
            #expect(output.stdout.hasPrefix("HTTP/1.1 405"), "\(method): \(output.stdout.prefix(80))")
            #expect(output.stdout.contains("Allow: GET, HEAD"))
            #expect(output.stdout.contains(#""code":"method_not_allowed""#))
        }
        let head = try Shell.run("curl", ["-s", "-I", try server.base + "/v1/presets"])
        #expect(head.stdout.hasPrefix("HTTP/1.1 200") && head.stdout.contains("Content-Length: "))
    }

    @Test func uploadsByRawBodyMultipartAndPut() throws {
        let input = try Media.path(.standard)
        let sha = String(try Shell.check("sha256sum", [input]).prefix(64))
        let raw = try server.json("/v1/uploads", ["-X", "POST", "-T", input, "-H", "Content-Type: video/mp4"])
        let multipart = try server.json("/v1/uploads", ["-F", "file=@" + input])
        let put = try server.json("/v1/uploads/", ["-T", input])
        for (status, object) in [raw, multipart, put] {
            #expect(status == 201, "\(object)")
            #expect(object["sha256"] as? String == sha)
            #expect(object["size"] as? Int == (try FileManager.default.attributesOfItem(atPath: input)[.size] as? Int))
            #expect((object["tracks"] as? [[String: Any]])?.count == 2)
        }
        #expect(put.object["filename"] as? String == "standard.mp4")
        #expect(multipart.object["filename"] as? String == "standard.mp4")
        #expect(raw.object["contentType"] as? String == "video/mp4")
    }

    /// An upload can be read back and deleted, but not while a job uses it as its input or its watermark; once no job
    /// does, the same upload is deleted.
    @Test func uploadsAreReadBackAndDeletedOnceNoJobUsesThem() throws {
        let input = try Media.path(.audioOnly)
        let created = try server.json("/v1/uploads/", ["-T", input])
        let id = try #require(created.object["id"] as? String)
        let uploads = try server.data.appendingPathComponent("uploads")
        let path = uploads.appendingPathComponent(id).path
        let read = try server.json("/v1/uploads/\(id)")
        #expect(read.status == 200 && read.object["sha256"] as? String == created.object["sha256"] as? String)
        #expect(read.object["filename"] as? String == "audio-only.wav")

        let image = try Media.scratch().appendingPathComponent("mark.png").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=32x32", "-frames:v", "1", image])
        let mark = try #require(try server.json("/v1/uploads/", ["-T", image]).object["id"] as? String)
        let job = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                               #"{"input": "\#(id)", "settings": {"filters": {"video": {"watermark": {"upload": "\#(mark)"}}}}}"#])
        let jobID = try #require(job.object["id"] as? String, "\(job.object)")
        for used in [id, mark] {
            let inUse = try server.json("/v1/uploads/\(used)", ["-X", "DELETE"])
            #expect(inUse.status == 409 && (inUse.object["error"] as? [String: Any])?["code"] as? String == "upload_in_use")
            #expect(FileManager.default.fileExists(atPath: uploads.appendingPathComponent(used).path), "a refused delete keeps the file")
        }

        _ = try waitForState(jobID, ["succeeded", "failed"])
        // Deleting the job deletes its input (no other job uses it) but not the image, which may serve other jobs.
        #expect(try server.curl("/v1/jobs/\(jobID)", ["-X", "DELETE"]).status == 204)
        #expect(try server.json("/v1/uploads/\(id)").status == 404)
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try server.json("/v1/uploads/\(mark)").status == 200)
        // No job uses the image now: the same upload that was refused is deleted.
        #expect(try server.curl("/v1/uploads/\(mark)", ["-X", "DELETE"]).status == 204)
        #expect(try server.json("/v1/uploads/\(mark)").status == 404)
        #expect(!FileManager.default.fileExists(atPath: uploads.appendingPathComponent(mark).path))

        let missing = try server.json("/v1/uploads/no-such-upload", ["-X", "DELETE"])
        #expect(missing.status == 404 && (missing.object["error"] as? [String: Any])?["code"] as? String == "upload_not_found")
        let wrong = try Shell.run("curl", ["-s", "-i", "-X", "POST", try server.base + "/v1/uploads/\(id)"])
        #expect(wrong.stdout.hasPrefix("HTTP/1.1 405") && wrong.stdout.contains("Allow: DELETE, GET, HEAD, PUT"), "\(wrong.stdout.prefix(300))")
    }

    /// A one-shot job refused for its settings keeps nothing of its upload.
    @Test func aRefusedOneShotJobLeavesNoUploadBehind() throws {
        let before = try uploadFolderEntries
        let refused = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly)),
                                                   "-F", #"settings={"filters": {"video": {"watermark": {"upload": "no-such-image"}}}}"#])
        #expect(refused.status == 422 && (refused.object["error"] as? [String: Any])?["code"] as? String == "invalid_settings",
                "\(refused.object)")
        #expect(eventually(5) { (try? uploadFolderEntries) == before }, "left: \((try? uploadFolderEntries) ?? [])")
        // A tempo beside a copied track is refused where it comes in, naming the key.
        let tempo = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly)),
                                                 "-F", #"settings={"audio": "copy", "filters": {"audio": {"tempo": 2}}}"#])
        let error = tempo.object["error"] as? [String: Any]
        #expect(tempo.status == 400 && error?["code"] as? String == "invalid_settings"
                    && (error?["message"] as? String)?.hasPrefix("settings.filters.audio.tempo:") == true, "\(tempo.object)")
        #expect(eventually(5) { (try? uploadFolderEntries) == before }, "left: \((try? uploadFolderEntries) ?? [])")
    }

    @Test func chunkedAndExpectContinueUploads() throws {
        let input = try Media.path(.tenSeconds)
        let chunked = try Shell.run("curl", ["-s", "-X", "POST", "-H", "Transfer-Encoding: chunked", "-T", input,
                                             "-w", "\n%{http_code}", try server.base + "/v1/uploads"])
        #expect(chunked.stdout.hasSuffix("\n201"), "\(chunked.stdout.suffix(300))")
        // Both bodies span several of the upload writer's buffers; the digest proves every byte landed in order.
        let sha = String(try Shell.check("sha256sum", [input]).prefix(64))
        #expect(chunked.stdout.contains("\"sha256\":\"\(sha)\""), "chunked: \(chunked.stdout.prefix(300))")
        let put = try server.json("/v1/uploads/", ["-T", input])
        #expect(put.object["sha256"] as? String == sha, "\(put.object)")
        // curl sends Expect: 100-continue for bodies over 1 MiB and waits a second for the interim answer.
        let size = (try FileManager.default.attributesOfItem(atPath: input)[.size] as? Int) ?? 0
        #expect(size > 1024 * 1024)
        let expect = try Shell.run("curl", ["-s", "-v", "-T", input, "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                                            try server.base + "/v1/uploads/"])
        #expect(expect.stderr.contains("Expect: 100-continue") && expect.stderr.contains("HTTP/1.1 100 Continue"))
        let fields = expect.stdout.split(separator: " ")
        #expect(fields.first == "201")
        // curl prints the interim answer only when it got one (otherwise it waits 1 s and sends anyway); the time
        // bound only catches a hang, since it also covers fsync and probing the upload.
        #expect((Double(fields.last ?? "") ?? 99) < 10, "\(expect.stdout)")
        // An HTTP/1.0 client knows no interim answers (RFC 9110 §10.1.1): no 100 Continue, one answer once the body
        // is in.
        let media = try Data(contentsOf: URL(fileURLWithPath: try Media.path(.standard)))
        let old = try RawClient(port: try server.port)
        old.send("PUT /v1/uploads/ HTTP/1.0\r\nContent-Length: \(media.count)\r\nExpect: 100-continue\r\n\r\n")
        let interim = old.read(timeout: 1.5)
        #expect(interim.isEmpty, "nothing before the body: \(interim)")
        old.send(media)
        let answer = old.read()
        #expect(answer.hasPrefix("HTTP/1.1 201 ") && !answer.contains(" 100 Continue") && old.hasBeenClosedByPeer,
                "\(answer.prefix(300))")
        // One that asks to keep the connection is told it is kept (HTTP/1.0 closes unless the answer says so; a
        // client waited for the close), and its next request is answered on it.
        let kept = try RawClient(port: try server.port)
        kept.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        let first = kept.read(until: "\"ok\"")
        #expect(first.contains("\r\nConnection: keep-alive\r\n") && !kept.hasBeenClosedByPeer, "\(first)")
        kept.send("GET /healthz HTTP/1.0\r\n\r\n")
        let second = kept.read()
        #expect(second.hasPrefix("HTTP/1.1 200 ") && second.contains("\r\nConnection: close\r\n") && kept.hasBeenClosedByPeer, "\(second)")
        // A JSON body is held in memory: one longer than that limit is refused before it is sent, not invited with a
        // 100 Continue and refused at 1 MiB (both routes that take JSON or a file by its content type).
        for path in ["/v1/jobs", "/v1/uploads"] {
            let big = try RawClient(port: try server.port)
            big.send("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 500000000\r\nExpect: 100-continue\r\n\r\n")
            let refusal = big.read(until: "}}")
            #expect(refusal.hasPrefix("HTTP/1.1 413 ") && refusal.contains("body_too_large") && refusal.contains("at most 1048576"),
                    "\(path): \(refusal.prefix(300))")
        }
    }

    @Test func unreadableUploadsAreRefusedAndNothingIsKept() throws {
        let folder = try Media.scratch()
        let noise = try Media.randomBytes(300_000, into: folder, name: "noise.mov")
        let refused = try server.json("/v1/uploads/", ["-T", noise])
        #expect(refused.status == 422)
        #expect((refused.object["error"] as? [String: Any])?["code"] as? String == "unsupported_format")
        let empty = try server.json("/v1/uploads", ["--data-binary", ""])
        #expect(empty.status == 422)
        let noFile = try server.json("/v1/uploads", ["-F", "other=x"])
        #expect(noFile.status == 400)
        #expect(try eventually(5) { try uploadFolderEntries.allSatisfy { !$0.hasSuffix(".partial") } })
    }

    @Test func anUploadAbortedMidwayLeavesNothing() throws {
        let folder = try Media.scratch()
        let big = folder.appendingPathComponent("big.bin").path
        try Shell.check("truncate", ["-s", "200M", big])
        let before = try uploadFolderEntries
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        client.arguments = ["-s", "--limit-rate", "2M", "-T", big, try server.base + "/v1/uploads/"]
        client.standardOutput = FileHandle.nullDevice
        try Shell.launch(client)
        #expect(try eventually(10) { try uploadFolderEntries.count > before.count }, "the upload started")
        kill(client.processIdentifier, SIGKILL)
        client.waitUntilExit()
        let settled = try eventually(5) { try uploadFolderEntries == before }
        #expect(settled, "left: \((try? uploadFolderEntries) ?? [])")
        #expect(try server.json("/healthz").status == 200)
    }

    @Test func filenamesNeverBecomePaths() throws {
        for name in ["..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fshadow", "%2E%2E", "a%00b.mp4", "%5C..%5Cwin.ini"] {
            let (status, object) = try server.json("/v1/uploads/\(name)", ["-X", "PUT", "-T", try Media.path(.audioOnly)])
            #expect(status == 201, "\(name): \(status) \(object)")
            if status == 201 {
                let filename = object["filename"] as? String ?? ""
                #expect(!filename.contains("/") && filename != ".." && !filename.contains("\0"), "\(name) became \(filename)")
                #expect(FileManager.default.fileExists(atPath: try server.data.appendingPathComponent("uploads/\(object["id"] as? String ?? "")").path))
            }
        }
        #expect(!FileManager.default.fileExists(atPath: "/etc/passwd.mp4"))
        // A name over 255 bytes is shortened by whole characters, its extension kept: cut at byte 255, a character
        // was split and the whole name became "upload".
        let long = "a" + String(repeating: "動", count: 100) + ".wav"
        let (status, object) = try server.json("/v1/uploads/" + long.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!,
                                               ["-X", "PUT", "-T", try Media.path(.audioOnly)])
        let shortened = object["filename"] as? String ?? ""
        #expect(status == 201 && shortened == "a" + String(repeating: "動", count: 83) + ".wav", "\(shortened)")
    }

    @Test func aClientThatVanishesMidDownloadLeavesTheServerWell() throws {
        let created = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.tenSeconds)), "-F", "settings={\"video\":{\"averageBitRate\":8000000}}"])
        let id = try #require(created.object["id"] as? String)
        _ = try waitForState(id, ["succeeded"])
        for _ in 0..<5 {
            let client = Process()
            client.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            client.arguments = ["-s", "--limit-rate", "100K", "-o", "/dev/null", try server.base + "/v1/jobs/\(id)/output"]
            try Shell.launch(client)
            usleep(300_000)
            kill(client.processIdentifier, SIGKILL)
            client.waitUntilExit()
        }
        let events = try RawClient(port: try server.port)
        events.send("GET /v1/jobs/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        _ = events.read(until: "event: state", timeout: 5)
        #expect(try server.json("/healthz").status == 200)
        #expect(try server.curl("/v1/jobs/\(id)/output", ["-o", "/dev/null"]).status == 200)
    }

    /// A client that says it sends no more after its request (`nc -N`, `shutdown(SHUT_WR)`) still gets the answer,
    /// whether its end of file comes while the handler runs or while the response goes out; then the connection
    /// closes. Before, either end of file closed the connection: no answer, or a download cut short.
    @Test func aClientThatHalfClosesAfterItsRequestIsAnswered() throws {
        let created = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.tenSeconds)), "-F", "settings={\"video\":{\"averageBitRate\":8000000}}"])
        let id = try #require(created.object["id"] as? String)
        let finished = try waitForState(id, ["succeeded"])
        let listing = try RawClient(port: try server.port)
        listing.send("GET /v1/jobs/\(id) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        shutdown(listing.fd, Int32(SHUT_WR))
        // Interim answers may come first (a `100 Continue` that finds out whether the client closed for good).
        let job = listing.read().replacingOccurrences(of: "HTTP/1.1 100 Continue\r\n\r\n", with: "")
        #expect(job.hasPrefix("HTTP/1.1 200") && job.hasSuffix("}"), "\(job.prefix(300))")
        #expect(listing.hasBeenClosedByPeer)
        // Requests sent before the end of file are all answered, in order, then the connection closes. (The list is
        // answered on a pool, never from a cache on the loop, so the end of file comes while the first is handled.)
        let pipelined = try RawClient(port: try server.port)
        pipelined.send(String(repeating: "GET /v1/jobs?limit=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", count: 3))
        shutdown(pipelined.fd, Int32(SHUT_WR))
        let answers = pipelined.read()
        #expect(answers.components(separatedBy: "HTTP/1.1 200 OK\r\n").count == 4, "\(answers.count) bytes: \(answers.prefix(200))")
        #expect(pipelined.hasBeenClosedByPeer)

        let size = try #require((finished["output"] as? [String: Any])?["size"] as? Int, "\(finished)")
        #expect(size > 6_000_000, "more than the sockets hold while the client does not read (tcp_wmem's 4 MiB, 64 KiB received)")
        let download = try RawClient(port: try server.port)
        var small: Int32 = 65536
        setsockopt(download.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        download.send("GET /v1/jobs/\(id)/output HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        // The response is going out (its first bytes are here, the rest fills the buffers) when the end of file goes.
        var ready = pollfd(fd: download.fd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&ready, 1, 10_000) == 1, "the download started")
        usleep(200_000)
        shutdown(download.fd, Int32(SHUT_WR))
        usleep(300_000)
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(download.fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            received.append(contentsOf: buffer[0..<count])
        }
        let headEnd = try #require(received.range(of: Data("\r\n\r\n".utf8)), "\(received.count) bytes")
        #expect(String(decoding: received[..<headEnd.lowerBound], as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(received.count - headEnd.upperBound == size, "the whole file: \(received.count - headEnd.upperBound) of \(size) bytes")
    }

    @Test func jobsAreCreatedValidatedListedAndRun() throws {
        let uploadID = try #require(try upload(try Media.path(.standard))["id"] as? String)
        let invalid = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(uploadID)", "settings": {"video": {"profile": "ultra"}}}"#])
        #expect(invalid.status == 400)
        // The same refusals through a one-shot multipart body: a wrong type deep in the settings, a bad priority.
        for (part, key) in [(#"settings={"video": {"color": {"transfer": true}}}"#, "settings.video.color.transfer"),
                            ("priority=high", "priority")] {
            let refused = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly)), "-F", part])
            let message = (refused.object["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(refused.status == 400 && message.hasPrefix(key), "\(part): \(refused.status) \(message)")
        }
        #expect(((invalid.object["error"] as? [String: Any])?["message"] as? String)?.hasPrefix("settings.video.profile: expected one of") == true)
        // What the job would ignore or could never do is refused now, not accepted and ignored or failed later.
        for (settings, key) in [(#"{"video": null, "filters": {"video": {"grayscale": true}}}"#, "settings.filters.video"),
                                (#"{"video": "copy", "thumbnails": {"count": 3}}"#, "settings.thumbnails")] {
            let refused = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(uploadID)", "settings": \#(settings)}"#])
            let message = (refused.object["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(refused.status == 400 && message.hasPrefix(key + ":"), "\(settings): \(refused.status) \(message)")
        }
        // Settings that drop every track the input has: refused when the job is made (it was made, then failed).
        let soundOnly = try #require(try upload(try Media.path(.audioOnly))["id"] as? String)
        let nothing = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(soundOnly)", "settings": {"audio": null}}"#])
        #expect(nothing.status == 422 && (nothing.object["error"] as? [String: Any])?["code"] as? String == "invalid_settings"
                && ((nothing.object["error"] as? [String: Any])?["message"] as? String ?? "").hasPrefix("settings.video, settings.audio:"),
                "\(nothing)")
        let silent = try #require(try upload(try Media.path(.videoOnly))["id"] as? String)
        let noPictures = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(silent)", "settings": {"video": null}}"#])
        #expect(noPictures.status == 422, "\(noPictures)")
        let listed = try #require(try server.json("/v1/jobs?limit=200").object["jobs"] as? [[String: Any]])
        #expect(!listed.contains { ($0["input"] as? [String: Any])?["id"] as? String == silent }, "no job was made on it")
        // What the picture or length cannot meet (`InputFit`): refused now, with the key, and no job made.
        for (settings, key) in [(#"{"filters": {"video": {"crop": {"x": 600, "y": 0, "width": 100, "height": 100}}}}"#, "settings.filters.video.crop:"),
                                (#"{"video": {"width": 1920, "level": "3"}}"#, "settings.video.level:")] {
            let refused = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(uploadID)", "settings": \#(settings)}"#])
            let error = refused.object["error"] as? [String: Any]
            #expect(refused.status == 422 && error?["code"] as? String == "invalid_settings"
                    && (error?["message"] as? String ?? "").hasPrefix(key), "\(settings): \(refused.status) \(refused.object)")
        }
        let jobsOnTheVideo = try #require(try server.json("/v1/jobs?limit=200").object["jobs"] as? [[String: Any]])
            .filter { ($0["input"] as? [String: Any])?["id"] as? String == uploadID }
        #expect(jobsOnTheVideo.isEmpty, "\(jobsOnTheVideo)")
        let soundOfAVideo = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(uploadID)", "settings": {"video": null}}"#])
        #expect(soundOfAVideo.status == 201, "the sound of a video is something: \(soundOfAVideo)")
        let unknown = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "nope"}"#])
        #expect(unknown.status == 422 && (unknown.object["error"] as? [String: Any])?["code"] as? String == "upload_not_found")
        let extra = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "x", "sttings": {}}"#])
        #expect(extra.status == 400)
        // A key given twice, named; a multipart settings part that is broken JSON, said so (not "unknown preset").
        let twice = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                 #"{"input": "\#(uploadID)", "settings": {"video": {"width": 1280, "width": 641}}}"#])
        #expect(twice.status == 400 && ((twice.object["error"] as? [String: Any])?["message"] as? String)?.hasPrefix("settings.video.width: given twice") == true
                && (twice.object["error"] as? [String: Any])?["code"] as? String == "invalid_settings", "\(twice.object)")
        // A settings file saved with a byte order mark (Notepad, PowerShell) is JSON still, not a preset's name.
        let marked = try Media.scratch().appendingPathComponent("settings.json")
        try Data([0xEF, 0xBB, 0xBF] + Array(#"{"container": "m4a"}"#.utf8)).write(to: marked)
        // Its priority is read as the JSON body's is: 5.0 is 5 in both (it was refused in a multipart body).
        let bom = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly)), "-F", "settings=<" + marked.path,
                                               "-F", "priority=5.0"])
        #expect(bom.status == 201 && (bom.object["settings"] as? [String: Any])?["container"] as? String == "m4a"
                && bom.object["priority"] as? Int == 5, "\(bom.object)")
        let broken = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly)), "-F", #"settings={"video": {"width": 640}"#])
        #expect(broken.status == 400 && ((broken.object["error"] as? [String: Any])?["message"] as? String) == "settings: not valid JSON.",
                "\(broken.object)")
        let notJSON = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", "{"])
        #expect(notJSON.status == 400 && (notJSON.object["error"] as? [String: Any])?["code"] as? String == "invalid_json")

        let created = try Shell.run("curl", ["-s", "-i", "-H", "Content-Type: application/json", "-d",
                                             #"{"input": "\#(uploadID)", "settings": "480p", "priority": 3}"#, try server.base + "/v1/jobs"])
        #expect(created.stdout.hasPrefix("HTTP/1.1 201"))
        let location = try #require(created.stdout.split(separator: "\r\n").first { $0.hasPrefix("Location: ") })
        let id = String(location.dropFirst("Location: /v1/jobs/".count))
        let done = try waitForState(id, ["succeeded", "failed"])
        #expect(done["state"] as? String == "succeeded", "\(done)")
        #expect(done["priority"] as? Int == 3 && done["attempts"] as? Int == 1)
        // A job's state, a listing and an error are not to be stored by a cache (with no word, a shared cache's
        // default freshness served a job as running after it ended).
        for path in ["/v1/jobs/\(id)", "/v1/jobs", "/v1/jobs/nope"] {
            let head = try Shell.run("curl", ["-s", "-D", "-", "-o", "/dev/null", try server.base + path]).stdout
            #expect(head.contains("Cache-Control: no-store\r\n"), "\(path): \(head)")
        }
        let progress = try #require(done["progress"] as? [String: Any])
        #expect(progress["fraction"] as? Double == 1)
        // Once finished, the rates are the transcode's averages (not the 0 of "unknown").
        let fps = try #require(progress["framesPerSecond"] as? Double)
        let speed = try #require(progress["speed"] as? Double)
        #expect(fps > 0 && speed > 0, "\(progress)")
        let frames = fps * (progress["duration"] as? Double ?? 0) / speed // 4 s of 30 fps video, 480p: 120 frames
        #expect(abs(frames - 120) <= 2, "frames implied by the rates: \(frames)")
        let output = try #require(done["output"] as? [String: Any])
        #expect(output["url"] as? String == "/v1/jobs/\(id)/output" && output["mimeType"] as? String == "video/mp4")
        #expect(done["error"] is NSNull && done["finishedAt"] is String)

        // An audio-only file from an audio-only source, the video left to its default (README: "a source without
        // video"): its settings are stored and read back when it runs.
        let audio = try #require(try upload(try Media.path(.audioOnly))["id"] as? String)
        let m4a = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(audio)", "settings": {"container": "m4a"}}"#])
        let m4aID = try #require(m4a.object["id"] as? String, "\(m4a.object)")
        let sound = try waitForState(m4aID, ["succeeded", "failed"])
        #expect(sound["state"] as? String == "succeeded" && (sound["output"] as? [String: Any])?["mimeType"] as? String == "audio/mp4",
                "\(sound)")
        // And from a video: its sound alone, as `ffmpeg -i clip.mov song.m4a` makes it. The job was made, then failed
        // ("a m4a file holds audio only").
        let video = try #require(try upload(try Media.path(.standard))["id"] as? String)
        let fromVideo = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(video)", "settings": {"container": "m4a"}}"#])
        let fromVideoID = try #require(fromVideo.object["id"] as? String, "\(fromVideo.object)")
        let song = try waitForState(fromVideoID, ["succeeded", "failed"])
        #expect(song["state"] as? String == "succeeded", "\(song)")
        let songFile = try Media.scratch().appendingPathComponent("song.m4a").path
        #expect(try server.curl("/v1/jobs/\(fromVideoID)/output", ["-o", songFile]).status == 200)
        let songProbe = try Probe.read(songFile)
        #expect(songProbe.video == nil && songProbe.audio != nil)

        let page = try server.json("/v1/jobs?state=succeeded&limit=1")
        #expect(page.status == 200 && (page.object["jobs"] as? [[String: Any]])?.count == 1)
        #expect(try server.json("/v1/jobs?state=nope").status == 400)
        // One value each, not the first of several taken for all of them.
        let repeated = try server.json("/v1/jobs?state=succeeded&state=failed")
        #expect(repeated.status == 400 && ((repeated.object["error"] as? [String: Any])?["message"] as? String)?.hasPrefix("state: give it once") == true,
                "\(repeated.object)")
        #expect(try server.json("/v1/jobs?limit=1&st%61te=succeeded&state=failed").status == 400, "named as decoded")
        #expect(try server.json("/v1/jobs?limit=0").status == 400)
        #expect(try server.json("/v1/jobs?cursor=garbage").status == 400)
        // An empty cursor (a client sending the `next` it has, none yet) is the first page.
        let first = try server.json("/v1/jobs?state=succeeded&limit=1&cursor=")
        #expect(first.status == 200 && (first.object["jobs"] as? [[String: Any]])?.count == 1, "\(first.object)")
        // Of the right form, but its time is not a number (or is infinite): the two stores would answer differently.
        // Nor is a sign (`+000…`, read as time 0 by a lax parse: an empty page).
        for bits in ["7ff8000000000000", "7ff0000000000000", "fff0000000000000", "%2B000000000000000"] {
            let answer = try server.json("/v1/jobs?cursor=\(bits)-9b2f6c1e-8a59-4f0e-9d0c-3f1f2a7e5b11")
            #expect(answer.status == 400 && (answer.object["error"] as? [String: Any])?["code"] as? String == "invalid_cursor",
                    "\(bits): \(answer)")
        }
        #expect(try server.json("/v1/jobs/\(UUID().uuidString.lowercased())").status == 404)
        #expect(try server.json("/v1/jobs/..%2F..%2Fetc%2Fpasswd").status == 404)
        // An id with a NUL names nothing (the stores cut it there and found the job before it).
        let nul = try server.json("/v1/jobs/\(m4aID)%00zzz")
        #expect(nul.status == 404, "\(nul)")
        #expect(try server.json("/v1/jobs/\(m4aID)%00zzz", ["-X", "DELETE"]).status == 404)
        #expect(try server.json("/v1/jobs/\(m4aID)").status == 200)
    }

    /// A name outside ASCII goes into the download's `filename*` percent-encoded, the header all ASCII: letters of
    /// other scripts went in raw (Foundation's alphanumerics are every script's), and browsers drop such a
    /// `filename*`, saving "caf_.mp4".
    @Test func aNameOutsideASCIIIsPercentEncodedInTheDownloadsName() throws {
        let created = try server.json("/v1/jobs", ["-F", "file=@\(try Media.path(.audioOnly));filename=café 日本.m4a", "-F", "settings={}"])
        #expect(created.status == 201, "\(created.object)")
        let id = try #require(created.object["id"] as? String)
        _ = try waitForState(id, ["succeeded", "failed"])
        let headers = try Shell.run("curl", ["-s", "-I", try server.base + "/v1/jobs/\(id)/output"]).stdout
        let line = headers.components(separatedBy: "\r\n").first { $0.hasPrefix("Content-Disposition:") } ?? ""
        #expect(line.contains("filename*=UTF-8''caf%C3%A9%20%E6%97%A5%E6%9C%AC."), "\(line)")
        #expect(line.unicodeScalars.allSatisfy { $0.isASCII }, "\(line)")
        // RFC 8187's attr-char is kept as it is (it was percent-encoded: `&`, `+`, `!` are not alphanumerics).
        let other = try server.json("/v1/jobs", ["-F", "file=@\(try Media.path(.audioOnly));filename=a&b+c!.m4a", "-F", "settings={}"])
        let otherID = try #require(other.object["id"] as? String, "\(other.object)")
        _ = try waitForState(otherID, ["succeeded", "failed"])
        let otherHeaders = try Shell.run("curl", ["-s", "-I", try server.base + "/v1/jobs/\(otherID)/output"]).stdout
        #expect(otherHeaders.contains("filename*=UTF-8''a&b+c!."), "\(otherHeaders)")
    }

    @Test func oneShotMultipartJobAndDownloadWithRanges() throws {
        let input = try Media.path(.standard)
        let created = try server.json("/v1/jobs", ["-F", "file=@" + input, "-F", #"settings={"video":{"width":320},"container":"mov"}"#])
        #expect(created.status == 201, "\(created.object)")
        let id = try #require(created.object["id"] as? String)
        #expect(try server.json("/v1/jobs/\(id)/output").status == 409 || (try server.json("/v1/jobs/\(id)").object["state"] as? String) == "succeeded")
        _ = try waitForState(id, ["succeeded", "failed"])
        let folder = try Media.scratch()
        let file = folder.appendingPathComponent("out.mov").path
        let headers = try Shell.run("curl", ["-s", "-D", "-", "-o", file, try server.base + "/v1/jobs/\(id)/output"]).stdout
        #expect(headers.hasPrefix("HTTP/1.1 200"))
        #expect(headers.contains("Content-Type: video/quicktime"))
        #expect(headers.contains("Content-Disposition: attachment; filename=\"standard.mov\""))
        #expect(headers.contains("Accept-Ranges: bytes"))
        let probe = try Probe.read(file)
        #expect(probe.video?.width == 320 && probe.video?.height == 180)
        let size = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0

        let partial = folder.appendingPathComponent("part").path
        let ranged = try Shell.run("curl", ["-s", "-D", "-", "-r", "100-199", "-o", partial, try server.base + "/v1/jobs/\(id)/output"]).stdout
        #expect(ranged.hasPrefix("HTTP/1.1 206") && ranged.contains("Content-Range: bytes 100-199/\(size)"))
        let whole = try Data(contentsOf: URL(fileURLWithPath: file))
        #expect(try Data(contentsOf: URL(fileURLWithPath: partial)) == whole[100..<200])
        let outside = try Shell.run("curl", ["-s", "-D", "-", "-o", "/dev/null", "-r", "\(size + 10)-", try server.base + "/v1/jobs/\(id)/output"]).stdout
        #expect(outside.hasPrefix("HTTP/1.1 416") && outside.contains("Content-Range: bytes */\(size)"))
        let head = try Shell.run("curl", ["-s", "-I", try server.base + "/v1/jobs/\(id)/output"]).stdout
        #expect(head.contains("Content-Length: \(size)"))
        let etag = try #require(head.split(separator: "\r\n").first { $0.hasPrefix("ETag: ") }?.dropFirst(6))
        let cached = try Shell.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "If-None-Match: \(etag)",
                                            try server.base + "/v1/jobs/\(id)/output"]).stdout
        #expect(cached == "304")
        // What proxies and clients also send: a weakened tag (a CDN that compresses), a second header line, the
        // range unit in another case, and numbers past 64 bits (a range to the end, whatever the size).
        let status = { (headers: [String]) throws -> String in
            try Shell.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}"] + headers.flatMap { ["-H", $0] }
                          + [try server.base + "/v1/jobs/\(id)/output"]).stdout
        }
        #expect(try status(["If-None-Match: W/\(etag)"]) == "304 0")
        #expect(try status(["If-None-Match: \"other\"", "If-None-Match: \(etag)"]) == "304 0")
        #expect(try status(["Range: Bytes=0-9"]) == "206 10")
        #expect(try status(["Range: bytes=-99999999999999999999"]) == "206 \(size)")
        #expect(try status(["Range: bytes=10-99999999999999999999"]) == "206 \(size - 10)")
        // Dates, for caches and clients that keep Last-Modified rather than the tag: If-Modified-Since (ignored when
        // If-None-Match is there), and If-Range naming the date the file was sent with.
        let modified = try #require(head.split(separator: "\r\n").first { $0.hasPrefix("Last-Modified: ") }?.dropFirst(15))
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(secondsFromGMT: 0)
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let sent = try #require(formatter.date(from: String(modified)))
        let hourBefore = formatter.string(from: sent.addingTimeInterval(-3600))
        let hourAfter = formatter.string(from: sent.addingTimeInterval(3600))
        #expect(try status(["If-Modified-Since: \(modified)"]) == "304 0")
        #expect(try status(["If-Modified-Since: \(hourAfter)"]) == "304 0")
        #expect(try status(["If-Modified-Since: \(hourBefore)"]) == "200 \(size)")
        #expect(try status(["If-Modified-Since: yesterday"]) == "200 \(size)")
        // The obsolete forms a recipient must read too (RFC 9110 §5.6.7): the file was sent in full for either.
        let obsolete = DateFormatter()
        obsolete.locale = formatter.locale
        obsolete.timeZone = formatter.timeZone
        obsolete.dateFormat = "EEEE, dd-MMM-yy HH:mm:ss 'GMT'"
        #expect(try status(["If-Modified-Since: \(obsolete.string(from: sent))"]) == "304 0")
        obsolete.dateFormat = "EEE MMM d HH:mm:ss yyyy"
        let asctime = obsolete.string(from: sent).replacingOccurrences(of: #" (\d) "#, with: "  $1 ", options: .regularExpression)
        #expect(try status(["If-Modified-Since: \(asctime)"]) == "304 0", "\(asctime)")
        obsolete.dateFormat = "EEEE, dd-MMM-yy HH:mm:ss 'GMT'"
        #expect(try status(["If-Modified-Since: \(obsolete.string(from: sent.addingTimeInterval(-3600)))"]) == "200 \(size)", "read as the date it is")
        // A date that does not read right is no condition (the weekday off by one; a signed hour), though read
        // loosely either would be after the file's.
        let wrongDay = String(modified.prefix(3) == "Mon" ? "Tue" : "Mon") + modified.dropFirst(3)
        #expect(try status(["If-Modified-Since: \(wrongDay)"]) == "200 \(size)")
        #expect(try status(["If-Modified-Since: Thu, 31 Dec 2099 +1:00:00 GMT"]) == "200 \(size)")
        #expect(try status(["If-None-Match: \"other\"", "If-Modified-Since: \(modified)"]) == "200 \(size)")
        #expect(try status(["If-Range: \(modified)", "Range: bytes=0-9"]) == "206 10")
        #expect(try status(["If-Range: \(hourBefore)", "Range: bytes=0-9"]) == "200 \(size)")
        #expect(try status(["If-Range: \(hourAfter)", "Range: bytes=0-9"]) == "200 \(size)")
        // Preconditions of a resumed download (RFC 9110 §13.1.1, §13.1.4): the file named by its tag (strongly) or
        // not changed since a date, else 412 and no bytes; If-Unmodified-Since only without If-Match.
        #expect(try status(["If-Match: \(etag)", "Range: bytes=0-9"]) == "206 10")
        #expect(try status(["If-Match: \"other\", \(etag)"]) == "200 \(size)")
        #expect(try status(["If-Match: *"]) == "200 \(size)")
        #expect(try status(["If-Match: \"other\""]).hasPrefix("412 "))
        #expect(try status(["If-Match: W/\(etag)"]).hasPrefix("412 "), "a weak tag never matches strongly")
        #expect(try status(["If-Unmodified-Since: \(modified)", "Range: bytes=0-9"]) == "206 10")
        #expect(try status(["If-Unmodified-Since: \(hourAfter)"]) == "200 \(size)")
        #expect(try status(["If-Unmodified-Since: \(hourBefore)"]).hasPrefix("412 "))
        #expect(try status(["If-Unmodified-Since: yesterday"]) == "200 \(size)")
        #expect(try status(["If-Match: \(etag)", "If-Unmodified-Since: \(hourBefore)"]) == "200 \(size)")
        let refused = try server.json("/v1/jobs/\(id)/output", ["-H", "If-Match: \"other\""])
        #expect(refused.status == 412 && (refused.object["error"] as? [String: Any])?["code"] as? String == "precondition_failed",
                "\(refused)")
    }

    /// A failure that names a file of the data directory names it from there: where the server keeps its data is
    /// not for API clients, nor for webhook receivers, who get the same job. The full path went into the message.
    @Test func aFailureNamesItsFilesFromTheDataDirectory() throws {
        let server = try TestServer()
        let uploadID = try #require(try server.json("/v1/uploads/", ["-T", try Media.path(.audioOnly)]).object["id"] as? String)
        // The outputs folder made a file: the job's folder cannot be made in it.
        let outputs = server.data.appendingPathComponent("outputs")
        try FileManager.default.removeItem(at: outputs)
        try Data().write(to: outputs)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(uploadID)"}"#])
        let id = try #require(created.object["id"] as? String, "\(created.object)")
        var job: [String: Any] = [:]
        #expect(try eventually(30) { job = try server.json("/v1/jobs/\(id)").object; return job["state"] as? String == "failed" })
        let message = (job["error"] as? [String: Any])?["message"] as? String ?? ""
        #expect(message.contains("outputs/\(id)") && !message.contains(server.data.path), "\(message)")
        #expect(server.log.contains(server.data.path + "/outputs/\(id)"), "the log keeps the whole path")
    }

    /// A job whose JSON is over the 1 MiB a stream may hold unsent (its output: 9,500 thumbnails, as a long ladder's
    /// thousands of segments) still reaches a client that reads: the bound is for clients that stop reading.
    @Test func aLastStateOverTheStreamBacklogBoundStillArrives() throws {
        let server = try TestServer()
        let source = try Media.scratch().appendingPathComponent("long-tiny.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=32x18:r=10:d=950", "-c:v", "libx264", "-preset", "ultrafast",
                          "-pix_fmt", "yuv420p", source])
        let created = try server.json("/v1/jobs", ["-F", "file=@" + source, "-F", #"settings={"thumbnails": {"interval": 0.1, "width": 16}}"#])
        let id = try #require(created.object["id"] as? String, "\(created.object)")
        #expect(try eventually(120) { try server.json("/v1/jobs/\(id)").object["state"] as? String == "succeeded" })
        let stream = try Shell.run("curl", ["-s", "-N", "--max-time", "30", server.base + "/v1/jobs/\(id)/events"])
        #expect(stream.stdout.utf8.count > 1024 * 1024, "\(stream.stdout.utf8.count) bytes")
        #expect(stream.stdout.hasPrefix("id: end\nevent: state") && stream.stdout.contains("thumbnails/09500.jpg"), "\(stream.stdout.prefix(200))")
    }

    @Test func eventsArriveInOrderAndEndWithTheJob() throws {
        let uploadID = try #require(try upload(try Media.path(.long))["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(uploadID)", "settings": {"video": {"preset": "faster", "width": 640}}}"#])
        let id = try #require(created.object["id"] as? String)
        let stream = try Shell.run("curl", ["-s", "-N", "--max-time", "120", try server.base + "/v1/jobs/\(id)/events"])
        let events = stream.stdout.components(separatedBy: "\n\n").filter { !$0.isEmpty }
        let names = events.compactMap { $0.split(separator: "\n").first { $0.hasPrefix("event: ") }?.dropFirst(7) }.map(String.init)
        #expect(names.first == "state")
        #expect(names.last == "state")
        #expect(names.filter { $0 == "progress" }.count >= 3, "\(names)")
        let states = events.filter { $0.contains("event: state\n") }.compactMap { event -> String? in
            let data = event.split(separator: "\n").first { $0.hasPrefix("data: ") }?.dropFirst(6) ?? ""
            return (try? JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any])?["state"] as? String
        }
        #expect(states.last == "succeeded" && states.contains("running"), "\(states)")
        let progress = events.filter { $0.hasPrefix("event: progress") }.compactMap { event -> [String: Any]? in
            let data = event.split(separator: "\n").first { $0.hasPrefix("data: ") }?.dropFirst(6) ?? ""
            return try? JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any]
        }
        let fractions = progress.compactMap { $0["fraction"] as? Double }
        #expect(fractions == fractions.sorted(), "progress only grows")
        #expect(fractions.contains { $0 > 0.1 && $0 < 0.9 }, "progress moves during the run: \(fractions)")
        // Frames per second over media seconds per second is frames per media second: the clip's 30, if the time
        // reported is the time the encoded frames reach (a few frames of encoder delay aside).
        let past2 = progress.filter { (($0["presentationTime"] as? Double) ?? 0) > 2 }
        #expect(!past2.isEmpty, "progress past 2 s of media: \(fractions)")
        for event in past2 {
            let fps = event["framesPerSecond"] as? Double ?? 0, speed = event["speed"] as? Double ?? 0
            #expect(speed > 0 && abs(fps / speed - 30) < 30 * 0.25, "\(event)")
        }
        #expect(events.last?.hasPrefix("id: end\nevent: state") == true
                && events.dropLast().allSatisfy { event in !event.split(separator: "\n").contains { $0.hasPrefix("id:") } },
                "only the end has an id: \(events.last?.prefix(40) ?? "")")
        // A late watcher gets the final state at once and the stream ends.
        let late = try Shell.run("curl", ["-s", "-N", "--max-time", "10", try server.base + "/v1/jobs/\(id)/events"])
        #expect(late.stdout.hasPrefix("id: end\nevent: state") && late.stdout.contains(#""state":"succeeded""#))
        // An EventSource that saw the end comes back 3 s later with its id: 204 stops it (it would get the end again,
        // and come back again, for ever).
        let again = try server.curl("/v1/jobs/\(id)/events", ["-H", "Last-Event-ID: end", "--max-time", "10"])
        #expect(again.status == 204 && again.body.isEmpty, "\(again)")
        // Any other id is not the end: the stream as usual.
        let other = try server.curl("/v1/jobs/\(id)/events", ["-H", "Last-Event-ID: 7", "--max-time", "10"])
        #expect(other.status == 200 && other.body.contains("id: end\nevent: state"), "\(other.status)")
        #expect(try server.curl("/v1/jobs/\(UUID().uuidString.lowercased())/events", ["-H", "Last-Event-ID: end"]).status == 404)
        // HTTP/1.0 knows no chunks: the events as they are, and the stream's end is the connection's. An HTTP/1.1
        // client that said Connection: close has the connection closed after the end too.
        let old = try RawClient(port: try server.port)
        old.send("GET /v1/jobs/\(id)/events HTTP/1.0\r\n\r\n")
        let plain = old.read()
        #expect(!plain.lowercased().contains("transfer-encoding") && plain.contains("\r\n\r\nid: end\nevent: state\ndata: {")
                && plain.contains("Connection: close\r\n"), "\(plain.prefix(400))")
        #expect(plain.hasSuffix("}\n\n") && old.hasBeenClosedByPeer)
        let closing = try RawClient(port: try server.port)
        closing.send("GET /v1/jobs/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        let chunked = closing.read()
        #expect(chunked.contains("Transfer-Encoding: chunked") && chunked.hasSuffix("\r\n0\r\n\r\n") && closing.hasBeenClosedByPeer,
                "\(chunked.suffix(200))")
    }

    @Test func cancelAndDelete() throws {
        let uploadID = try #require(try upload(try Media.path(.long))["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(uploadID)", "settings": {"video": {"preset": "slow"}}}"#])
        let id = try #require(created.object["id"] as? String)
        _ = try waitForState(id, ["running"])
        let canceled = try server.json("/v1/jobs/\(id)/cancel", ["-X", "POST"])
        #expect(canceled.status == 202)
        let final = try waitForState(id, ["canceled"], seconds: 5)
        #expect(final["state"] as? String == "canceled")
        #expect(try server.json("/v1/jobs/\(id)/cancel", ["-X", "POST"]).status == 409)
        #expect(try server.json("/v1/jobs/\(id)/output").status == 409)
        #expect(try server.curl("/v1/jobs/\(id)", ["-X", "DELETE"]).status == 204)
        #expect(try server.json("/v1/jobs/\(id)").status == 404)
        #expect(try server.json("/v1/jobs/\(id)", ["-X", "DELETE"]).status == 404)
        #expect(try !uploadFolderEntries.contains(uploadID), "the job's upload went with it")
    }

    /// A deleted job's output that cannot be removed is said in the log (a single server sweeps no strays until its
    /// next start); the DELETE still succeeds, its row gone. An immutable file stands for the failure: root (CI)
    /// may remove any other.
    @Test(.enabled(if: Self.canPinFiles, "making a file immutable needs CAP_LINUX_IMMUTABLE and a file system that has the flag"))
    func anOutputThatCannotBeRemovedIsLogged() throws {
        let created = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly)), "-F", "settings=audio"])
        let id = try #require(created.object["id"] as? String)
        let done = try waitForState(id, ["succeeded", "failed"])
        try #require(done["state"] as? String == "succeeded", "\(done)")
        let outputs = try server.data.appendingPathComponent("outputs")
        let folder = try #require(try FileManager.default.contentsOfDirectory(atPath: outputs.path).first { $0.hasPrefix(id) })
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: outputs.path + "/" + folder).first)
        let pinned = outputs.path + "/" + folder + "/" + file
        try Shell.check("chattr", ["+i", pinned])
        defer { _ = try? Shell.run("chattr", ["-i", pinned]) }
        #expect(try server.curl("/v1/jobs/\(id)", ["-X", "DELETE"]).status == 204)
        #expect(try server.json("/v1/jobs/\(id)").status == 404)
        let log = try server.log
        let line = log.split(separator: "\n").first { $0.contains("removing a deleted job's output failed") }
        #expect(line?.contains(id) == true, "\(log.suffix(600))")
    }

    /// Whether `chattr +i` works here (root with CAP_LINUX_IMMUTABLE, on a file system with the flag), tried.
    static var canPinFiles: Bool {
        guard let folder = try? Media.scratch() else { return false }
        let file = folder.appendingPathComponent("pinned").path
        guard FileManager.default.createFile(atPath: file, contents: Data()),
              (try? Shell.run("chattr", ["+i", file]))?.status == 0 else { return false }
        _ = try? Shell.run("chattr", ["-i", file])
        return true
    }

    @Test func keepAlivePipeliningAndFramingErrors() throws {
        let client = try RawClient(port: try server.port)
        client.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /v1/presets HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let both = client.read(until: "\"audio\"")
        #expect(both.components(separatedBy: "HTTP/1.1 200 OK").count == 3, "two responses on one connection")

        // Refusals of requests without a body keep the connection (a browser's 404 or 405 costs no new one), and a
        // malformed request after a HEAD still gets its JSON body.
        let refusals = try RawClient(port: try server.port)
        refusals.send("GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nDELETE /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      + "HEAD /v1/jobs/missing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      + "HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nNOT A REQUEST\r\n\r\n")
        let answers = refusals.read() // until the server closes, after the malformed one
        let statuses = answers.matches(of: #/HTTP\/1\.1 [0-9]{3}/#).map { String(answers[$0.range]) }
        #expect(statuses == ["HTTP/1.1 404", "HTTP/1.1 405", "HTTP/1.1 404", "HTTP/1.1 200", "HTTP/1.1 200", "HTTP/1.1 400"], "\(answers)")
        #expect(answers.components(separatedBy: "Connection: close").count == 2, "only the malformed one closes: \(answers)")
        #expect(answers.hasSuffix("}"), "the 400 after a HEAD has its body: \(answers.suffix(200))")

        let smuggle = try RawClient(port: try server.port)
        smuggle.send("POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        let refused = smuggle.read()
        #expect(refused.hasPrefix("HTTP/1.1 400") && refused.contains("Connection: close"))
        #expect(smuggle.isClosedByPeer)

        let huge = try RawClient(port: try server.port)
        huge.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + String(repeating: "X-A: " + String(repeating: "b", count: 1000) + "\r\n", count: 20) + "\r\n")
        #expect(huge.read().hasPrefix("HTTP/1.1 431"))

        let long = try RawClient(port: try server.port)
        long.send("GET /" + String(repeating: "a", count: 65536) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(long.read().hasPrefix("HTTP/1.1 414"))
        #expect(try server.json("/healthz").status == 200)
    }

    /// A request answered on the spot (no token, no pool) whose body ends the read: the answer goes out and asks for
    /// the next request while the body's last bytes are still being parsed.
    @Test func aChunkedRequestAnsweredAtOnceAndWhatFollowsIt() throws {
        // The last CRLF of a chunked body used to be parsed twice, and the buffer's start passed its end: the
        // server trapped, for anyone who could reach /healthz.
        let chunked = try RawClient(port: try server.port)
        chunked.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                     + "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                     + "GET /v1/presets HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let answers = chunked.read(until: "\"audio\"")
        #expect(answers.components(separatedBy: "HTTP/1.1 200 OK").count == 4, "three answers on one connection: \(answers)")
        #expect(try server.json("/healthz").status == 200, "the server still runs")

        // A body refused as it ends (a form without its closing boundary) keeps the connection, and the request
        // that came in the same read as the body's end is answered: it used to be dropped, and the client waited for
        // the idle timeout.
        let form = "--b\r\nContent-Disposition: form-data; name=\"settings\"\r\n\r\n{}"
        let refused = try RawClient(port: try server.port)
        refused.send("POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                     + "Content-Length: \(form.utf8.count)\r\n\r\n")
        usleep(300_000) // the body then arrives on its own, with the next request behind it
        refused.send(form + "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let both = refused.read(until: #"{"status":"ok"}"#, timeout: 5)
        let statuses = both.matches(of: #/HTTP\/1\.1 [0-9]{3}/#).map { String(both[$0.range]) }
        #expect(statuses == ["HTTP/1.1 400", "HTTP/1.1 200"], "\(both)")
    }

    @Test func aThousandIdleEventStreamsWhileAPollStillAnswers() throws {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = limit.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        let uploadID = try #require(try upload(try Media.path(.long))["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(uploadID)", "settings": {"video": {"preset": "veryslow"}}}"#])
        let id = try #require(created.object["id"] as? String)
        var clients: [RawClient] = []
        for _ in 0..<1000 {
            let client = try RawClient(port: try server.port)
            client.send("GET /v1/jobs/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            clients.append(client)
        }
        let opened = clients.map { $0.read(until: "event: state", timeout: 10) }
        #expect(opened.allSatisfy { $0.contains("text/event-stream") && $0.contains("event: state") },
                "\(opened.filter { !$0.contains("event: state") }.count) streams did not start")
        let started = Date()
        let poll = try server.json("/v1/jobs/\(id)")
        #expect(poll.status == 200 && Date().timeIntervalSince(started) < 1)
        let metrics = try server.curl("/metrics").body
        #expect(metrics.contains("transcoderd_sse_clients 1000"))
        #expect(try server.json("/v1/jobs/\(id)/cancel", ["-X", "POST"]).status == 202)
        let ended = clients.map { $0.read(until: "0\r\n\r\n", timeout: 10) }
        #expect(ended.allSatisfy { $0.contains(#""state":"canceled""#) }, "every stream saw the job end")
    }
}
