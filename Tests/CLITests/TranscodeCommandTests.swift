import Foundation
import Testing
import TestSupport

/// The `transcoderd` binary, run as a user would.
@Suite struct TranscodeCommandTests {
    /// Audio whose one frame holds many minutes (an AVI's single chunk of 8-bit audio: 1000 s at 8 kHz in one
    /// 8 MB packet) is converted a second at a time, within 512 MiB: converted whole, it took an output buffer and a
    /// FIFO as long and failed as out of memory even under the jobs' default 2 GiB.
    @Test func audioInOneFrameOfManyMinutesIsConvertedInLittleMemory() throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("chunk.avi").path, output = folder.appendingPathComponent("out.m4a").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "sine=r=8000:d=1000", "-af", "asetnsamples=n=8000000:p=0", "-c:a", "pcm_u8", source])
        let packets = try Shell.check("ffprobe", ["-v", "error", "-show_entries", "packet=size", "-of", "csv=p=0", source])
        #expect(packets.trimmingCharacters(in: .whitespacesAndNewlines) == "8000000", "one packet: \(packets)")
        let run = try Shell.run("/bin/sh", ["-c", "ulimit -d 524288; exec \"$0\" transcode \"$1\" \"$2\" --progress none", Binary.path, source, output])
        #expect(run.status == 0, "\(run.stderr)")
        let duration = Double(try Shell.check("ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", output])
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        #expect(abs(duration - 1000) < 0.5, "\(duration) s")
    }

    /// A write that fails as a ladder's segment is closed (here a file-size limit of 64 KiB, as a full disk
    /// or a network file system's error would) fails the transcode: the last 32 KiB each audio segment held in its
    /// buffer were lost unseen, the segments (which nothing reads back) were published cut short, and it succeeded.
    @Test func aSegmentWhoseLastWriteFailsFailsTheLadder() throws {
        let folder = try Media.scratch()
        let source = folder.appendingPathComponent("noise.wav").path, output = folder.appendingPathComponent("out").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "anoisesrc=d=7:a=0.5", "-ac", "2", source])
        // 6 s at 320 kb/s: some 240 KB a segment, past the limit (128 blocks of 512 bytes, 64 KiB, in dash and in bash as sh).
        let settings = #"{"container": "hls", "segmentDuration": 6, "audio": {"bitRate": 320000}}"#
        let run = try Shell.run("/bin/sh", ["-c", "trap '' XFSZ; ulimit -f 128; exec \"$0\" transcode \"$1\" \"$2\" --settings \"$3\" --progress none",
                                            Binary.path, source, output, settings])
        #expect(run.status == 1 && run.stderr.contains("Writing the audio segments failed"), "\(run.status) \(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output), "nothing published")
        // Without the limit the same ladder is written whole (so the limit is what failed it).
        let whole = try Shell.run(Binary.path, ["transcode", source, output, "--settings", settings, "--progress", "none"])
        #expect(whole.status == 0, "\(whole.stderr)")
        let first = try FileManager.default.attributesOfItem(atPath: output + "/audio/segment_00001.m4s")[.size] as? Int ?? 0
        #expect(first > 128 * 1024, "\(first) bytes")
    }

    @Test func helpExplainsTheCommands() throws {
        let help = try Shell.run(Binary.path, ["--help"])
        #expect(help.status == 0 && help.stdout.contains("transcoderd transcode INPUT OUTPUT"))
        let transcodeHelp = try Shell.run(Binary.path, ["transcode", "--help"])
        #expect(transcodeHelp.status == 0)
        for word in ["--settings", "--preset", "--progress", "scalingMode", "maxKeyFrameInterval", "\"copy\""] {
            #expect(transcodeHelp.stdout.contains(word), "transcode --help mentions \(word)")
        }
    }

    /// `transcoderd webhook-secret` prints a fresh secret in the form --webhook-secret takes; a malformed one stops
    /// start-up with one line.
    @Test func webhookSecretsArePrintedFreshAndCheckedAtStart() throws {
        let first = try Shell.run(Binary.path, ["webhook-secret"]), second = try Shell.run(Binary.path, ["webhook-secret"])
        let secret = first.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(first.status == 0 && secret.hasPrefix("whsec_") && secret != second.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(Data(base64Encoded: String(secret.dropFirst(6)))?.count == 32)
        // Its --help is help, as every command's (it printed a secret).
        let help = try Shell.run(Binary.path, ["webhook-secret", "--help"])
        #expect(help.status == 0 && help.stdout.hasPrefix("Usage: transcoderd webhook-secret")
                && !help.stdout.split(separator: "\n").contains { $0.hasPrefix("whsec_") && $0.count > 40 }, "\(help.stdout)")
        let folder = try Media.scratch()
        let bad = try Shell.run(Binary.path, ["serve", "--data", folder.path, "--port", "0", "--webhook-secret", "whsec_short"])
        #expect(bad.status == 2 && bad.stderr.contains("--webhook-secret") && bad.stderr.split(separator: "\n").count == 1, "\(bad.stderr)")
        let blocks = try Shell.run(Binary.path, ["serve", "--data", folder.path, "--port", "0", "--allow-private-urls", "10.0.0.0/8,nope"])
        #expect(blocks.status == 2 && blocks.stderr.contains("\"nope\""), "\(blocks.stderr)")
    }

    /// Every option of `serve` and `work` is listed whole, with its environment variable, however long its flag.
    @Test func serveAndWorkHelpListEveryOptionInFull() throws {
        for command in ["serve", "work"] {
            let help = try Shell.run(Binary.path, [command, "--help"])
            #expect(help.status == 0)
            for (flag, variable) in [("--max-input-dimension", "TRANSCODER_MAX_INPUT_DIMENSION"),
                                     ("--max-input-duration", "TRANSCODER_MAX_INPUT_DURATION"),
                                     ("--data", "TRANSCODER_DATA")] {
                let listed = help.stdout.split(separator: "\n").contains { line in
                    line.split(separator: " ").first.map(String.init) == flag && line.hasSuffix("$" + variable)
                }
                #expect(listed, "\(command) --help lists \(flag) with $\(variable)")
            }
        }
    }

    /// The health check asks the server where it listens: a server on `::` (then IPv6 only) was asked on 127.0.0.1,
    /// and a container's check failed for ever.
    @Test func theHealthCheckAsksWhereTheServerListens() throws {
        func check(_ arguments: [String], environment: [String: String] = [:]) throws -> Int32 {
            try Shell.run(Binary.path, ["healthcheck"] + arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }).status
        }
        let v4 = try TestServer()
        #expect(try check(["--port", String(v4.port)]) == 0)
        let v6 = try TestServer(["--host", "::"])
        #expect(try check(["--host", "::", "--port", String(v6.port)]) == 0)
        #expect(try check([], environment: ["TRANSCODER_HOST": "::", "TRANSCODER_PORT": String(v6.port)]) == 0)
        #expect(try check(["--host", "[::1]", "--port", String(v6.port)]) == 0)
        #expect(try check(["--port", "http"]) == 1)
        // As `serve` takes them; anything else is refused (a mistyped flag was passed over, another port asked).
        #expect(try check(["--port=\(v4.port)"]) == 0)
        #expect(try check(["--host=127.0.0.1", "--port", String(v4.port)]) == 0)
        let mistyped = try Shell.run(Binary.path, ["healthcheck", "--prot", String(v4.port)])
        #expect(mistyped.status == 1 && mistyped.stderr.contains("unknown option --prot"), "\(mistyped.stderr)")
        #expect(try check(["--port"]) == 1)
        // A Kubernetes service link in the variable is no port, here as for `serve` (the check failed for ever).
        let linked = try Shell.run(Binary.path, ["healthcheck", "--host", "127.0.0.1"],
                                   environment: ProcessInfo.processInfo.environment.merging(["TRANSCODER_PORT": "tcp://10.96.0.7:9999"]) { $1 })
        #expect(linked.stderr.contains("127.0.0.1 port 8080") || linked.status == 0, "the default port instead: \(linked.stderr)")
    }

    /// In a container the check runs beside the server, PID 1, with the container's environment but not its
    /// arguments: `podman run IMAGE serve --port 9000` was asked on 8080 and unhealthy for ever. Here the server is
    /// PID 1 of a new PID namespace, then the child of a shell standing for `--init`'s init (root only: CI's runs
    /// are), and the check runs inside it.
    @Test(.enabled(if: getuid() == 0, "a PID namespace needs root"))
    func theHealthCheckReadsTheContainersServerFromItsCommandLine() throws {
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSCODER_PORT"] = nil
        environment["TRANSCODER_HOST"] = nil
        let namespace = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        // A port bound and not listening: the system hands it to no one else, and a connection to it is refused. With
        // SO_REUSEPORT and SO_REUSEADDR, which the server sets too, the server can bind it while this holds it (and its
        // check that no other process listens there passes: this one does not listen).
        func heldPort() -> (fd: Int32, port: Int) {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")),
                                      sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
            return (fd, Int(UInt16(bigEndian: address.sin_port)))
        }
        let refusing = heldPort()
        defer { close(refusing.fd) }
        for (wrapper, what) in [(namespace, "the server as PID 1"), (namespace + ["sh", "-c", "\"$@\" & wait", "sh"], "an init in front")] {
            let held = heldPort()
            let port = held.port
            let server = try TestServer(["--port", String(port)], wrapper: wrapper)
            close(held.fd)
            #expect(server.port == port)
            let pid = try #require(server.serverPID) // the namespace's PID 1 seen from here: the server, or the shell
            func check(_ arguments: [String]) throws -> (status: Int32, stderr: String) {
                let run = try Shell.run("nsenter", ["--target", String(pid), "--pid", "--mount", Binary.path, "healthcheck"] + arguments,
                                        environment: environment)
                return (run.status, run.stderr)
            }
            let found = try check([])
            #expect(found.status == 0, "\(what): asked where the server listens: \(found.stderr)")
            let elsewhere = try check(["--port", String(refusing.port)])
            #expect(elsewhere.status == 1, "\(what): a --port given wins: \(elsewhere.stderr)")
            kill(server.process.processIdentifier, SIGKILL) // unshare --kill-child: the namespace goes with it
            server.process.waitUntilExit()
        }
    }

    @Test func presetsAreListed() throws {
        let output = try Shell.run(Binary.path, ["presets"])
        #expect(output.status == 0)
        for name in ["480p", "720p", "1080p", "audio"] { #expect(output.stdout.contains(name)) }
        let json = try Shell.run(Binary.path, ["presets", "--json"])
        let presets = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]]
        #expect(presets?.count == 4)
    }

    @Test func transcodeWithAPresetPrintsJSONProgressAndTheResult() throws {
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent("small.mp4").path
        let run = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), output, "--preset", "480p",
                                              "--settings", #"{"video": {"averageBitRate": 500000}}"#, "--progress", "json"])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(lines.allSatisfy { $0 != nil }, "every line is JSON")
        let progress = lines.compactMap { $0 }.filter { $0["event"] as? String == "progress" }
        #expect(!progress.isEmpty && progress.last?["fraction"] as? Double == 1)
        let result = try #require(lines.last ?? nil)
        #expect(result["path"] as? String == output)
        let probe = try Probe.read(output)
        #expect(probe.video?.width == 640 && probe.video?.height == 360 && probe.video?.profile == "Main", "480p never upscales a 360p source")
    }

    @Test func settingsFromAFile() throws {
        let folder = try Media.scratch()
        let settings = folder.appendingPathComponent("settings.json").path
        try #"{"container": "m4v", "video": {"height": 180, "profile": "baseline"}, "audio": null}"#
            .write(toFile: settings, atomically: true, encoding: .utf8)
        let output = folder.appendingPathComponent("out.m4v").path
        let run = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), output, "--settings", "@" + settings])
        #expect(run.status == 0, "\(run.stderr)")
        let probe = try Probe.read(output)
        #expect(probe.video?.profile == "Constrained Baseline" || probe.video?.profile == "Baseline")
        #expect(probe.video?.height == 180 && probe.audio == nil)
    }

    @Test func failuresExitNonZeroWithOneClearLine() throws {
        let folder = try Media.scratch()
        let input = try Media.randomBytes(10_000, into: folder, name: "noise.mov")
        let run = try Shell.run(Binary.path, ["transcode", input, folder.appendingPathComponent("o.mp4").path])
        #expect(run.status == 1)
        #expect(run.stderr.hasPrefix("error: unsupported_format: ") && run.stderr.split(separator: "\n").count == 1, "\(run.stderr)")
        let bad = try Shell.run(Binary.path, ["transcode", input, "o.mp4", "--settings", #"{"video": {"profile": "x"}}"#])
        #expect(bad.status == 2 && bad.stderr.contains("video.profile: expected one of baseline, main, high"))
        #expect(Media.files(in: folder) == ["noise.mov"])
    }

    /// Where the settings name no container, the output's extension chooses it, as ffmpeg's would: MP4 bytes were
    /// written under any name (`clip.mov` an MP4, `song.m4a` with the picture in it, `out.mkv` no Matroska at all).
    @Test func theOutputsExtensionChoosesTheContainer() throws {
        let folder = try Media.scratch()
        let input = try Media.path(.standard)
        let small = #"{"video": {"height": 180}}"#
        func brand(_ path: String) throws -> String {
            let head = try Data(contentsOf: URL(fileURLWithPath: path)).prefix(12)
            return String(decoding: head.suffix(4), as: UTF8.self)
        }
        for (name, settings, expected) in [("clip.MOV", small, "qt  "), ("clip.m4v", small, "M4V "), ("song.m4a", "{}", "M4A "),
                                           ("named.mov", #"{"container": "mp4", "video": {"height": 180}}"#, "isom"),
                                           ("plain.bin", small, "isom"), ("preset.mov", #""480p""#, "qt  ")] {
            let output = folder.appendingPathComponent(name).path
            let run = try Shell.run(Binary.path, ["transcode", input, output, "--settings", settings])
            #expect(run.status == 0, "\(name): \(run.stderr)")
            #expect(try brand(output) == expected, "\(name)")
        }
        // The preset named alone is applied (480p: Main profile; the default is High), in QuickTime.
        #expect(try Probe.read(folder.appendingPathComponent("preset.mov").path).video?.profile == "Main")
        let song = try Probe.read(folder.appendingPathComponent("song.m4a").path)
        #expect(song.video == nil && song.audio?.codec_name == "aac", "an .m4a holds the sound alone")
        let raw = folder.appendingPathComponent("pictures.264").path
        let rawRun = try Shell.run(Binary.path, ["transcode", input, raw, "--preset", "480p"])
        #expect(rawRun.status == 0, "\(rawRun.stderr)")
        let rawProbe = try Probe.read(raw)
        #expect(rawProbe.format.format_name == "h264" && rawProbe.audio == nil && rawProbe.video?.height == 360)

        let refused = try Shell.run(Binary.path, ["transcode", input, folder.appendingPathComponent("out.mkv").path])
        #expect(refused.status == 2 && refused.stderr.contains("does not write .mkv files") && refused.stdout.isEmpty, "\(refused.stderr)")
        let presetRefused = try Shell.run(Binary.path, ["transcode", input, folder.appendingPathComponent("out.mkv").path, "--settings", #""480p""#])
        #expect(presetRefused.status == 2 && presetRefused.stderr.contains("does not write .mkv files"), "a preset by name: \(presetRefused.stderr)")
        #expect(Media.files(in: folder) == ["clip.MOV", "clip.m4v", "named.mov", "pictures.264", "plain.bin", "preset.mov", "song.m4a"],
                "\(Media.files(in: folder))")
    }

    /// On the command line a watermark's "upload" is the image file's path: taken for an upload id, it failed every
    /// time once the transcode started. A path that is no readable file is refused first.
    @Test func aWatermarkIsAnImageFileOnTheCommandLine() throws {
        let folder = try Media.scratch()
        let logo = folder.appendingPathComponent("logo.png").path
        try Shell.check("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "color=red:s=64x32", "-frames:v", "1", logo])
        let output = folder.appendingPathComponent("marked.mp4").path
        let settings = #"{"filters": {"video": {"watermark": {"upload": "\#(logo)", "position": "topLeft", "margin": 0}}}}"#
        let run = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), output, "--settings", settings])
        #expect(run.status == 0, "\(run.stderr)")
        let corner = try Probe.meanColor(output, x: 8, y: 8, width: 32, height: 16)
        #expect(corner[0] > 200 && corner[1] < 60 && corner[2] < 60, "the red image is in the top left corner: \(corner)")
        let missing = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), folder.appendingPathComponent("o.mp4").path,
                                                  "--settings", #"{"filters": {"video": {"watermark": {"upload": "abc123"}}}}"#])
        #expect(missing.status == 2 && missing.stderr.contains("abc123 is not a file this can read"), "\(missing.stderr)")
        #expect(Media.files(in: folder) == ["logo.png", "marked.mp4"])
    }

    /// Paths that would go wrong are refused before any work (exit 2, nothing written): the output being the input
    /// replaced the source with its transcode; a folder where a file goes, or anything but an empty folder where a
    /// folder goes, failed only when the finished output was put in place. Two presets named at once are refused.
    @Test func pathsThatWouldGoWrongAreRefusedFirst() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("in.mp4").path
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: input)
        let original = try Data(contentsOf: URL(fileURLWithPath: input))
        let existing = folder.appendingPathComponent("taken")
        try FileManager.default.createDirectory(at: existing, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: existing.appendingPathComponent("notes.txt"))
        for (arguments, message) in [([input, input], "is the input"),
                                     ([input, folder.appendingPathComponent("./in.mp4").path], "is the input"),
                                     ([input, existing.path], "is a folder"),
                                     ([input, existing.path + "/"], "exists"),
                                     ([input, existing.path, "--settings", #"{"container": "hls"}"#], "exists"),
                                     ([input, folder.appendingPathComponent("o.mp4").path, "--preset", "480p", "--settings", #"{"preset": "1080p"}"#],
                                      "name two presets")] {
            let run = try Shell.run(Binary.path, ["transcode"] + arguments + ["--progress", "json"])
            #expect(run.status == 2 && run.stderr.contains(message) && run.stdout.isEmpty, "\(arguments): \(run.status) \(run.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: input)) == original)
        #expect(Media.files(in: folder) == ["in.mp4", "taken"], "\(Media.files(in: folder))")
        #expect(Media.files(in: existing) == ["notes.txt"])
        let same = try Shell.run(Binary.path, ["transcode", input, folder.appendingPathComponent("o.mp4").path, "--preset", "480p",
                                               "--settings", #"{"preset": "480p", "audio": null}"#])
        #expect(same.status == 0, "the same preset twice is one: \(same.stderr)")
    }

    /// The output is written beside its path and renamed onto it: a pipe or device there (`/dev/null` as root)
    /// was replaced by a regular file, and a link by the file, its target left as it was. A pipe is refused; a link
    /// is written through; a link to nothing is refused.
    @Test func anOutputThatIsNotAFileIsNeitherReplacedNorItsLinkCut() throws {
        let folder = try Media.scratch()
        let pipe = folder.appendingPathComponent("pipe.mp4").path
        #expect(try Shell.run("mkfifo", [pipe]).status == 0)
        let refused = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), pipe, "--progress", "none"])
        var status = stat()
        #expect(refused.status == 2 && refused.stderr.contains("is not a regular file"), "\(refused.status) \(refused.stderr)")
        #expect(lstat(pipe, &status) == 0 && (status.st_mode & S_IFMT) == S_IFIFO, "the pipe is still a pipe")

        let target = folder.appendingPathComponent("real.mp4").path, link = folder.appendingPathComponent("link.mp4").path
        try Data("old".utf8).write(to: URL(fileURLWithPath: target))
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        let through = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), link, "--preset", "480p", "--progress", "none"])
        #expect(through.status == 0, "\(through.stderr)")
        #expect(lstat(link, &status) == 0 && (status.st_mode & S_IFMT) == S_IFLNK, "the link is still a link")
        #expect(try Probe.read(target).video?.height == 360, "the link's target holds the transcode")
        #expect(Media.files(in: folder).sorted() == ["link.mp4", "pipe.mp4", "real.mp4"], "\(Media.files(in: folder))")

        let dangling = folder.appendingPathComponent("nowhere.mp4").path
        try FileManager.default.createSymbolicLink(atPath: dangling, withDestinationPath: folder.appendingPathComponent("gone/x.mp4").path)
        let nothing = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), dangling, "--progress", "none"])
        #expect(nothing.status == 2 && nothing.stderr.contains("a link to nothing"), "\(nothing.status) \(nothing.stderr)")
    }

    /// A checkpoint in the output's place (the output folder itself, a folder inside it, the output file's path) is
    /// refused before any work: the output is renamed into place last, which then failed on the checkpoint there
    /// (a whole transcode lost, and the rerun refused because the output's path existed).
    @Test func aCheckpointInTheOutputsPlaceIsRefusedFirst() throws {
        let folder = try Media.scratch()
        let ladder = folder.appendingPathComponent("ladder").path
        let linked = folder.appendingPathComponent("link").path
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: folder.path)
        for (output, checkpoint) in [(ladder + "/", ladder), (ladder, ladder + "/work"), (folder.appendingPathComponent("a.mp4").path,
                                                                                        folder.appendingPathComponent("a.mp4").path),
                                     (ladder, folder.path + "/./ladder/../ladder/work"), (ladder, linked + "/ladder/work")] {
            let settings = output.hasSuffix("a.mp4") ? "{}" : #"{"container": "hls"}"#
            let run = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), output, "--settings", settings,
                                                  "--checkpoint", checkpoint, "--progress", "none"])
            #expect(run.status == 2 && run.stderr.contains("in the output's place"), "\(output) with \(checkpoint): \(run.status) \(run.stderr)")
        }
        #expect(Media.files(in: folder) == ["link"], "nothing made: \(Media.files(in: folder))")
    }

    /// A checkpoint folder given on the command line that is someone's (a web project's `manifest.json`) is
    /// refused, and a run that needs no checkpoint (copied tracks) leaves it as it was: its manifest was
    /// overwritten, its `stills/` emptied, and both removed at the end.
    @Test func someonesFolderGivenAsTheCheckpointIsLeftAlone() throws {
        let folder = try Media.scratch()
        let project = folder.appendingPathComponent("site")
        try FileManager.default.createDirectory(at: project.appendingPathComponent("stills"), withIntermediateDirectories: true)
        let files = ["manifest.json": #"{"name": "My app", "icons": []}"#, "index.html": "<p>hi</p>", "stills/logo.png": "png"]
        for (name, text) in files { try Data(text.utf8).write(to: project.appendingPathComponent(name)) }
        let encode = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), folder.appendingPathComponent("a.mp4").path,
                                                 "--checkpoint", project.path])
        #expect(encode.status == 1 && encode.stderr.contains("invalid_checkpoint"), "\(encode.status) \(encode.stderr)")
        try FileManager.default.removeItem(at: project.appendingPathComponent("index.html"))
        let copy = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), folder.appendingPathComponent("b.mp4").path,
                                               "--settings", #"{"video": "copy", "audio": "copy"}"#, "--checkpoint", project.path])
        #expect(copy.status == 0, "\(copy.stderr)")
        for (name, text) in files where name != "index.html" {
            #expect((try? String(contentsOf: project.appendingPathComponent(name), encoding: .utf8)) == text, "\(name)")
        }
        // A folder of nothing but `stills/` (a name common in video work) or `ladder/`: no checkpoint makes those
        // before its manifest, so it is no checkpoint killed early; its pictures were removed, then the folder.
        for own in ["stills", "ladder"] {
            let shoot = folder.appendingPathComponent("shoot-\(own)")
            try FileManager.default.createDirectory(at: shoot.appendingPathComponent(own), withIntermediateDirectories: true)
            let photo = shoot.appendingPathComponent(own + "/take1.jpg")
            try Data("jpeg".utf8).write(to: photo)
            let refused = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), folder.appendingPathComponent("c-\(own).mp4").path,
                                                      "--checkpoint", shoot.path])
            #expect(refused.status == 1 && refused.stderr.contains("invalid_checkpoint"), "\(own): \(refused.status) \(refused.stderr)")
            let copied = try Shell.run(Binary.path, ["transcode", try Media.path(.standard), folder.appendingPathComponent("d-\(own).mp4").path,
                                                     "--settings", #"{"video": "copy", "audio": "copy"}"#, "--checkpoint", shoot.path])
            #expect(copied.status == 0, "\(copied.stderr)")
            #expect((try? String(contentsOf: photo, encoding: .utf8)) == "jpeg", "\(own)/take1.jpg is kept")
            #expect(Media.files(in: shoot) == [own] && Media.files(in: shoot.appendingPathComponent(own)) == ["take1.jpg"],
                    "nothing else made there: \(Media.files(in: shoot))")
            #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("c-\(own).mp4").path), "no output of the refused run")
        }
    }

    /// Starts a slow transcode of the long clip into `output` and waits until its temporary file is in the output's
    /// folder (which must be empty before), so that a signal sent now finds work to stop and a file to remove.
    /// `ignoring`: the signals it is started ignoring (by a shell's `trap ""`, as `nohup` does for SIGHUP).
    private func slowTranscodeUnderWay(to output: String, ignoring: String? = nil) throws -> Process {
        let folder = URL(fileURLWithPath: output).deletingLastPathComponent()
        let process = Process()
        let arguments = ["transcode", try Media.path(.long), output, "--settings", #"{"video": {"preset": "slow"}}"#]
        if let ignoring {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "trap '' \(ignoring); exec \"$0\" \"$@\"", Binary.path] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: Binary.path)
            process.arguments = arguments
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try Shell.launch(process)
        let deadline = Date().addingTimeInterval(20)
        while Media.files(in: folder).isEmpty && Date() < deadline { usleep(20_000) }
        #expect(!Media.files(in: folder).isEmpty)
        return process
    }

    /// A hang-up (a closed terminal, a dropped ssh session) stops a transcode as Ctrl-C does, and a reader of the
    /// progress that goes away (`| head -1`) does not stop it at all: both killed the process, leaving `.partial`.
    @Test func aHangUpCancelsCleanlyAndAGoneReaderIsNoFailure() throws {
        let folder = try Media.scratch()
        let hungUp = try slowTranscodeUnderWay(to: folder.appendingPathComponent("h.mp4").path)
        kill(hungUp.processIdentifier, SIGHUP)
        hungUp.waitUntilExit()
        #expect(hungUp.terminationReason == .exit && hungUp.terminationStatus == 130, "\(hungUp.terminationReason.rawValue) \(hungUp.terminationStatus)")
        #expect(Media.files(in: folder).isEmpty, "\(Media.files(in: folder))")
        // Started ignoring hang-ups and interrupts (`nohup transcoderd … &`), it goes on through both: they stopped it,
        // the terminal's closing a run meant to outlive it. A SIGTERM still stops it.
        let detached = try slowTranscodeUnderWay(to: folder.appendingPathComponent("d.mp4").path, ignoring: "HUP INT")
        kill(detached.processIdentifier, SIGHUP)
        kill(detached.processIdentifier, SIGINT)
        usleep(1_500_000)
        #expect(detached.isRunning, "stopped by a signal it was started ignoring: \(detached.terminationStatus)")
        kill(detached.processIdentifier, SIGTERM)
        detached.waitUntilExit()
        #expect(detached.terminationReason == .exit && detached.terminationStatus == 130)
        #expect(Media.files(in: folder).isEmpty, "\(Media.files(in: folder))")

        let reader = Process()
        let pipe = Pipe()
        reader.executableURL = URL(fileURLWithPath: Binary.path)
        reader.arguments = ["transcode", try Media.path(.long), folder.appendingPathComponent("r.mp4").path, "--progress", "json"]
        reader.standardOutput = pipe
        reader.standardError = FileHandle.nullDevice
        // Our read end is ours alone: a child started meanwhile holding it would keep the pipe read.
        _ = fcntl(pipe.fileHandleForReading.fileDescriptor, F_SETFD, FD_CLOEXEC)
        try Shell.launch(reader)
        var first = Data()
        while !first.contains(UInt8(ascii: "\n")) {
            let chunk = pipe.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            first.append(chunk)
        }
        try pipe.fileHandleForReading.close()
        reader.waitUntilExit()
        #expect(first.count > 10, "a progress line came")
        #expect(reader.terminationReason == .exit && reader.terminationStatus == 0, "\(reader.terminationReason.rawValue) \(reader.terminationStatus)")
        #expect(Media.files(in: folder) == ["r.mp4"], "\(Media.files(in: folder))")
    }

    @Test func interruptDeletesThePartialOutput() throws {
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent("o.mp4").path
        let process = try slowTranscodeUnderWay(to: output)
        process.interrupt()
        process.waitUntilExit()
        #expect(process.terminationStatus == 130)
        #expect(Media.files(in: folder).isEmpty)
    }
}
