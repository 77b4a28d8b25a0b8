import Foundation
import Locks
import Testing
import TestSupport

/// Resumable uploads (tus 1.0) against a real server: tuspy from PyPI as the client where a client is wanted, curl
/// and raw sockets for what a well-behaved client never sends.
@Suite struct TusTests {
    static let version = ["-H", "Tus-Resumable: 1.0.0"]
    static let chunk = ["-H", "Content-Type: application/offset+octet-stream"]

    private func python(_ arguments: [String]) throws -> Shell.Output {
        try Shell.run(".venv/bin/python", ["Tests/Tus/tus_client.py"] + arguments)
    }

    private func sha256(_ path: String) throws -> String { String(try Shell.check("sha256sum", [path]).prefix(64)) }

    /// A clip of a few MiB (so it takes many 256 KiB chunks).
    private func clip() throws -> String {
        let path = try Media.scratch().appendingPathComponent("clip.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=640x360:r=30:d=4,noise=alls=40:allf=t", "-f", "lavfi", "-i", "sine=d=4",
                          "-c:v", "libx264", "-preset", "ultrafast", "-crf", "10", "-pix_fmt", "yuv420p", "-c:a", "aac", path])
        return path
    }

    /// Puts a regular file where the uploads folder is, so that storing an upload (a rename into it) fails with
    /// ENOTDIR, for root too; returns what puts the folder back.
    private func breakUploadsFolder(_ server: TestServer) throws -> () throws -> Void {
        let uploads = server.data.appendingPathComponent("uploads")
        let aside = server.data.appendingPathComponent("uploads.aside")
        try FileManager.default.moveItem(at: uploads, to: aside)
        try Data().write(to: uploads)
        return {
            try FileManager.default.removeItem(at: uploads)
            try FileManager.default.moveItem(at: aside, to: uploads)
        }
    }

    /// POST /v1/tus with `headers`; the status and the upload's path.
    private func create(_ server: TestServer, _ headers: [String]) throws -> (status: Int, location: String?) {
        let run = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST"] + headers + [server.base + "/v1/tus"])
        let lines = run.stdout.components(separatedBy: "\r\n")
        let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        let location = lines.first { $0.lowercased().hasPrefix("location:") }.map { String($0.dropFirst(9)).trimmingCharacters(in: .whitespaces) }
        return (status, location)
    }

    /// A HEAD's headers, lowercase names.
    private func head(_ server: TestServer, _ path: String) throws -> (status: Int, headers: [String: String]) {
        let run = try Shell.run("curl", ["-s", "-I", "--max-time", "20"] + Self.version + [server.base + path])
        var headers: [String: String] = [:]
        let lines = run.stdout.components(separatedBy: "\r\n")
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return (Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0, headers)
    }

    private func patch(_ server: TestServer, _ path: String, offset: Int, body: String, _ extra: [String] = []) throws -> (status: Int, body: String) {
        let file = try Media.scratch().appendingPathComponent("chunk.bin")
        try Data(body.utf8).write(to: file)
        return try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: \(offset)"] + Self.version + Self.chunk + extra)
    }

    /// tuspy sends every chunk with Upload-Checksum (sha1); a wrong one is refused in refusalsAnswerAsTheProtocolSays.
    @Test func tuspyUploadsInChunksAndItsSettingsStartAJob() throws {
        let server = try TestServer()
        let source = try clip()
        let size = try #require(try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int)
        #expect(size > 1_000_000, "several chunks: \(size) bytes")
        let metadata = #"{"filename": "clip.mp4", "filetype": "video/mp4", "settings": "{\"video\": {\"width\": 320}}"}"#
        let run = try python(["upload", server.base + "/v1/tus", source, String(256 * 1024), metadata])
        #expect(run.status == 0, "\(run.stderr)")
        let url = run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let id = try #require(url.split(separator: "/").last.map(String.init))
        let upload = try server.json("/v1/uploads/\(id)")
        #expect(upload.status == 200, "the tus upload is an upload with the same id: \(upload.object)")
        #expect(upload.object["sha256"] as? String == (try sha256(source)) && upload.object["size"] as? Int == size)
        #expect(upload.object["filename"] as? String == "clip.mp4")
        let info = try head(server, "/v1/tus/\(id)")
        #expect(info.headers["upload-offset"] == String(size) && info.headers["upload-length"] == String(size))
        let job = try #require(info.headers["transcoder-job"], "the completed upload names its job: \(info.headers)")
        #expect(try eventually(60) { try server.json(job).object["state"] as? String == "succeeded" })
        let output = try server.json(job).object["output"] as? [String: Any]
        #expect((output?["tracks"] as? [[String: Any]])?.contains { $0["width"] as? Int == 320 } == true, "\(output ?? [:])")
    }

    @Test func aClientKilledMidwayIsResumedByAnotherFromTheServersOffset() throws {
        let server = try TestServer()
        let source = try clip()
        let slow = Process()
        slow.executableURL = URL(fileURLWithPath: ".venv/bin/python")
        slow.arguments = ["Tests/Tus/tus_client.py", "slow", server.base + "/v1/tus", source, String(128 * 1024), "0.05"]
        let pipe = Pipe()
        slow.standardOutput = pipe
        try Shell.launch(slow)
        let pid = slow.processIdentifier
        DispatchQueue.global().asyncAfter(deadline: .now() + 60) { kill(pid, SIGKILL) } // a stalled client never hangs the test
        var lines: [String] = []
        var pending = Data()
        while lines.count < 6 {
            let data = pipe.fileHandleForReading.availableData
            guard !data.isEmpty else { break }
            pending.append(data)
            lines = String(decoding: pending, as: UTF8.self).split(separator: "\n").map(String.init)
        }
        kill(slow.processIdentifier, SIGKILL)
        slow.waitUntilExit()
        let url = try #require(lines.first)
        let path = String(url.dropFirst(server.base.count))
        // The killed client's last PATCH may still be finishing on the server: an empty PATCH at the offset HEAD
        // gives goes through once it has (no lock, the offset settled).
        var offset = -1
        #expect(try eventually(10) {
            offset = Int(try head(server, path).headers["upload-offset"] ?? "") ?? -1
            return try patch(server, path, offset: offset, body: "").status == 204
        })
        let size = try #require(try FileManager.default.attributesOfItem(atPath: source)[.size] as? Int)
        #expect(offset >= 5 * 128 * 1024 && offset < size, "killed midway at \(offset) of \(size)")
        let resumed = try python(["resume", url, source, String(256 * 1024)])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(Int(resumed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == offset, "resumed from HEAD's offset")
        let id = String(path.split(separator: "/").last ?? "")
        #expect(try server.json("/v1/uploads/\(id)").object["sha256"] as? String == (try sha256(source)))
    }

    /// SIGKILL keeps the page cache: this is the offset after a crash of the process, not of the machine.
    @Test func aServerKilledDuringAPatchKeepsAPrefixOfTheClientsBytesAndTheUploadCompletes() throws {
        let data = try Media.scratch().appendingPathComponent("data")
        var server = try TestServer([], data: data)
        let source = try clip()
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let created = try create(server, Self.version + ["-H", "Upload-Length: \(bytes.count)"])
        let path = try #require(created.location)
        // A PATCH whose body is half sent when the server dies.
        let client = try RawClient(port: server.port)
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 0\r\nContent-Length: \(bytes.count)\r\n\r\n")
        let sent = bytes.count / 2
        client.send(bytes.prefix(sent))
        // Killed once some of it is on disk (a fixed half second was not always enough on a busy machine).
        let stored = data.appendingPathComponent("tus/\(path.split(separator: "/").last ?? "").bin").path
        #expect(eventually(10) { ((try? FileManager.default.attributesOfItem(atPath: stored)[.size] as? Int) ?? 0) > 0 })
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()
        client.hangUp()
        server = try TestServer([], data: data)
        let offset = Int(try head(server, path).headers["upload-offset"] ?? "") ?? -1
        #expect(offset > 0 && offset <= sent, "HEAD after the restart: \(offset) of the \(sent) bytes sent")
        let kept = try Data(contentsOf: data.appendingPathComponent("tus/\(path.split(separator: "/").last ?? "").bin"))
        #expect(kept.count == offset && kept == bytes.prefix(offset), "the bytes up to the offset are exactly the client's")
        let resumed = try python(["resume", server.base + path, source, String(512 * 1024)])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let id = String(path.split(separator: "/").last ?? "")
        #expect(try server.json("/v1/uploads/\(id)").object["sha256"] as? String == (try sha256(source)))
    }

    /// A chunk with a checksum whose PATCH dies with the server is never checked: after the restart none of it
    /// counts, though its bytes reached the disk, and the client resumes from before it.
    @Test func aServerKilledDuringAChecksummedPatchTakesTheChunkBack() throws {
        let data = try Media.scratch().appendingPathComponent("data")
        var server = try TestServer([], data: data)
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 1000000"]).location)
        let id = String(path.split(separator: "/").last ?? "")
        #expect(try patch(server, path, offset: 0, body: String(repeating: "a", count: 1000)).status == 204)
        let chunk = Data(repeating: 7, count: 600_000)
        let file = try Media.scratch().appendingPathComponent("chunk.bin")
        try chunk.write(to: file)
        let hex = Array(try Shell.check("sha1sum", [file.path]).prefix(40))
        let checksum = Data(stride(from: 0, to: 40, by: 2).map { UInt8(String(hex[$0..<($0 + 2)]), radix: 16)! }).base64EncodedString()
        let client = try RawClient(port: server.port)
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 1000\r\nUpload-Checksum: sha1 \(checksum)\r\nContent-Length: 600000\r\n\r\n")
        client.send(chunk.prefix(400_000))
        let bin = data.appendingPathComponent("tus/\(id).bin").path
        let onDisk = { ((try? FileManager.default.attributesOfItem(atPath: bin))?[.size] as? Int) ?? 0 }
        #expect(eventually(5) { onDisk() > 1000 }, "bytes of the chunk reached the disk")
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()
        client.hangUp()
        server = try TestServer([], data: data)
        #expect(try head(server, path).headers["upload-offset"] == "1000", "none of the unchecked chunk counts")
        #expect(onDisk() == 1000, "and its bytes are gone")
        // The client sends the chunk again, whole, from there.
        let again = try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: 1000", "-H", "Upload-Checksum: sha1 \(checksum)"]
                                    + Self.version + Self.chunk)
        #expect(again.status == 204, "\(again)")
        #expect(try head(server, path).headers["upload-offset"] == "601000")
        #expect(!FileManager.default.fileExists(atPath: data.appendingPathComponent("tus/\(id).chunk").path), "no note left")
    }

    @Test func aClientThatHangsUpMidChunkKeepsWhatArrived() throws {
        let server = try TestServer()
        let created = try create(server, Self.version + ["-H", "Upload-Length: 2000000"])
        let path = try #require(created.location)
        let client = try RawClient(port: server.port)
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 0\r\nContent-Length: 1000000\r\n\r\n")
        let sent = Data((0..<300_000).map { UInt8($0 % 251) })
        client.send(sent)
        Thread.sleep(forTimeInterval: 0.3)
        client.hangUp()
        #expect(try eventually(5) { try head(server, path).headers["upload-offset"] == "300000" })
        // A chunk with a checksum that is cut short cannot be checked: none of it is kept, even what reached the disk.
        let second = try RawClient(port: server.port)
        second.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 300000\r\nUpload-Checksum: sha1 \(Data(repeating: 1, count: 20).base64EncodedString())\r\n"
                    + "Content-Length: 600000\r\n\r\n")
        second.send(Data(repeating: 7, count: 400_000))
        let bin = server.data.appendingPathComponent("tus/\(path.split(separator: "/").last ?? "").bin").path
        let onDisk = { ((try? FileManager.default.attributesOfItem(atPath: bin))?[.size] as? Int) ?? 0 }
        #expect(eventually(5) { onDisk() > 300_000 }, "bytes reached the disk")
        #expect(try head(server, path).headers["upload-offset"] == "300000", "HEAD meanwhile counts only checked bytes")
        second.hangUp()
        let note = server.data.appendingPathComponent("tus/\(path.split(separator: "/").last ?? "").chunk").path
        #expect(eventually(5) { onDisk() == 300_000 && !FileManager.default.fileExists(atPath: note) },
                "and were taken back by the PATCH that brought them: \(onDisk())")
        #expect(try patch(server, path, offset: 300_000, body: "next").status == 204, "the lock went with the cut-short PATCH")
        #expect(try head(server, path).headers["upload-offset"] == "300004")
    }

    /// The running hash survives a PATCH cut short: it went back for the next PATCH only after a whole one, so
    /// after the first dropped connection the final PATCH read the whole file again to hash it (minutes for a large
    /// upload, before its answer). Seen from the server's own reads (`rchar` of /proc/PID/io) during the final
    /// PATCH: the last 8 MiB from the socket, not the 48 MiB file again. Chunks taken back (a checksum that does not
    /// match, past the length) leave it as it was too: they dropped it.
    @Test func aPatchCutShortKeepsTheRunningHash() throws {
        let server = try TestServer()
        // A clip with a 48 MiB `free` box after it (MP4 readers step over it): media, and large.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: try Media.path(.standard)))
        let padding = (48 << 20) - bytes.count
        bytes.append(contentsOf: withUnsafeBytes(of: UInt32(padding).bigEndian, Array.init) + Array("free".utf8))
        bytes.append(Data((0..<(padding - 8)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }))
        let total = bytes.count
        let source = try Media.scratch().appendingPathComponent("padded.mp4")
        try bytes.write(to: source)
        let created = try create(server, Self.version + ["-H", "Upload-Length: \(total)"])
        let path = try #require(created.location)
        let client = try RawClient(port: server.port)
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 0\r\nContent-Length: \(total)\r\n\r\n")
        client.send(bytes.prefix(40 << 20))
        Thread.sleep(forTimeInterval: 0.5)
        client.hangUp()
        var offset = 0
        #expect(try eventually(10) {
            offset = Int(try head(server, path).headers["upload-offset"] ?? "") ?? 0
            return offset == 40 << 20
        }, "the cut-short PATCH's bytes stay: \(offset)")
        // A PATCH at a stale offset is refused and leaves the hash where it was; so do a chunk whose checksum does
        // not match and one past the upload's length, both taken back (the hash went with them).
        #expect(try patch(server, path, offset: 1, body: "x").status == 409)
        let wrong = ["-H", "Upload-Checksum: sha1 " + Data(repeating: 7, count: 20).base64EncodedString()]
        #expect(try patch(server, path, offset: offset, body: "not these bytes", wrong).status == 460)
        let rest = try Media.scratch().appendingPathComponent("rest.bin")
        try (bytes.suffix(from: offset) + Data("one too many".utf8)).write(to: rest)
        let over = try server.curl(path, ["-X", "PATCH", "-T", rest.path, "-H", "Upload-Offset: \(offset)"] + Self.version + Self.chunk)
        #expect(over.status == 413, "\(over)")
        #expect(Int(try head(server, path).headers["upload-offset"] ?? "") == offset)
        try bytes.suffix(from: offset).write(to: rest)
        func reads() throws -> Int {
            let io = try String(contentsOfFile: "/proc/\(server.process.processIdentifier)/io", encoding: .utf8)
            return Int(io.split(separator: "\n").first { $0.hasPrefix("rchar:") }?.split(separator: " ").last ?? "") ?? -1
        }
        let before = try reads()
        let final = try server.curl(path, ["-X", "PATCH", "-T", rest.path, "-H", "Upload-Offset: \(offset)"] + Self.version + Self.chunk)
        let read = try reads() - before
        #expect(final.status == 204, "\(final)")
        #expect(read > 0 && read < 24 << 20, "the server read \(read) bytes to finish: the file was hashed again")
        // The hash carried over is the file's.
        let upload = try server.json("/v1/uploads/\(path.split(separator: "/").last ?? "")")
        let expected = try sha256(source.path)
        #expect(upload.status == 200 && upload.object["sha256"] as? String == expected, "\(upload.object)")
    }

    @Test func refusalsAnswerAsTheProtocolSays() throws {
        let server = try TestServer(["--max-upload-bytes", "5000000"])
        let discovery = try Shell.run("curl", ["-s", "-D", "-", "-o", "/dev/null", "-X", "OPTIONS", server.base + "/v1/tus"]).stdout
        for header in ["Tus-Version: 1.0.0", "Tus-Max-Size: 5000000", "Tus-Checksum-Algorithm: sha1,sha256,md5",
                       "Tus-Extension: creation,creation-defer-length,creation-with-upload,termination,checksum,expiration"] {
            #expect(discovery.contains(header), "\(header) in \(discovery)")
        }
        #expect(discovery.contains("\r\nTus-Resumable: 1.0.0\r\n"), "as the protocol's example of discovery: \(discovery)")
        // No Tus-Resumable at all: a required header missing (400), the answer naming the versions spoken.
        let unversioned = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-H", "Upload-Length: 5", server.base + "/v1/tus"]).stdout
        #expect(unversioned.hasPrefix("HTTP/1.1 400 ") && unversioned.contains("\r\nTus-Version: 1.0.0\r\n")
                && unversioned.contains("missing_tus_resumable"), "\(unversioned)")
        // The endpoint written as tus clients' documentation writes one, with a slash at the end, creates (it was 405).
        let slashed = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST", "-H", "Upload-Length: 5"]
                                    + Self.version + [server.base + "/v1/tus/"]).stdout
        #expect(slashed.hasPrefix("HTTP/1.1 201 ") && slashed.contains("\r\nLocation: /v1/tus/"), "\(slashed)")
        // Concatenation is not offered: its parts are refused at once, not completed one by one as media of their own.
        let partial = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-H", "Upload-Length: 5", "-H", "Upload-Concat: partial"]
                                    + Self.version + [server.base + "/v1/tus"]).stdout
        #expect(partial.hasPrefix("HTTP/1.1 400 ") && partial.contains("unsupported_extension"), "\(partial)")
        // Creation: one of the two lengths, within the limit, metadata that parses, settings that read.
        #expect(try create(server, Self.version).status == 400)
        #expect(try create(server, Self.version + ["-H", "Upload-Length: 5", "-H", "Upload-Defer-Length: 1"]).status == 400)
        #expect(try create(server, Self.version + ["-H", "Upload-Length: -5"]).status == 400)
        for length in ["+5", "-0"] {
            let odd = try Shell.run("curl", ["-s", "-X", "POST", "-H", "Upload-Length: \(length)"] + Self.version + [server.base + "/v1/tus"]).stdout
            #expect(odd.contains("invalid_length"), "\(length): \(odd)")
        }
        #expect(try create(server, Self.version + ["-H", "Upload-Length: 5", "-H", "Upload-Length: 6"]).status == 400)
        #expect(try create(server, Self.version + ["-H", "Upload-Length: 5000001"]).status == 413)
        #expect(try create(server, Self.version + ["-H", "Upload-Length: 5", "-H", "Upload-Metadata: filename not*base64"]).status == 400)
        let badSettings = Data(#"{"video": {"width": "wide"}}"#.utf8).base64EncodedString()
        #expect(try create(server, Self.version + ["-H", "Upload-Length: 5", "-H", "Upload-Metadata: settings \(badSettings)"]).status == 400)
        #expect(try create(server, ["-H", "Tus-Resumable: 0.2.2", "-H", "Upload-Length: 5"]).status == 412)
        let versionAnswer = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-H", "Tus-Resumable: 0.2.2", "-H", "Upload-Length: 5",
                                                   server.base + "/v1/tus"]).stdout
        #expect(versionAnswer.contains("Tus-Version: 1.0.0") && versionAnswer.contains("\"code\":\"unsupported_version\""))

        // creation-with-upload: the POST's body is the first chunk.
        let withBody = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST", "--data-binary", "xyz", "-H", "Upload-Length: 5"]
                                      + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        #expect(withBody.hasPrefix("HTTP/1.1 201") && withBody.contains("Upload-Offset: 3"), "\(withBody)")
        let badFirst = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "--data-binary", "xyz", "-H", "Upload-Length: 5",
                                              "-H", "Upload-Checksum: md5 \(Data(repeating: 0, count: 16).base64EncodedString())"]
                                      + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        #expect(badFirst.hasPrefix("HTTP/1.1 460") && badFirst.contains("checksum_mismatch"), "\(badFirst)")
        // A first chunk longer than the length: refused, and the upload it created named, to send the bytes again.
        let longFirst = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "--data-binary", "abcdefg", "-H", "Upload-Length: 5"]
                                      + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        let created = longFirst.components(separatedBy: "\r\n").first { $0.hasPrefix("Location: ") }.map { String($0.dropFirst(10)) }
        #expect(longFirst.hasPrefix("HTTP/1.1 413 ") && created != nil, "\(longFirst)")
        if let created {
            let left = try head(server, created)
            #expect(left.status == 200 && left.headers["upload-offset"] == "0", "\(left)")
        }
        // The same when the body goes past the length while it is still arriving (refused mid-body, beyond the first
        // 256 KiB buffer): the answer named no upload, and the one created sat there until it expired.
        let big = try Media.scratch().appendingPathComponent("big.bin")
        try Data(repeating: 7, count: 4 << 20).write(to: big)
        let longBody = try Shell.run("curl", ["-s", "-D", "-", "-o", "/dev/null", "-X", "POST", "-T", big.path, "-H", "Upload-Length: 1000"]
                                     + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        let named = longBody.components(separatedBy: "\r\n").first { $0.hasPrefix("Location: ") }.map { String($0.dropFirst(10)) }
        #expect(longBody.contains("HTTP/1.1 413 ") && named != nil, "\(longBody)") // after a 100 Continue
        if let named {
            let left = try head(server, named)
            #expect(left.status == 200 && left.headers["upload-length"] == "1000", "\(left)")
        }
        // A deferred length past the most an upload may be is 413, as at creation (it was 400).
        let deferred = try #require(try create(server, Self.version + ["-H", "Upload-Defer-Length: 1"]).location)
        let overLength = try patch(server, deferred, offset: 0, body: "abc", ["-H", "Upload-Length: 5000001"])
        #expect(overLength.status == 413 && overLength.body.contains("upload_too_large"), "\(overLength)")

        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 10"]).location)
        #expect(try patch(server, path, offset: 3, body: "abc").status == 409)
        #expect(try server.curl(path, ["-X", "PATCH", "--data", "abc", "-H", "Upload-Offset: 0"] + Self.version).status == 415)
        #expect(try patch(server, path, offset: 0, body: "abc", ["-H", "Upload-Checksum: crc32 AAAAAA=="]).status == 400)
        let wrong = Data(repeating: 0, count: 20).base64EncodedString()
        let mismatch = try patch(server, path, offset: 0, body: "abc", ["-H", "Upload-Checksum: sha1 \(wrong)"])
        #expect(mismatch.status == 460 && mismatch.body.contains("checksum_mismatch"), "\(mismatch)")
        #expect(try head(server, path).headers["upload-offset"] == "0", "a mismatched chunk leaves the offset")
        let sha = Data(try Shell.check("sh", ["-c", "printf abc | sha256sum | cut -c1-64"]).trimmingCharacters(in: .whitespacesAndNewlines)
            .hexBytes).base64EncodedString()
        #expect(try patch(server, path, offset: 0, body: "abc", ["-H", "Upload-Checksum: sha256 \(sha)"]).status == 204)
        // An offset is digits alone, given once: "+3" was read as 3, and of two the first was taken where a proxy
        // in front may have taken the other.
        for offsets in [["+3"], ["3", "0"]] {
            let odd = try server.curl(path, ["-X", "PATCH", "--data-binary", "d"] + offsets.flatMap { ["-H", "Upload-Offset: \($0)"] }
                                      + Self.version + Self.chunk)
            #expect(odd.status == 400 && odd.body.contains("invalid_offset"), "\(offsets): \(odd)")
        }
        #expect(try patch(server, path, offset: 3, body: "0123456789").status == 413, "past the declared length")
        // A body longer than any upload may be is refused before it is read, with the protocol's header as always.
        let tooLong = try RawClient(port: server.port)
        tooLong.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\n"
                     + "Content-Type: application/offset+octet-stream\r\nUpload-Offset: 3\r\nContent-Length: 5000001\r\n\r\n")
        let refused = tooLong.read()
        #expect(refused.hasPrefix("HTTP/1.1 413 ") && refused.contains("\r\nTus-Resumable: 1.0.0\r\n") && refused.contains("body_too_large"),
                "\(refused)")
        let info = try head(server, path)
        #expect(info.status == 200 && info.headers["upload-offset"] == "3" && info.headers["upload-length"] == "10")
        #expect(info.headers["cache-control"] == "no-store" && info.headers["tus-resumable"] == "1.0.0")
        #expect(info.headers["upload-expires"]?.hasSuffix(" GMT") == true)
        // X-HTTP-Method-Override: a PATCH sent as POST.
        let overridden = try server.curl(path, ["-X", "POST", "-H", "X-HTTP-Method-Override: PATCH", "-H", "Upload-Offset: 3",
                                                "--data-binary", "defg"] + Self.version + Self.chunk)
        #expect(overridden.status == 204)
        #expect(try head(server, path).headers["upload-offset"] == "7")
        // Only PATCH and DELETE: a POST made a HEAD was answered with a Content-Length and no body, and a client
        // reading on took the next response for that body. Ignored, the POST answers with its body.
        let client = try RawClient(port: server.port)
        client.send("POST /v1/tus HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nX-HTTP-Method-Override: HEAD\r\n\r\n"
                    + "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let answers = client.read(until: "\"ok\"")
        let first = try #require(answers.components(separatedBy: "HTTP/1.1 ").dropFirst().first)
        let length = try #require(first.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length: ") }?.dropFirst(16))
        let body = try #require(first.components(separatedBy: "\r\n\r\n").dropFirst().first)
        #expect(first.hasPrefix("400 ") && body.utf8.count == Int(length) && body.contains("\"error\""), "\(answers)")
        #expect(try server.curl(path, ["-X", "DELETE"] + Self.version).status == 204)
        #expect(try head(server, path).status == 404)
        #expect(try patch(server, path, offset: 7, body: "x").status == 404)
        // Errors are JSON like every other.
        let missing = try server.json("/v1/tus/00000000-0000-4000-8000-000000000000", ["-X", "DELETE"] + Self.version)
        #expect(missing.status == 404 && (missing.object["error"] as? [String: Any])?["code"] as? String == "upload_not_found")
    }

    /// A creation whose body is the whole upload, completed there, and whose job is then refused (pictures of a
    /// song), or whose completion fails for now: the answer still says where the upload is. Without it the client
    /// could not ask again nor read what became of the bytes, and a client retrying would upload them all again.
    @Test func aCreationCompletedThenRefusedStillSaysWhereTheUploadIs() throws {
        let server = try TestServer()
        let clip = try Media.scratch().appendingPathComponent("tiny.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-c:v", "libx264", "-preset", "ultrafast", clip])
        let size = try #require(try FileManager.default.attributesOfItem(atPath: clip)[.size] as? Int)
        let song = try Media.path(.audioOnly)
        let songSize = try #require(try FileManager.default.attributesOfItem(atPath: song)[.size] as? Int)
        let settings = Data(#"{"thumbnails": {"count": 2}}"#.utf8)
        let run = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-T", song, "-H", "Expect:", "-H", "Upload-Length: \(songSize)",
                                         "-H", "Upload-Metadata: settings \(settings.base64EncodedString())"]
                                  + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        #expect(run.hasPrefix("HTTP/1.1 422 "), "\(run)")
        let location = run.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("location: ") }.map { String($0.dropFirst(10)) }
        let path = try #require(location, "no Location in \(run)")
        #expect(run.contains("Upload-Offset: \(songSize)\r\n"), "\(run)")
        let info = try head(server, path)
        #expect(info.status == 200 && info.headers["upload-offset"] == String(songSize) && info.headers["transcoder-job"] == nil, "\(info)")
        let id = try #require(path.split(separator: "/").last.map(String.init))
        #expect(try server.json("/v1/uploads/\(id)").status == 200, "the bytes are an upload, which the client can now name")
        // So is every job the input's tracks cannot give, as through the rest of the API: it was made, then failed.
        for (settings, key) in [(#"{"thumbnails": {"count": 2}}"#, "settings.thumbnails:"), (#"{"audio": null}"#, "settings.video, settings.audio:")] {
            let refused = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-T", song, "-H", "Expect:", "-H", "Upload-Length: \(songSize)",
                                                 "-H", "Upload-Metadata: settings \(Data(settings.utf8).base64EncodedString())"]
                                          + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
            #expect(refused.hasPrefix("HTTP/1.1 422 ") && refused.contains(key) && !refused.lowercased().contains("transcoder-job:"), "\(refused)")
        }
        #expect((try server.json("/v1/jobs").object["jobs"] as? [Any])?.isEmpty == true, "no job")
        // And one whose completion fails for now (storing it cannot be done): 500, with where it is to ask again.
        let restore = try breakUploadsFolder(server)
        let failing = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-T", clip, "-H", "Expect:", "-H", "Upload-Length: \(size)"]
                                      + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        try restore()
        #expect(failing.hasPrefix("HTTP/1.1 500 ") && failing.contains("storage_error"), "\(failing)")
        let again = try #require(failing.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("location: ") }
            .map { String($0.dropFirst(10)) }, "no Location in \(failing)")
        #expect(failing.contains("Upload-Offset: \(size)\r\n"), "\(failing)")
        let completed = try head(server, again) // completes it, now that it can be stored
        #expect(completed.status == 200 && completed.headers["upload-offset"] == String(size), "\(completed)")
        let stored = try #require(again.split(separator: "/").last.map(String.init))
        #expect(try server.json("/v1/uploads/\(stored)").status == 200)
    }

    /// A chunk that leaves the upload short of its length needs no probe: it is answered while every probe thread is
    /// busy. Every tus request waited for one, so one completion (hashing, probing) or one slow upload's probe held
    /// every other client's PATCH, and a browser's gave up after two minutes.
    @Test func aChunkShortOfTheEndIsAnsweredWhileTheProbesAreBusy() throws {
        let server = try TestServer(["--probe-threads", "1"])
        defer { _ = server.stop() }
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 10"]).location)
        // The one probe thread held: every child that could probe is stopped, and an upload's probe waits on one.
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
        // The held upload's body all received (its file whole), so its probe is next: it waits on a stopped child.
        #expect(eventually(20) { server.hasWholeUploadBody(size: size) }, "the held upload's body arrived")
        usleep(500_000)
        let short = try patch(server, path, offset: 0, body: "abc", ["--max-time", "10"])
        #expect(short.status == 204, "\(short)")
        // A deferred length given with a chunk short of it, then a chunk without a length (known only once its file
        // is opened): neither queues behind the probes.
        let deferred = try #require(try create(server, Self.version + ["-H", "Upload-Defer-Length: 1"]).location)
        let declaring = try patch(server, deferred, offset: 0, body: "abc", ["-H", "Upload-Length: 10", "--max-time", "10"])
        let following = try patch(server, deferred, offset: 3, body: "de", ["--max-time", "10"])
        #expect(declaring.status == 204 && following.status == 204, "\(declaring), \(following)")
        #expect(held.isRunning, "the probe thread was held throughout")
        for child in stopped { kill(child, SIGCONT) }
        held.waitUntilExit()
        #expect(try head(server, path).headers["upload-offset"] == "3")
    }

    /// A refusal while the body is read carries CORS and the protocol's header, as one before it does: a page on
    /// another origin can read why (else it sees a network error, which tus clients retry for ever).
    @Test func aRefusalWhileTheBodyIsReadCarriesCORSAndTheProtocolsHeader() throws {
        let server = try TestServer(["--cors-origin", "http://player.test"])
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 10"]).location)
        // A chunk size that is no number: refused by the parser, mid-body, after the route was found.
        let client = try RawClient(port: server.port)
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://player.test\r\nTus-Resumable: 1.0.0\r\n"
                    + "Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + "3\r\nabc\r\nzz\r\n")
        let answer = client.read()
        #expect(answer.hasPrefix("HTTP/1.1 400 ") && answer.contains("malformed_request")
                && answer.contains("\r\nAccess-Control-Allow-Origin: http://player.test\r\n")
                && answer.contains("\r\nTus-Resumable: 1.0.0\r\n"), "\(answer)")
        // The 423 and 503 answers say when to ask again, which a page's script reads only if it is exposed.
        let exposed = answer.components(separatedBy: "\r\n").first { $0.hasPrefix("Access-Control-Expose-Headers: ") } ?? ""
        #expect(exposed.contains("Retry-After") && exposed.contains("Upload-Offset"), "\(answer)")
    }

    /// A server that died completing an upload (its bytes renamed aside, nothing recorded) leaves it resumable: the
    /// next request puts the bytes back, and a PATCH completes it.
    @Test func aCompletionCutShortByACrashIsDoneAgain() throws {
        let server = try TestServer()
        let source = try Media.path(.audioOnly)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(bytes.count)"]).location)
        let id = String(path.split(separator: "/").last ?? "")
        let head = bytes.prefix(bytes.count - 100)
        let file = try Media.scratch().appendingPathComponent("head.bin")
        try head.write(to: file)
        #expect(try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: 0"] + Self.version + Self.chunk).status == 204)
        // What a crash between the rename and the end leaves.
        let folder = server.data.appendingPathComponent("tus")
        try FileManager.default.moveItem(at: folder.appendingPathComponent("\(id).bin"), to: folder.appendingPathComponent("\(id).completing"))
        #expect(try self.head(server, path).headers["upload-offset"] == String(head.count))
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("\(id).bin").path), "the bytes are back")
        try bytes.suffix(100).write(to: file)
        #expect(try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: \(head.count)"] + Self.version + Self.chunk).status == 204)
        let upload = try server.json("/v1/uploads/\(id)")
        let expected = try sha256(source)
        #expect(upload.status == 200 && upload.object["sha256"] as? String == expected, "\(upload.object)")
    }

    /// Settings naming a watermark upload that does not exist (or is no image) are refused at creation, and no
    /// upload is left: the store was asked only at the last PATCH, after the client had sent the whole file.
    @Test func aWatermarkThatIsNoneIsRefusedAtCreation() throws {
        let server = try TestServer()
        let song = try #require(try server.json("/v1/uploads/", ["-T", try Media.path(.audioOnly)]).object["id"] as? String)
        for watermark in ["0b9e6f1c-4f0e-4a39-9c57-2d7f3c1e8a10", song] {
            let settings = Data(#"{"filters": {"video": {"watermark": {"upload": "\#(watermark)"}}}}"#.utf8).base64EncodedString()
            let created = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST"] + Self.version
                                        + ["-H", "Upload-Length: 1000", "-H", "Upload-Metadata: filename Y2xpcC5tcDQ=,settings \(settings)",
                                           server.base + "/v1/tus"]).stdout
            #expect(created.hasPrefix("HTTP/1.1 422") && created.contains("invalid_settings") && created.contains("watermark")
                    && !created.lowercased().contains("location:"), "\(created)")
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: server.data.appendingPathComponent("tus").path)
        #expect(left.isEmpty, "\(left)")
    }

    /// A completion whose probe runs out of time (a busy machine as much as a hostile file) keeps the bytes for two
    /// more tries: 503 with Retry-After, the bytes whole where they were; the third refuses them, as bytes that are not media. Before, the
    /// first deleted them, and the client had to send the whole file again.
    @Test func aProbeThatRunsOutOfTimeKeepsTheBytesForMoreTries() throws {
        let data = try Media.scratch().appendingPathComponent("data")
        // A millisecond: no probe of a real video ends within it (its pictures are decoded to learn their format).
        var server = try TestServer(["--probe-timeout", "0.001"], data: data)
        let source = try Media.path(.standard)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let file = try Media.scratch().appendingPathComponent("all.bin")
        try bytes.write(to: file)
        var ids: [String] = []
        for _ in 0..<2 {
            let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(bytes.count)"]).location)
            let final = try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: 0", "-D", "-"] + Self.version + Self.chunk)
            #expect(final.status == 503 && final.body.contains("Retry-After: 5\r\n") && final.body.contains("probe_timeout")
                    && final.body.contains("try 1 of 3"), "\(final)")
            ids.append(String(path.split(separator: "/").last ?? ""))
        }
        // The first is asked again twice (a PATCH of nothing at its length): the second try keeps it, the third refuses it.
        let again = try patch(server, "/v1/tus/\(ids[0])", offset: bytes.count, body: "")
        #expect(again.status == 503 && again.body.contains("try 2 of 3"), "\(again)")
        let kept = try Data(contentsOf: data.appendingPathComponent("tus/\(ids[0]).bin"))
        #expect(kept == bytes, "the bytes are where they were, whole")
        // Refused as bytes that are not media are: the PATCH is done (204), the upload says why.
        let last = try patch(server, "/v1/tus/\(ids[0])", offset: bytes.count, body: "")
        #expect(last.status == 204, "\(last)")
        let refused = try server.json("/v1/uploads/\(ids[0])")
        let error = refused.object["error"] as? [String: Any]
        #expect(refused.status == 422 && error?["code"] as? String == "upload_refused"
                && (error?["message"] as? String ?? "").contains("took more than 0.001 s"), "\(refused.object)")
        #expect(!FileManager.default.fileExists(atPath: data.appendingPathComponent("tus/\(ids[0]).bin").path))
        // The second, on a server with time to read it: stored whole.
        _ = server.stop()
        server = try TestServer([], data: data)
        #expect(try eventually(20) { try server.json("/v1/uploads/\(ids[1])").status == 200 }, "completed once the probe had time")
        #expect(try server.json("/v1/uploads/\(ids[1])").object["sha256"] as? String == (try sha256(source)))
    }

    /// A completion that fails for now (the uploads folder is a file for a moment: `breakUploadsFolder`) is
    /// done again by the server on its own once it can be, though the client never asks again. Before, it waited for
    /// a restart or the client's next request, and the whole upload was deleted as expired a day after its last byte.
    /// Meanwhile a HEAD while the bytes are held answers 423, not the whole length.
    @Test func aCompletionThatFailedForNowIsDoneWithoutTheClient() throws {
        // An expiry of 18 s: uploads are swept, and failed completions tried again, every 4.5 s.
        let server = try TestServer(["--tus-expire-hours", "0.005"])
        let source = try Media.path(.audioOnly)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(bytes.count)"]).location)
        let id = String(path.split(separator: "/").last ?? "")
        let file = try Media.scratch().appendingPathComponent("all.bin")
        try bytes.write(to: file)
        let restore = try breakUploadsFolder(server)
        let final = try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: 0"] + Self.version + Self.chunk)
        // Held from here (as by a last PATCH not yet let go): the server's recovery leaves it alone meanwhile.
        let bin = open(server.data.appendingPathComponent("tus/\(id).bin").path, O_RDWR)
        let held = bin >= 0 && flock(bin, LOCK_EX | LOCK_NB) == 0
        // A byte in the middle (in the audio's samples) changed behind the server's back: a completion that read the
        // file again would store the hash of what is on disk now; one that kept the running hash of the bytes the
        // client sent (it had them all) stores the source's, without reading the file again.
        let middle = lseek(bin, off_t(bytes.count / 2), SEEK_SET) >= 0 && write(bin, [UInt8(bytes[bytes.count / 2] ^ 0xFF)], 1) == 1
        try restore()
        #expect(middle)
        #expect(final.status == 500 && final.body.contains("storage_error"), "\(final)")
        #expect(held)
        #expect(try server.json("/v1/uploads/\(id)").status == 404, "not stored yet")
        // While its bytes are held, a HEAD does not say the upload is whole: a client would take it as done, and the
        // upload's id would name nothing.
        let whileHeld = try head(server, path)
        close(bin)
        #expect(whileHeld.status == 423 && whileHeld.headers["retry-after"] != nil, "\(whileHeld)")
        #expect(try eventually(25) { try server.json("/v1/uploads/\(id)").status == 200 }, "completed without the client asking")
        let upload = try server.json("/v1/uploads/\(id)")
        #expect(upload.object["sha256"] as? String == (try sha256(source)), "\(upload.object)")
    }

    /// While a completion runs (its lock held on the description, the bytes renamed aside), a HEAD leaves the bytes
    /// where they are and counts them, and a DELETE is refused as during a PATCH: deleting the description would not
    /// stop the completion, which records the upload (and starts its job) afterwards. This process holds the lock, as
    /// a completing server would; once it lets go, the bytes are put back.
    @Test func aCompletionUnderWayKeepsItsBytesAndRefusesADelete() throws {
        let server = try TestServer()
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 1000"]).location)
        let id = String(path.split(separator: "/").last ?? "")
        #expect(try patch(server, path, offset: 0, body: String(repeating: "a", count: 900)).status == 204)
        let folder = server.data.appendingPathComponent("tus")
        let lock = open(folder.appendingPathComponent("\(id).json").path, O_RDONLY | O_CLOEXEC)
        try #require(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0)
        var held = true
        defer { if held { close(lock) } }
        try FileManager.default.moveItem(at: folder.appendingPathComponent("\(id).bin"), to: folder.appendingPathComponent("\(id).completing"))
        let during = try head(server, path)
        #expect(during.status == 200 && during.headers["upload-offset"] == "900", "\(during)")
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("\(id).completing").path), "a live completion's bytes stay aside")
        let deleted = try server.json(path, ["-X", "DELETE"] + Self.version)
        #expect(deleted.status == 423 && (deleted.object["error"] as? [String: Any])?["code"] as? String == "upload_locked", "\(deleted)")
        #expect(Set(Media.files(in: folder)) == ["\(id).json", "\(id).completing"], "\(Media.files(in: folder))")
        // The bytes moved on into the upload, not yet recorded: all of them arrived. HEAD says to ask again (423, which
        // clients retry) and a PATCH at the length that the offset is wrong (409: clients then ask HEAD), never 404
        // (a client would start over).
        let aside = server.data.appendingPathComponent("uploads/\(id)") // where the completion moves them
        try FileManager.default.moveItem(at: folder.appendingPathComponent("\(id).completing"), to: aside)
        let asking = try head(server, path)
        #expect(asking.status == 423 && asking.headers["retry-after"] == "2", "being completed: \(asking)")
        let empty = try Media.scratch().appendingPathComponent("empty.bin")
        try Data().write(to: empty)
        let again = try server.curl(path, ["-X", "PATCH", "--max-time", "20", "-T", empty.path, "-H", "Upload-Offset: 1000"] + Self.version + Self.chunk)
        #expect(again.status == 409, "\(again)")
        try FileManager.default.moveItem(at: aside, to: folder.appendingPathComponent("\(id).completing"))
        close(lock)
        held = false
        #expect(try head(server, path).headers["upload-offset"] == "900")
        #expect(Set(Media.files(in: folder)) == ["\(id).json", "\(id).bin"], "a dead completion's bytes are put back")
        #expect(try server.curl(path, ["-X", "DELETE"] + Self.version).status == 204)
        #expect(Media.files(in: folder).isEmpty)
    }

    /// A DELETE between the final PATCH's last byte and its completion (it comes in once no PATCH holds the upload,
    /// before the completion takes the description's lock) leaves the PATCH answering 404: it answered 204 at the
    /// full offset, naming no job, and the client took its upload for done. The window is held open here: the test
    /// holds the description's lock, sees the completion wait for it (/proc/locks), and deletes as a DELETE does.
    @Test func aFinalPatchWhoseUploadIsDeletedBeforeItCompletesAnswers404() throws {
        let server = try TestServer()
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 1000"]).location)
        let id = String(path.split(separator: "/").last ?? "")
        #expect(try patch(server, path, offset: 0, body: String(repeating: "a", count: 900)).status == 204)
        let folder = server.data.appendingPathComponent("tus")
        let info = folder.appendingPathComponent("\(id).json").path
        let lock = open(info, O_RDONLY | O_CLOEXEC)
        try #require(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0)
        var held = true
        defer { if held { close(lock) } }
        var status = stat()
        try #require(fstat(lock, &status) == 0)
        let chunk = try Media.scratch().appendingPathComponent("last.bin")
        try Data(repeating: 0x61, count: 100).write(to: chunk)
        let final = Process()
        final.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        final.arguments = ["-s", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PATCH", "-T", chunk.path, "-H", "Upload-Offset: 900"]
            + Self.version + Self.chunk + [server.base + path]
        let answer = Pipe()
        final.standardOutput = answer
        try final.run()
        defer { if final.isRunning { final.terminate() } }
        // Its bytes are in and its completion waits for the lock: a waiter (`->`) on the description's inode.
        let waiting = try eventually(20) {
            let locks = try String(contentsOfFile: "/proc/locks", encoding: .utf8)
            return locks.split(separator: "\n").contains { $0.contains("-> FLOCK") && $0.contains(":\(status.st_ino) ") }
        }
        try #require(waiting, "the final PATCH's completion waits for the description's lock")
        #expect(unlink(info) == 0 && unlink(folder.appendingPathComponent("\(id).bin").path) == 0)
        close(lock)
        held = false
        final.waitUntilExit()
        let code = String(decoding: answer.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(code == "404", "the final PATCH answered \(code)")
    }

    /// Creates an upload of `source` with `settings` (if any) in its metadata and sends all but its last `withheld`
    /// bytes (all of them for 0: it completes).
    private func started(_ server: TestServer, _ source: String, settings: String?, withheld: Int = 0) throws -> (path: String, id: String, bytes: Data) {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let metadata = settings.map { "settings " + Data($0.utf8).base64EncodedString() } ?? "filename " + Data("clip.mp4".utf8).base64EncodedString()
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(bytes.count)", "-H", "Upload-Metadata: \(metadata)"]).location)
        let file = try Media.scratch().appendingPathComponent("sent.bin")
        try bytes.prefix(bytes.count - withheld).write(to: file)
        let sent = try server.curl(path, ["-X", "PATCH", "-T", file.path, "-H", "Upload-Offset: 0"] + Self.version + Self.chunk)
        try #require(sent.status == 204, "\(sent)")
        return (path, String(path.split(separator: "/").last ?? ""), bytes)
    }

    /// What a completion that a crash cut short leaves of the description `<id>.json` in `tus`: not complete, no job
    /// recorded; `metadata` replaced when given.
    private func rollBack(_ tus: URL, _ id: String, metadata: String? = nil) throws {
        let file = tus.appendingPathComponent("\(id).json")
        var description = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
        description["completedAt"] = nil
        description["jobID"] = nil
        if let metadata { description["metadata"] = metadata }
        try JSONSerialization.data(withJSONObject: description).write(to: file)
    }

    /// The ids of the jobs on upload `id`.
    private func jobs(_ server: TestServer, on id: String) throws -> [String] {
        let list = try server.json("/v1/jobs?limit=100").object["jobs"] as? [[String: Any]] ?? []
        return list.filter { ($0["input"] as? [String: Any])?["id"] as? String == id }.compactMap { $0["id"] as? String }
    }

    /// An upload completed and then deleted (here by DELETE /v1/uploads; a job's deletion and retention do the
    /// same) is gone for HEAD too: its whole length told a client that keeps upload URLs (tus-js-client, Uppy) that
    /// the same file, picked again, was uploaded, under an id that named nothing.
    @Test func aCompletedUploadDeletedSinceIsGoneForAHead() throws {
        let server = try TestServer()
        let source = try Media.path(.audioOnly)
        let length = try Data(contentsOf: URL(fileURLWithPath: source)).count
        let run = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST", "-T", source, "-H", "Upload-Length: \(length)"]
                                + Self.version + Self.chunk + [server.base + "/v1/tus"]).stdout
        let path = try #require(run.components(separatedBy: "\r\n").first { $0.hasPrefix("Location: ") }.map { String($0.dropFirst(10)) },
                                "\(run)")
        let id = String(path.split(separator: "/").last ?? "")
        let whole = try head(server, path)
        #expect(whole.status == 200 && whole.headers["upload-offset"] == String(length), "\(whole)")
        #expect(try server.curl("/v1/uploads/\(id)", ["-X", "DELETE"]).status == 204)
        let gone = try Shell.run("curl", ["-s", "-I"] + Self.version + [server.base + path]).stdout
        #expect(gone.hasPrefix("HTTP/1.1 404 ") && gone.contains("\r\nTus-Resumable: 1.0.0\r\n"), "\(gone)")
    }

    /// A final PATCH whose completion died after moving the bytes into the upload's place, before recording it: the
    /// client got no answer and asks for the offset (tuspy resuming), finds the whole length and sends nothing more.
    /// That HEAD completes the upload, and its job runs, once.
    @Test func aClientResumingAfterALostFinalAnswerFindsTheUploadCompleteWithItsJob() throws {
        let server = try TestServer()
        let source = try Media.path(.standard)
        let (path, id, bytes) = try started(server, source, settings: #"{"video": {"width": 160}}"#, withheld: 100)
        let bin = server.data.appendingPathComponent("tus/\(id).bin")
        let handle = try FileHandle(forWritingTo: bin)
        try handle.seekToEnd()
        try handle.write(contentsOf: bytes.suffix(100))
        try handle.close()
        try FileManager.default.moveItem(at: bin, to: server.data.appendingPathComponent("uploads/\(id)"))
        let run = try python(["resume", server.base + path, source, String(256 * 1024)])
        #expect(run.status == 0 && run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == String(bytes.count), "\(run)")
        let upload = try server.json("/v1/uploads/\(id)")
        let expected = try sha256(source)
        #expect(upload.status == 200 && upload.object["sha256"] as? String == expected, "\(upload)")
        let job = try #require(try head(server, path).headers["transcoder-job"], "the upload names its job")
        #expect(try eventually(60) { try server.json(job).object["state"] as? String == "succeeded" })
        #expect(try head(server, path).headers["transcoder-job"] == job)
        #expect(try jobs(server, on: id) == [String(job.split(separator: "/").last ?? "")], "one job")
    }

    /// Completions that a crash cut short at each step are finished by the next start, with no request: bytes moved
    /// into the upload's place but not recorded; the upload recorded, its job not made; the job made, the description
    /// not saved; the upload recorded but its bytes put back (the insert's answer lost). Each upload ends complete
    /// with one job, which runs.
    @Test func theNextStartFinishesCompletionsACrashCutShort() throws {
        let data = try Media.scratch().appendingPathComponent("data")
        var server = try TestServer([], data: data)
        let source = try Media.path(.standard)
        let settings = #"{"video": {"width": 160}}"#
        let moved = try started(server, source, settings: settings, withheld: 100)
        let recorded = try started(server, source, settings: nil)
        let made = try started(server, source, settings: settings)
        // The upload recorded but the insert's answer lost (a connection dropped at the commit): the bytes were put
        // back in `.bin` while the row says they are in the upload's place.
        let unanswered = try started(server, source, settings: nil)
        let madeJob = try #require(try head(server, made.path).headers["transcoder-job"]?.split(separator: "/").last.map(String.init))
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()
        let tus = data.appendingPathComponent("tus")
        let bin = tus.appendingPathComponent("\(moved.id).bin")
        let handle = try FileHandle(forWritingTo: bin)
        try handle.seekToEnd()
        try handle.write(contentsOf: moved.bytes.suffix(100))
        try handle.close()
        try FileManager.default.moveItem(at: bin, to: data.appendingPathComponent("uploads/\(moved.id)"))
        try rollBack(tus, moved.id)
        try rollBack(tus, recorded.id, metadata: "settings " + Data(settings.utf8).base64EncodedString())
        try rollBack(tus, made.id)
        try FileManager.default.moveItem(at: data.appendingPathComponent("uploads/\(unanswered.id)"), to: tus.appendingPathComponent("\(unanswered.id).bin"))
        try rollBack(tus, unanswered.id, metadata: "settings " + Data(settings.utf8).base64EncodedString())
        server = try TestServer([], data: data)
        let description = { (id: String) in
            (try? JSONSerialization.jsonObject(with: Data(contentsOf: tus.appendingPathComponent("\(id).json")))) as? [String: Any] ?? [:]
        }
        let all = [moved.id, recorded.id, made.id, unanswered.id]
        #expect(eventually(30) { all.allSatisfy { description($0)["completedAt"] != nil } }, "\(Media.files(in: tus))")
        for id in all {
            let job = try #require(description(id)["jobID"] as? String, "\(description(id))")
            #expect(try jobs(server, on: id) == [job], "one job on \(id)")
            #expect(try head(server, "/v1/tus/\(id)").headers["transcoder-job"] == "/v1/jobs/\(job)")
        }
        #expect(description(made.id)["jobID"] as? String == madeJob, "the job made before the crash")
        let expected = try sha256(source)
        for id in [moved.id, unanswered.id] {
            #expect(try server.json("/v1/uploads/\(id)").object["sha256"] as? String == expected)
        }
        #expect(!FileManager.default.fileExists(atPath: tus.appendingPathComponent("\(unanswered.id).bin").path),
                "the bytes went where the row says")
        for id in all {
            #expect(try eventually(60) {
                let ids = try jobs(server, on: id)
                return try !ids.isEmpty && ids.allSatisfy { job in try server.json("/v1/jobs/\(job)").object["state"] as? String == "succeeded" }
            }, "the job on \(id) ran")
        }
    }

    /// A DELETE racing the final PATCH ends one way or the other, never both. Refused (423): the completion went on,
    /// the upload and its job exist. Answered 204: the tus resource is gone for good; it does not come back when a
    /// completion that was under way records it. Every final PATCH that names a job names one that exists.
    @Test func aDeleteDuringTheFinalPatchEitherWinsWholeOrIsRefused() throws {
        let server = try TestServer()
        let source = try Media.path(.audioOnly)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let scratch = try Media.scratch()
        let tail = scratch.appendingPathComponent("tail.bin"), head = scratch.appendingPathComponent("head.bin")
        try bytes.suffix(100).write(to: tail)
        try bytes.prefix(bytes.count - 100).write(to: head)
        let settings = Data(#"{"audio": {"bitRate": 64000}}"#.utf8).base64EncodedString()
        var jobsNamed = 0, refused = 0
        let folder = server.data.appendingPathComponent("tus")
        // Mostly while the completion is seen under way (its bytes renamed aside, probed, recorded), once at once;
        // the first round with the probe held (the spare children stopped), so that one DELETE surely comes while
        // a completion is under way: on a busy machine the others could all come after it.
        for (round, whileCompleting) in [true, true, true, true, false].enumerated() {
            var stopped: [pid_t] = []
            if round == 0 {
                #expect(eventually(10) { !server.jobChildren.isEmpty })
                stopped = server.jobChildren
                for child in stopped { kill(child, SIGSTOP) }
            }
            defer { for child in stopped { kill(child, SIGCONT) } }
            let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(bytes.count)",
                                                                     "-H", "Upload-Metadata: settings \(settings)"]).location)
            let id = String(path.split(separator: "/").last ?? "")
            #expect(try server.curl(path, ["-X", "PATCH", "-T", head.path, "-H", "Upload-Offset: 0"] + Self.version + Self.chunk).status == 204)
            let answered = scratch.appendingPathComponent("final-\(round).headers")
            let finished = DispatchSemaphore(value: 0)
            NamedThread.start("final-patch") {
                _ = try? server.curl(path, ["-X", "PATCH", "-T", tail.path, "-H", "Upload-Offset: \(bytes.count - 100)", "-D", answered.path]
                                         + Self.version + Self.chunk)
                finished.signal()
            }
            if whileCompleting {
                let completing = folder.appendingPathComponent("\(id).completing").path
                let deadline = Date().addingTimeInterval(10)
                while !FileManager.default.fileExists(atPath: completing) && Date() < deadline { usleep(2000) }
            }
            let deleted = try server.curl(path, ["-X", "DELETE"] + Self.version).status
            for child in stopped { kill(child, SIGCONT) }
            if round == 0 { #expect(deleted == 423, "the DELETE came while the completion's probe was held") }
            try #require(finished.wait(timeout: .now() + 30) == .success)
            let final = (try? String(contentsOf: answered, encoding: .utf8)) ?? ""
            let namesJob = final.lowercased().contains("transcoder-job:")
            if namesJob { jobsNamed += 1 }
            if deleted == 204 {
                // Gone for good: the final PATCH found nothing, or completed before the DELETE and named its job.
                #expect(try self.head(server, path).status == 404, "round \(round): deleted, yet the upload is back; final PATCH: \(final)")
                #expect(final.contains("HTTP/1.1 404") || (final.contains("HTTP/1.1 204") && namesJob), "round \(round): \(final)")
            } else {
                refused += 1
                #expect(deleted == 423, "round \(round): DELETE answered \(deleted)")
                #expect(final.contains("HTTP/1.1 204") && namesJob, "round \(round): \(final)")
                let upload = try server.json("/v1/uploads/\(id)"), expected = try sha256(source)
                #expect(upload.status == 200 && upload.object["sha256"] as? String == expected, "round \(round): \(upload)")
            }
        }
        #expect(refused > 0, "no DELETE came while a completion was under way: the race was not run")
        let jobs = try server.json("/v1/jobs").object["jobs"] as? [[String: Any]] ?? []
        #expect(jobs.count == jobsNamed, "one job for each final PATCH that named one: \(jobs.count) jobs, \(jobsNamed) named, \(refused) deletes refused")
    }

    /// A 600,000-byte upload and a raw PATCH of it that has sent half its body and holds the upload (bytes on disk).
    private func halfSentPatch(_ server: TestServer) throws -> (path: String, client: RawClient) {
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 600000"]).location)
        let client = try RawClient(port: server.port)
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 0\r\nContent-Length: 600000\r\n\r\n")
        client.send(Data(repeating: 1, count: 300_000))
        #expect(try eventually(5) { Int(try head(server, path).headers["upload-offset"] ?? "") ?? 0 > 0 }, "the PATCH holds the upload")
        return (path, client)
    }

    @Test func aSecondPatchWhileOneRunsIsLockedOut() throws {
        let server = try TestServer()
        let (path, first) = try halfSentPatch(server)
        let second = try patch(server, path, offset: 0, body: "abc")
        #expect(second.status == 423 && second.body.contains("upload_locked"), "\(second)")
        // A HEAD meanwhile answers and leaves the running PATCH alone; a DELETE waits its turn.
        #expect(try head(server, path).status == 200)
        #expect(try server.curl(path, ["-X", "DELETE"] + Self.version).status == 423)
        first.send(Data(repeating: 1, count: 300_000))
        let answer = first.read(until: "\r\n\r\n")
        #expect(answer.hasPrefix("HTTP/1.1 204") && answer.contains("Upload-Offset: 600000"), "\(answer)")
    }

    /// A client whose connection died unseen (its network changed) resumes at once: its old PATCH held the upload's
    /// lock until its body timed out (a minute of 423; tus clients retry for a few seconds). Told that another
    /// request waits, the quiet holder lets go within seconds and what it received stays.
    @Test func aQuietPatchLetsTheUploadGoWhenAnotherWaits() throws {
        let server = try TestServer()
        let (path, dead) = try halfSentPatch(server)
        defer { withExtendedLifetime(dead) {} } // its connection stays open, quiet
        let chunk = try Media.scratch().appendingPathComponent("chunk.bin")
        try Data("abc".utf8).write(to: chunk)
        let offset = try head(server, path).headers["upload-offset"] ?? "?"
        let locked = try Shell.run("curl", ["-s", "-i", "-X", "PATCH", "-T", chunk.path, "-H", "Upload-Offset: \(offset)"]
                                   + Self.version + Self.chunk + [server.base + path]).stdout
        #expect(locked.contains("HTTP/1.1 423 ") && locked.contains("Retry-After: 1\r\n"), "\(locked)")
        // As a tus client retries: HEAD for the offset, then PATCH there.
        let rest = try Media.scratch().appendingPathComponent("rest.bin")
        var resumed: (status: Int, body: String) = (0, "")
        var resumedAt = -1
        #expect(try eventually(15) {
            resumedAt = Int(try head(server, path).headers["upload-offset"] ?? "") ?? -1
            guard resumedAt >= 0 else { return false }
            try Data(repeating: 2, count: 600_000 - resumedAt).write(to: rest)
            resumed = try server.curl(path, ["-X", "PATCH", "-T", rest.path, "-H", "Upload-Offset: \(resumedAt)"] + Self.version + Self.chunk)
            return resumed.status == 204
        }, "let go in seconds, not the transfer timeout's minute: at \(resumedAt), \(resumed)")
        #expect(resumedAt == 300_000, "what the quiet PATCH received stays: resumed at \(resumedAt)")
        #expect(try head(server, path).headers["upload-offset"] == "600000")
    }

    /// A DELETE of an upload a quiet PATCH holds (a client that gave up on a dead connection and now terminates the
    /// upload) tells the holder another waits: it lets go in seconds and the DELETE, retried, succeeds. It was refused
    /// until the quiet PATCH's body timed out, a minute; tus clients retry a 423 DELETE for a few seconds.
    @Test func aDeleteOfAnUploadAQuietPatchHoldsSucceedsInSeconds() throws {
        let server = try TestServer()
        let (path, dead) = try halfSentPatch(server)
        defer { withExtendedLifetime(dead) {} } // its connection stays open, quiet
        let first = try Shell.run("curl", ["-s", "-i", "-X", "DELETE"] + Self.version + [server.base + path]).stdout
        #expect(first.contains("HTTP/1.1 423 ") && first.contains("Retry-After: 1\r\n"), "\(first)")
        let started = Date()
        var status = 0
        #expect(try eventually(20) {
            status = try server.curl(path, ["-X", "DELETE"] + Self.version).status
            if status != 204 { usleep(250_000) }
            return status == 204
        }, "\(status)")
        #expect(Date().timeIntervalSince(started) < 10, "let go in seconds, not the body's minute: \(Date().timeIntervalSince(started)) s")
        #expect(try head(server, path).status == 404)
    }

    @Test func deferredAndEmptyUploadsAndExpiry() throws {
        let server = try TestServer(["--tus-expire-hours", "0.002"]) // 7.2 s
        // Deferred length, set by a later PATCH.
        let deferred = try #require(try create(server, Self.version + ["-H", "Upload-Defer-Length: 1"]).location)
        #expect(try head(server, deferred).headers["upload-defer-length"] == "1")
        #expect(try patch(server, deferred, offset: 0, body: "abc").status == 204)
        #expect(try patch(server, deferred, offset: 3, body: "", ["-H", "Upload-Length: 2"]).status == 400, "below the bytes received")
        #expect(try patch(server, deferred, offset: 5, body: "", ["-H", "Upload-Length: 6"]).status == 409)
        #expect(try head(server, deferred).headers["upload-defer-length"] == "1", "a refused PATCH sets no length")
        #expect(try patch(server, deferred, offset: 3, body: "", ["-H", "Upload-Length: 6"]).status == 204)
        #expect(try head(server, deferred).headers["upload-length"] == "6")
        // An empty upload completes at once, and is refused as media: the upload says why.
        let empty = try create(server, Self.version + ["-H", "Upload-Length: 0"])
        #expect(empty.status == 201)
        let emptyID = String(try #require(empty.location).split(separator: "/").last ?? "")
        let refused = try server.json("/v1/uploads/\(emptyID)")
        #expect(refused.status == 422 && (refused.object["error"] as? [String: Any])?["code"] as? String == "upload_refused", "\(refused.object)")
        // Expiry counts from the last bytes: a PATCH pushes it back.
        let untouched = try #require(try create(server, Self.version + ["-H", "Upload-Length: 100"]).location)
        // 4 s apart: a busy machine's requests before and after them have 3 s of the 7.2 s.
        Thread.sleep(forTimeInterval: 4)
        #expect(try patch(server, deferred, offset: 3, body: "d").status == 204)
        Thread.sleep(forTimeInterval: 4)
        #expect(try head(server, deferred).status == 200, "8 s after its first bytes but 4 s after its last, within the 7.2 s")
        // An upload nobody touches again goes by the sweep alone (no request names it), both files.
        let folder = server.data.appendingPathComponent("tus")
        let untouchedID = String(untouched.split(separator: "/").last ?? "")
        #expect(eventually(10) { !Media.files(in: folder).contains { $0.hasPrefix(untouchedID) } }, "\(Media.files(in: folder))")
    }

    /// An upload whose description cannot be read now (an I/O error; a folder in its place here) answers 503 with
    /// Retry-After, to a HEAD and to a PATCH: it answered 404, and a tus client told 404 starts the whole upload again
    /// from its first byte, though its bytes are all there once the description reads again. One whose description
    /// is damaged for good answers 410 (it was 404 too).
    @Test func anUploadWhoseDescriptionCannotBeReadIsNotCalledMissing() throws {
        let server = try TestServer()
        let folder = server.data.appendingPathComponent("tus")
        var paths: [String] = []
        for _ in 0..<2 {
            let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 100"]).location)
            #expect(try patch(server, path, offset: 0, body: "abc").status == 204)
            paths.append(path)
        }
        let ids = paths.map { String($0.split(separator: "/").last ?? "") }
        let unreadable = folder.appendingPathComponent("\(ids[0]).json").path
        try FileManager.default.removeItem(atPath: unreadable)
        try FileManager.default.createDirectory(atPath: unreadable, withIntermediateDirectories: false)
        try Data("{".utf8).write(to: folder.appendingPathComponent("\(ids[1]).json"))
        let first = try Shell.run("curl", ["-s", "-I"] + Self.version + [server.base + paths[0]]).stdout
        // 423, which tus clients ask again after (tus-js-client and Uppy start the whole upload over on a 503).
        #expect(first.hasPrefix("HTTP/1.1 423 ") && first.contains("Retry-After: 5\r\n"), "\(first)")
        let refused = try patch(server, paths[0], offset: 3, body: "d")
        #expect(refused.status == 503, "\(refused.status) \(refused.body)")
        #expect(try head(server, paths[1]).status == 410)
        #expect(try patch(server, paths[1], offset: 3, body: "d").status == 410)
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("\(ids[0]).bin").path), "its bytes stay")
    }

    /// A HEAD of an upload whose bytes are all there while its last PATCH is held by a client gone quiet (its body's
    /// end never came) tells the holder another waits: it lets go in seconds and the upload completes, where the HEAD
    /// answered 423 for the body's minute.
    @Test func aHeadOfAWholeUploadAQuietPatchHoldsCompletesItInSeconds() throws {
        let server = try TestServer()
        // Whole 256 KiB blocks: the writer keeps a partial block until the body goes on or ends. (Not media: it
        // completes as refused, which is complete all the same.)
        let media = Data(repeating: 7, count: 512 * 1024)
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(media.count)"]).location)
        let client = try RawClient(port: server.port)
        defer { withExtendedLifetime(client) {} } // its connection stays open, quiet
        // Every byte, chunked, without the last chunk's end: the PATCH holds the upload, waiting.
        client.send("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n"
                    + "Upload-Offset: 0\r\nTransfer-Encoding: chunked\r\n\r\n" + String(media.count, radix: 16) + "\r\n")
        client.send(media)
        client.send("\r\n")
        var seen: (status: Int, headers: [String: String]) = (0, [:])
        #expect(try eventually(5) {
            seen = try head(server, path)
            return seen.status == 423 || Int(seen.headers["upload-offset"] ?? "") == media.count
        }, "every byte arrived: \(seen) of \(media.count)")
        let started = Date()
        var status = 0
        #expect(try eventually(20) {
            status = try head(server, path).status
            if status != 200 { usleep(250_000) }
            return status == 200
        }, "\(status)")
        #expect(Date().timeIntervalSince(started) < 10, "let go in seconds, not the body's minute: \(Date().timeIntervalSince(started)) s")
        #expect(Int(try head(server, path).headers["upload-offset"] ?? "") == media.count)
    }

    /// An upload a request names after its expiry answers 404, and its files go then, whatever the sweep does. Here
    /// the expiry is an hour (swept once a minute), and the upload's creation and last bytes are made two hours old
    /// just before the request: the 404 is the request's own. (The test before this one let the sweep, every 0.9 s,
    /// delete the upload before its request: the request's check could go and it still passed.)
    @Test func anUploadNamedAfterItsExpiryAnswers404AndGoes() throws {
        let server = try TestServer(["--tus-expire-hours", "1"])
        let folder = server.data.appendingPathComponent("tus")
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 100"]).location)
        #expect(try patch(server, path, offset: 0, body: "abc").status == 204)
        let id = String(path.split(separator: "/").last ?? "")
        let twoHoursAgo = Date().addingTimeInterval(-7200)
        let info = folder.appendingPathComponent("\(id).json")
        var description = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: info)) as? [String: Any])
        description["createdAt"] = twoHoursAgo.timeIntervalSince1970
        try JSONSerialization.data(withJSONObject: description).write(to: info)
        try FileManager.default.setAttributes([.modificationDate: twoHoursAgo], ofItemAtPath: folder.appendingPathComponent("\(id).bin").path)
        let answer = try head(server, path)
        #expect(answer.status == 404, "\(answer)")
        #expect(!Media.files(in: folder).contains { $0.hasPrefix(id) }, "its files went with the request: \(Media.files(in: folder))")
        #expect(try patch(server, path, offset: 3, body: "d").status == 404)
    }

    /// Expiry neither deletes an upload a PATCH holds (the request goes on; a client told 404 starts over) nor one
    /// whose last bytes are recent but renamed aside by a completion that died with its process (the sweep would
    /// otherwise delete them before the client's next request puts them back). All three uploads here were created
    /// an hour ago (their descriptions backdated); a third one, idle as long, shows a sweep ran.
    @Test func expiryLeavesAHeldUploadAndRecentBytesAside() throws {
        let server = try TestServer(["--tus-expire-hours", "0.01"]) // 36 s, swept every 9 s
        let folder = server.data.appendingPathComponent("tus")
        var ids: [String] = []
        for _ in 0..<3 {
            let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: 1000"]).location)
            #expect(try patch(server, path, offset: 0, body: String(repeating: "a", count: 900)).status == 204)
            ids.append(String(path.split(separator: "/").last ?? ""))
        }
        let (held, aside, idle) = (ids[0], ids[1], ids[2])
        let hourAgo = Date().addingTimeInterval(-3600)
        for id in ids {
            let info = folder.appendingPathComponent("\(id).json")
            var description = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: info)) as? [String: Any])
            description["createdAt"] = hourAgo.timeIntervalSince1970
            try JSONSerialization.data(withJSONObject: description).write(to: info)
        }
        for id in [held, idle] {
            try FileManager.default.setAttributes([.modificationDate: hourAgo], ofItemAtPath: folder.appendingPathComponent("\(id).bin").path)
        }
        // As a PATCH in progress holds it; and as a completion that died leaves its recent bytes.
        let lock = open(folder.appendingPathComponent("\(held).bin").path, O_RDWR)
        defer { close(lock) }
        try #require(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0)
        try FileManager.default.moveItem(at: folder.appendingPathComponent("\(aside).bin"), to: folder.appendingPathComponent("\(aside).completing"))
        #expect(eventually(30) { !Media.files(in: folder).contains { $0.hasPrefix(idle) } }, "a sweep ran: \(Media.files(in: folder))")
        #expect(Media.files(in: folder).contains("\(aside).completing"), "the sweep left the recent bytes aside")
        #expect(Media.files(in: folder).contains("\(held).bin"), "and the held upload")
        let recovered = try head(server, "/v1/tus/\(aside)")
        #expect(recovered.status == 200 && recovered.headers["upload-offset"] == "900", "\(recovered)")
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("\(aside).bin").path), "the bytes are back")
        let during = try head(server, "/v1/tus/\(held)")
        #expect(during.status == 200 && during.headers["upload-offset"] == "900", "held by a PATCH: \(during)")
        flock(lock, LOCK_UN)
        #expect(try head(server, "/v1/tus/\(held)").status == 404, "expired, and free to go")
    }

    @Test func twoGigabytesIn64MiBPatchesKeepMemoryFlat() throws {
        let server = try TestServer()
        defer { try? FileManager.default.removeItem(at: server.data) }
        let total = 2 * 1024 * 1024 * 1024, piece = 64 * 1024 * 1024
        let path = try #require(try create(server, Self.version + ["-H", "Upload-Length: \(total)"]).location)
        let sparse = try Media.scratch().appendingPathComponent("piece.bin").path
        try Shell.check("truncate", ["-s", String(piece), sparse])
        for offset in stride(from: 0, to: total, by: piece) {
            let answer = try server.curl(path, ["-X", "PATCH", "-T", sparse, "-H", "Upload-Offset: \(offset)"] + Self.version + Self.chunk)
            guard answer.status == 204 else {
                Issue.record("PATCH at \(offset): \(answer)")
                return
            }
        }
        let peak = server.peakMemory
        #expect(peak > 0 && peak < 200 * 1024 * 1024, "peak RSS \(peak / 1024 / 1024) MiB")
        // Zeros are no media: the complete upload is refused, and its bytes are gone.
        let id = String(path.split(separator: "/").last ?? "")
        #expect(try server.json("/v1/uploads/\(id)").status == 422)
        #expect(Media.files(in: server.data.appendingPathComponent("tus")).allSatisfy { !$0.hasSuffix(".bin") })
    }
}

private extension String {
    /// Hex digits as bytes.
    var hexBytes: [UInt8] {
        var bytes: [UInt8] = []
        var index = startIndex
        while index < endIndex, let next = self.index(index, offsetBy: 2, limitedBy: endIndex) {
            bytes.append(UInt8(self[index..<next], radix: 16) ?? 0)
            index = next
        }
        return bytes
    }
}
