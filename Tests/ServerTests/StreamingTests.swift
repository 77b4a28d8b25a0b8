import Foundation
import Testing
import TestSupport

/// A ladder job through the API: its folder of files listed in the job, each served by its path with its type,
/// ranges and validators, the playlists decodable over HTTP by ffmpeg, and nothing outside the listed files reachable.
@Suite struct StreamingTests {
    @Test func aLadderJobServesEveryFileItListsAndNothingElse() throws {
        let server = try TestServer(["--cors-origin", "http://player.test:8000"])
        let input = try #require(try server.json("/v1/uploads/", ["-T", try Media.path(.standard)]).object["id"] as? String)
        let settings = #"{"container": "hls", "segmentDuration": 2, "thumbnails": {"interval": 1, "storyboard": true, "poster": 0.5}}"#
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(input)", "settings": \#(settings)}"#])
        let id = try #require(created.object["id"] as? String, "\(created.object)")
        var job: [String: Any] = [:]
        _ = try eventually(60) {
            job = try server.json("/v1/jobs/\(id)").object
            return ["succeeded", "failed"].contains(job["state"] as? String)
        }
        #expect(job["state"] as? String == "succeeded", "\(job)")
        let output = try #require(job["output"] as? [String: Any])
        let base = "/v1/jobs/\(id)/output"
        #expect(output["url"] as? String == base + "/master.m3u8")
        #expect(output["mimeType"] as? String == "application/vnd.apple.mpegurl")
        #expect(output["dash"] as? String == base + "/manifest.mpd")
        #expect(output["poster"] as? String == base + "/poster.jpg" && output["storyboard"] as? String == base + "/storyboard.vtt")
        let files = try #require(output["files"] as? [[String: Any]])
        let paths = files.compactMap { $0["path"] as? String }
        for expected in ["master.m3u8", "manifest.mpd", "360p/index.m3u8", "360p/iframes.m3u8", "360p/init.mp4",
                         "360p/segment_00001.m4s", "234p/segment_00002.m4s", "audio/index.m3u8", "thumbnails/00004.jpg",
                         "storyboard.jpg", "storyboard.vtt", "poster.jpg"] {
            #expect(paths.contains(expected), "\(expected) in \(paths)")
        }
        #expect(output["size"] as? Int == files.compactMap { $0["size"] as? Int }.reduce(0, +))
        #expect(output["fileCount"] as? Int == files.count)
        // The job list names how many files each output has, not each of them (a long ladder's thousands were in
        // every reading of the list, for every listed job); everything else is as the job's own reading has it.
        let listed = try #require((try server.json("/v1/jobs?limit=10").object["jobs"] as? [[String: Any]])?.first { $0["id"] as? String == id })
        let listedOutput = try #require(listed["output"] as? [String: Any])
        #expect(listedOutput["files"] == nil && listedOutput["fileCount"] as? Int == files.count, "\(listedOutput.keys.sorted())")
        #expect(Set(listedOutput.keys) == Set(output.keys).subtracting(["files"]) && listedOutput["url"] as? String == output["url"] as? String
                && listedOutput["size"] as? Int == output["size"] as? Int)

        // The main URL of a ladder sends players to the master playlist, where its relative names resolve.
        let redirect = try Shell.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", server.base + base])
        #expect(redirect.stdout == "307 \(server.base)\(base)/master.m3u8", "\(redirect.stdout)")

        // Every listed file, by its URL, as listed: same bytes, same type; mirrored to disk for the playlist checks.
        let mirror = try Media.scratch()
        for file in files {
            let path = try #require(file["path"] as? String), url = try #require(file["url"] as? String)
            #expect(url == base + "/" + path)
            let target = mirror.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
            let fetched = try Shell.run("curl", ["-s", "-o", target.path, "-w", "%{http_code} %{content_type} %{size_download}",
                                                 server.base + url])
            #expect(fetched.stdout == "200 \(file["mimeType"] as? String ?? "?") \(file["size"] as? Int ?? -1)", "\(path): \(fetched.stdout)")
        }
        let summary = try Ladder.check(mirror.path)
        #expect(summary.variants.map(\.resolution) == [[640, 360], [416, 234]])
        #expect(summary.variants.allSatisfy { $0.durations == [2, 2] })

        // ffmpeg plays the ladder over HTTP, through either manifest.
        for manifest in ["master.m3u8", "manifest.mpd"] {
            let decode = try Ladder.decodesCleanly(server.base + base + "/" + manifest)
            #expect(decode.status == 0 && decode.stderr.isEmpty, "\(manifest): \(decode.stderr.suffix(500))")
        }

        // Ranges and validators, as for the single file.
        let range = try Shell.run("curl", ["-s", "-o", "/dev/null", "-r", "0-99", "-w", "%{http_code} %{size_download}",
                                           server.base + base + "/360p/segment_00001.m4s"])
        #expect(range.stdout == "206 100")

        // HEAD answers the headers of GET.
        let head = try Shell.run("curl", ["-s", "-I", server.base + base + "/360p/init.mp4"])
        let initSize = files.first { $0["path"] as? String == "360p/init.mp4" }?["size"] as? Int ?? -1
        #expect(head.stdout.hasPrefix("HTTP/1.1 200") && head.stdout.contains("Content-Length: \(initSize)\r\n")
                && head.stdout.contains("Content-Type: video/mp4") && head.stdout.contains("ETag: "), "\(head.stdout)")

        // A player page on the allowed origin may read the files (and their lengths); another origin may not.
        let allowed = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-H", "Origin: http://player.test:8000",
                                             server.base + base + "/master.m3u8"])
        #expect(allowed.stdout.contains("Access-Control-Allow-Origin: http://player.test:8000\r\n") && allowed.stdout.contains("Vary: Origin\r\n")
                && allowed.stdout.contains("Access-Control-Expose-Headers: Content-Length, Content-Range"), "\(allowed.stdout)")
        let other = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-H", "Origin: http://elsewhere.test",
                                           server.base + base + "/master.m3u8"])
        #expect(other.stdout.hasPrefix("HTTP/1.1 200") && !other.stdout.contains("Access-Control-Allow-Origin"), "\(other.stdout)")
        // The answer varies with the Origin also when there is none: a cache must not serve a copy fetched by a
        // <video> to the player page's fetch.
        let plain = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", server.base + base + "/master.m3u8"])
        #expect(plain.stdout.contains("Vary: Origin\r\n") && other.stdout.contains("Vary: Origin\r\n"), "\(plain.stdout)")
        let preflight = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "OPTIONS", "-H", "Origin: http://player.test:8000",
                                               "-H", "Access-Control-Request-Method: GET", "-H", "Access-Control-Request-Headers: range",
                                               server.base + base + "/360p/segment_00001.m4s"])
        #expect(preflight.stdout.hasPrefix("HTTP/1.1 204") && preflight.stdout.contains("Access-Control-Allow-Headers: Range")
                && preflight.stdout.contains("Access-Control-Allow-Origin: http://player.test:8000\r\n")
                && preflight.stdout.contains("Access-Control-Allow-Methods: GET"), "\(preflight.stdout)")
        let strangerPreflight = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "OPTIONS", "-H", "Origin: http://elsewhere.test",
                                                       "-H", "Access-Control-Request-Method: GET", server.base + base + "/master.m3u8"])
        #expect(!strangerPreflight.stdout.contains("Access-Control-Allow-Origin"), "\(strangerPreflight.stdout)")
        let missing = try Shell.run("curl", ["-s", "-D", "-", "-H", "Origin: http://player.test:8000", server.base + base + "/nothing.mp4"])
        #expect(missing.stdout.hasPrefix("HTTP/1.1 404") && missing.stdout.contains("Access-Control-Allow-Origin: http://player.test:8000"),
                "a refusal is readable by the player too: \(missing.stdout)")
        // A path with its slash encoded (a client generated from the OpenAPI document, a player's
        // encodeURIComponent) names the same file, at its own URL (where a playlist's relative names resolve); a
        // method the route does not take is refused before the handler.
        let encoded = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-H", "Origin: http://player.test:8000",
                                             server.base + base + "/360p%2Fsegment_00001.m4s"])
        #expect(encoded.stdout.hasPrefix("HTTP/1.1 307") && encoded.stdout.contains("Access-Control-Allow-Origin: http://player.test:8000")
                && encoded.stdout.contains("Location: \(base)/360p/segment_00001.m4s\r\n"), "\(encoded.stdout)")
        let followed = try Shell.run("curl", ["-s", "-L", "-o", "/dev/null", "-w", "%{http_code} %{content_type}",
                                              server.base + base + "/360p%2Findex.m3u8"])
        #expect(followed.stdout == "200 application/vnd.apple.mpegurl", "\(followed.stdout)")
        let posted = try Shell.run("curl", ["-s", "-D", "-", "-X", "POST", "-H", "Origin: http://player.test:8000", server.base + base + "/master.m3u8"])
        #expect(posted.stdout.hasPrefix("HTTP/1.1 405") && posted.stdout.contains("Allow: ")
                && posted.stdout.contains("Access-Control-Allow-Origin: http://player.test:8000"), "\(posted.stdout)")
        // A download page reads the file's name; a player revalidates by date too.
        let exposed = allowed.stdout.split(separator: "\r\n").first { $0.hasPrefix("Access-Control-Expose-Headers: ") } ?? ""
        #expect(exposed.contains("Content-Disposition"), "\(allowed.stdout)")
        let datePreflight = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "OPTIONS", "-H", "Origin: http://player.test:8000",
                                                   "-H", "Access-Control-Request-Method: GET", "-H", "Access-Control-Request-Headers: if-modified-since",
                                                   server.base + base + "/master.m3u8"])
        #expect(datePreflight.stdout.contains("If-Modified-Since"), "\(datePreflight.stdout)")

        // Only listed files: no way out of the folder, no unlisted name, no other method.
        for probe in ["../../transcoderd.sqlite", "%2e%2e/%2e%2e/transcoderd.sqlite", "%2e%2e%2F%2e%2e%2Ftranscoderd.sqlite",
                      "360p%252Fsegment_00001.m4s", "360p/../master.m3u8", "360p%2F..%2Fmaster.m3u8", "nothing.mp4", "360p",
                      "thumbnails/", "thumbnails%2F"] {
            let answer = try Shell.run("curl", ["-s", "--path-as-is", "-w", "\n%{http_code}", server.base + base + "/" + probe])
            let status = answer.stdout.split(separator: "\n").last.map(String.init)
            #expect(status == "404", "\(probe): \(answer.stdout.suffix(200))")
            // Refused by the listing itself (a path resolved elsewhere would answer another error); a "%" sent as
            // %25 stays one.
            #expect(answer.stdout.contains(#""code":"output_file_not_found""#), "\(probe): \(answer.stdout.suffix(200))")
        }
        let post = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST", server.base + base + "/master.m3u8"])
        #expect(post.stdout.hasPrefix("HTTP/1.1 405") && post.stdout.contains("Allow: GET, HEAD, OPTIONS"), "\(post.stdout)")

        // Deleting the job removes its whole folder.
        let folder = server.data.appendingPathComponent("outputs/\(id)")
        #expect(FileManager.default.fileExists(atPath: folder.path))
        #expect(try server.curl("/v1/jobs/\(id)", ["-X", "DELETE"]).status == 204)
        #expect(!FileManager.default.fileExists(atPath: folder.path))
        #expect(Media.files(in: server.data.appendingPathComponent("outputs")).isEmpty)
    }

    @Test func anMP4JobListsItsOneFileAndStillDownloadsAtItsURL() throws {
        let server = try TestServer()
        let input = try #require(try server.json("/v1/uploads/", ["-T", try Media.path(.standard)]).object["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(input)"}"#])
        let id = try #require(created.object["id"] as? String)
        #expect(try eventually(60) { try server.json("/v1/jobs/\(id)").object["state"] as? String == "succeeded" })
        let output = try #require(try server.json("/v1/jobs/\(id)").object["output"] as? [String: Any])
        #expect(output["url"] as? String == "/v1/jobs/\(id)/output")
        let files = try #require(output["files"] as? [[String: Any]])
        #expect(files.map { $0["path"] as? String } == ["output.mp4"] && files.first?["mimeType"] as? String == "video/mp4")
        let whole = try Shell.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", server.base + "/v1/jobs/\(id)/output"])
        let byPath = try Shell.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                            server.base + "/v1/jobs/\(id)/output/output.mp4"])
        #expect(whole.stdout == "200 \(output["size"] as? Int ?? -1)" && byPath.stdout == whole.stdout, "\(whole.stdout) \(byPath.stdout)")
        #expect(output["poster"] == nil && output["dash"] == nil)
        // Without --cors-origin, no CORS headers and no preflight route.
        let plain = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-H", "Origin: http://player.test",
                                           server.base + "/v1/jobs/\(id)/output"])
        #expect(!plain.stdout.contains("Access-Control"), "\(plain.stdout)")
        let options = try Shell.run("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "OPTIONS", server.base + "/v1/jobs/\(id)/output"])
        #expect(options.stdout == "405")
    }

    /// Origins are compared as browsers send them: host in lower case, no default port. An operator who writes
    /// `https://Player.example:443` means the page the browser calls `https://player.example`.
    @Test func originsAreMatchedAsBrowsersSendThem() throws {
        let server = try TestServer(["--cors-origin", "https://Player.Example:443, http://Other.test:80, http://third.test:8080"])
        for origin in ["https://player.example", "http://other.test", "http://third.test:8080"] {
            let answer = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-H", "Origin: \(origin)",
                                                server.base + "/v1/jobs/\(UUID().uuidString.lowercased())/output"])
            #expect(answer.stdout.hasPrefix("HTTP/1.1 404") && answer.stdout.contains("Access-Control-Allow-Origin: \(origin)\r\n"),
                    "\(answer.stdout)")
        }
    }
}
