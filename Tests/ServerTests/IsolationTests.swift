import Foundation
import Isolation
import Jobs
import Pipeline
import Locks
import Logging
import Testing
import TestSupport

/// Each job runs in a sandboxed child process: a child that crashes, stalls or runs out of memory fails (or retries)
/// its own job, and the server answers throughout. Real servers, real children, real signals.
@Suite struct IsolationTests {
    /// The child working on a job: the one with a file of the data directory's outputs open (spare children, started
    /// in advance and waiting for a request, have only their pipes).
    private static func workingChild(of server: TestServer) -> pid_t? {
        // A transcode writes its checkpoint (then its output folder); a probe writes neither.
        let written = ["outputs", "checkpoints"].map { server.data.appendingPathComponent($0).path }
        return server.jobChildren.first { child in
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(child)/fd")) ?? []
            return fds.contains { fd in
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(child)/fd/\(fd)")) ?? ""
                return written.contains { target.hasPrefix($0) }
            }
        }
    }

    /// Waits for the job to be running with progress and returns its child.
    private static func runningChild(_ server: TestServer, job: String, attempt: Int) throws -> pid_t? {
        var child: pid_t?
        _ = try eventually(60) {
            let object = try server.json("/v1/jobs/\(job)").object
            let progress = (object["progress"] as? [String: Any])?["presentationTime"] as? Double ?? 0
            guard object["state"] as? String == "running", object["attempts"] as? Int == attempt, progress > 0 else { return false }
            child = workingChild(of: server)
            return child != nil
        }
        return child
    }

    /// Polls `/healthz` and the job from two threads while `body` runs; every answer must be a 200, and the server
    /// must never be slow to both at once for a second (nor to one for three): a server that waited on a dying child
    /// would stall for its lifetime, every request meanwhile. One thread alone slow is the test's own (other suites'
    /// transcodes share the two cores: 250 ms failed CI once at 299 ms, one poll in hundreds).
    private static func whilePolling(_ server: TestServer, job: String, _ body: () throws -> Void) throws {
        let stop = LockedValue(false)
        // Each poll's start and length, by poller.
        let polls = LockedValue<[[(start: Date, seconds: Double)]]>([[], []])
        let failures = LockedValue<[String]>([])
        let done = DispatchGroup()
        let port = server.port
        for poller in 0..<2 {
            done.enter()
            NamedThread.start("poller-\(poller)") {
                if poller == 1 { usleep(10_000) }
                while !stop.withLock({ $0 }) {
                    for path in ["/healthz", "/v1/jobs/\(job)"] {
                        let started = Date()
                        let answer = (try? RawClient(port: port)).map { client in
                            client.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                            return client.read(timeout: 5)
                        } ?? "no connection"
                        polls.withLock { $0[poller].append((started, Date().timeIntervalSince(started))) }
                        if !answer.hasPrefix("HTTP/1.1 200") { failures.withLock { $0.append("\(path): \(answer.prefix(80))") } }
                    }
                    usleep(20_000)
                }
                done.leave()
            }
        }
        defer {
            stop.withLock { $0 = true }
            done.wait()
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(3))")
            let (first, second) = polls.withLock { ($0[0], $0[1]) }
            let slow = { (polls: [(start: Date, seconds: Double)]) in polls.filter { $0.seconds >= 1 } }
            // Slow to both at once: a slow poll of each whose times overlap.
            let both = slow(first).contains { one in
                slow(second).contains { other in
                    one.start < other.start.addingTimeInterval(other.seconds) && other.start < one.start.addingTimeInterval(one.seconds)
                }
            }
            let longest = (first + second).map(\.seconds).max() ?? 0
            #expect(!first.isEmpty && !second.isEmpty && !both && longest < 3,
                    "slow to both pollers at once: \(both), the slowest poll \(longest) s")
        }
        try body()
    }

    private static let slowSettings = #"settings={"video": {"preset": "veryslow"}}"#

    @Test(arguments: [SIGSEGV, SIGKILL])
    func aChildThatDiesIsRunAgainThenFailsNamingTheSignal(signal: Int32) throws {
        let server = try TestServer(["--max-attempts", "2"])
        let name = ChildProcess.Termination.name(of: signal)
        let retried = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.standard)), "-F", Self.slowSettings])
            .object["id"] as? String)
        try Self.whilePolling(server, job: retried) {
            let child = try #require(try Self.runningChild(server, job: retried, attempt: 1))
            kill(child, signal)
            // Run again, with one more attempt, in a new child; it succeeds.
            #expect(try eventually(120) { try server.json("/v1/jobs/\(retried)").object["state"] as? String == "succeeded" })
        }
        let done = try server.json("/v1/jobs/\(retried)").object
        #expect(done["attempts"] as? Int == 2, "\(done)")
        #expect(server.log.split(separator: "\n").contains { $0.contains("the job's process crashed; it runs again") && $0.contains(name) },
                "the crash is logged with its signal")

        let failed = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.standard)), "-F", Self.slowSettings])
            .object["id"] as? String)
        for attempt in 1...2 {
            let child = try #require(try Self.runningChild(server, job: failed, attempt: attempt))
            kill(child, signal)
        }
        #expect(try eventually(30) { try server.json("/v1/jobs/\(failed)").object["state"] as? String == "failed" })
        let error = try #require(try server.json("/v1/jobs/\(failed)").object["error"] as? [String: Any])
        #expect(error["code"] as? String == "worker_crashed")
        #expect((error["message"] as? String)?.contains(name) == true, "\(error)")
        #expect(Media.files(in: server.data.appendingPathComponent("outputs")).allSatisfy { !$0.hasPrefix(failed) }, "no partial output left")
        #expect(try server.json("/healthz").status == 200)
    }

    @Test func aStoppedChildIsKilledAndItsJobFailsAsStalled() throws {
        let server = try TestServer(["--stall-timeout", "3"])
        let job = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.standard)), "-F", Self.slowSettings])
            .object["id"] as? String)
        let child = try #require(try Self.runningChild(server, job: job, attempt: 1))
        kill(child, SIGSTOP)
        let stopped = Date()
        #expect(try eventually(15) { try server.json("/v1/jobs/\(job)").object["state"] as? String == "failed" })
        let waited = Date().timeIntervalSince(stopped)
        #expect(waited < 6, "failed \(waited) s after the child stopped")
        let error = try server.json("/v1/jobs/\(job)").object["error"] as? [String: Any]
        #expect(error?["code"] as? String == "stalled")
        #expect(kill(child, 0) != 0 && errno == ESRCH, "the stopped child is gone")
        #expect(Self.workingChild(of: server) == nil, "no child works on anything")
    }

    @Test func aJobOverItsMemoryLimitFailsAloneAndRunsUnderTheDefault() throws {
        let source = try Media.scratch().appendingPathComponent("1080p.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=1920x1080:r=30:d=2", "-c:v", "libx264", "-preset", "ultrafast",
                          "-pix_fmt", "yuv420p", source])
        let limited = try TestServer(["--job-memory-mib", "256", "--workers", "2"])
        let big = try #require(try limited.json("/v1/jobs", ["-F", "file=@" + source]).object["id"] as? String)
        let small = try #require(try limited.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))]).object["id"] as? String)
        for id in [big, small] {
            #expect(try eventually(60) { ["succeeded", "failed"].contains(try limited.json("/v1/jobs/\(id)").object["state"] as? String ?? "") })
        }
        let failed = try limited.json("/v1/jobs/\(big)").object
        let error = try #require(failed["error"] as? [String: Any], "\(failed)")
        #expect(error["code"] as? String == "out_of_memory", "\(error)")
        #expect((error["message"] as? String)?.contains("256 MiB") == true && (error["message"] as? String)?.contains("--job-memory-mib") == true)
        #expect(failed["attempts"] as? Int == 1, "not retried: it would fail again")
        #expect(try limited.json("/v1/jobs/\(small)").object["state"] as? String == "succeeded", "the other job is unaffected")
        #expect(try limited.json("/healthz").status == 200)

        let roomy = try TestServer()
        let again = try #require(try roomy.json("/v1/jobs", ["-F", "file=@" + source]).object["id"] as? String)
        #expect(try eventually(60) { try roomy.json("/v1/jobs/\(again)").object["state"] as? String == "succeeded" })
    }

    /// The server as PID 1 of its PID namespace (a container without an init, as the compose files run it) waits for
    /// the processes left to it: here a shell that started `sleep` and ended at once, as a job's child that forked
    /// would. Before, each stayed a zombie for as long as the server ran. (Root only: a PID namespace needs it.)
    @Test(.enabled(if: getuid() == 0, "a PID namespace needs root"))
    func theServerAsInitReapsWhatIsLeftToIt() throws {
        let server = try TestServer([], wrapper: ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"])
        defer {
            kill(server.process.processIdentifier, SIGKILL) // unshare --kill-child: the namespace goes with it
            server.process.waitUntilExit()
        }
        let pid = try #require(server.serverPID)
        let left = try Shell.run("nsenter", ["--target", String(pid), "--pid", "--mount", "sh", "-c", "sleep 0.5 & echo $!"])
        #expect(left.status == 0, "\(left.stderr)")
        let inside = left.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // Zombies whose parent is the server, as seen from here.
        func zombies() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).filter { name in
                guard Int(name) != nil, let text = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                      let close = text.lastIndex(of: ")") else { return false }
                let fields = text[text.index(after: close)...].split(separator: " ")
                return fields.count >= 2 && fields[0] == "Z" && fields[1] == Substring(String(pid))
            }
        }
        #expect(!inside.isEmpty)
        usleep(1_500_000) // the sleep has ended by now
        #expect(eventually(5) { zombies().isEmpty }, "zombies of the server: \(zombies())")
        // Its own children (a job's, the spares) are still its to reap: a job runs as ever.
        let job = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.standard))]).object["id"] as? String)
        #expect(try eventually(60) { try server.json("/v1/jobs/\(job)").object["state"] as? String == "succeeded" })
    }

    /// A folder the request names that is not there (a checkpoint folder a newer claim of the job renamed away)
    /// gets no Landlock rule; the rest still holds. Before, Landlock was left off for the whole job: the child ran
    /// with every file the server can reach, and made the folder again where it pleased.
    @Test func aMissingFolderLeavesTheRestOfTheConfinementInForce() throws {
        let folder = try Media.scratch()
        let stage = folder.appendingPathComponent("stage")
        try FileManager.default.createDirectory(at: stage, withIntermediateDirectories: true)
        let missing = folder.appendingPathComponent("checkpoint").path
        var request = JobRequest(kind: .transcode, input: try Media.path(.standard), output: stage.appendingPathComponent("out.mp4").path,
                                 settings: .init())
        request.checkpoint = missing
        let file = folder.appendingPathComponent("request.json")
        try (try JSONEncoder().encode(request) + Data("\n".utf8)).write(to: file)
        let run = try Shell.run("/bin/sh", ["-c", "exec \"$0\" run-job < \"$1\"", Binary.path, file.path])
        #expect(!run.stderr.contains("Landlock"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: missing), "the child made a folder outside its rules")
        #expect(run.stdout.contains(#""code":"output_failed""#) && run.stdout.contains(missing), "\(run.stdout)")
    }

    @Test func theSandboxIsInForceAndRefusesTheNetworkAndOtherPrograms() throws {
        // In a session of its own, as the server starts it.
        let run = try Shell.run("setsid", ["--wait", Binary.path, "run-job", "--check", "--memory-mib", "512", "--nice", "7"])
        #expect(run.status == 0, "\(run.stderr)")
        let report = try JSONDecoder().decode(SandboxReport.self, from: Data(run.stdout.utf8))
        #expect(report.seccomp && report.noNewPrivileges && report.parentDeathSignal == "SIGKILL")
        #expect(report.dataBytes == 512 * 1024 * 1024 && report.coreBytes == 0 && report.nice == 7)
        // Its session's share of the CPU too, where sessions are scheduled as groups (a process's niceness then
        // counts only against its own session's: at 19 a job took as much as the whole server).
        if FileManager.default.fileExists(atPath: "/proc/self/autogroup") {
            #expect(report.autogroupNice == 7, "\(String(describing: report.autogroupNice))")
        }
        // Tried for real by the child under the filter; AF_UNIX shows the filter picks what it refuses.
        #expect(report.tried == ["socket(AF_INET)": "EPERM", "socket(AF_INET6)": "EPERM", "execve": "EPERM",
                                 "kill(parent)": "EPERM", "setsid": "EPERM", "setpgid": "EPERM", "open(/etc/hostname)": "EACCES",
                                 "socket(AF_UNIX)": "EPERM", "socketpair(AF_UNIX)": "allowed",
                                 "write(in its folder)": "allowed", "write(beside its folder)": "EACCES",
                                 "fcntl(F_SETOWN, parent)": "EPERM", "fcntl(F_SETOWN_EX, parent)": "EPERM",
                                 "ioctl(FIOSETOWN, parent)": "EPERM", "fcntl(F_SETOWN with high bits, parent)": "EPERM",
                                 "prlimit(parent, set)": "EPERM", "setpriority(parent)": "EPERM", "setpriority(own group)": "EPERM",
                                 "setpriority(self)": "allowed", "sched_setaffinity(parent)": "EPERM", "ioprio_set(parent)": "EPERM",
                                 "ioprio_set(own group)": "EPERM", "unshare(nothing)": "EPERM",
                                 "userfaultfd": "EPERM", "keyctl(session keyring)": "EPERM",
                                 "chmod(in its folder)": "EPERM", "chown(in its folder)": "EPERM", "utimensat(in its folder)": "EPERM",
                                 "truncate(in its folder)": "EPERM", "removexattr(in its folder)": "EPERM", "setxattrat(in its folder)": "EPERM",
                                 "fchmod(read-only descriptor)": "EPERM", "fchown(read-only descriptor)": "EPERM",
                                 "fsetxattr(read-only descriptor)": "EPERM", "openat2(in its folder)": "EPERM",
                                 "open(read-only, truncating)": "EPERM", "open(access mode 3, truncating)": "EPERM",
                                 "clone(CLONE_PARENT)": "EPERM", "clone(CLONE_NEWUSER)": "EPERM", "clone3": "ENOSYS",
                                 "shmget": "EPERM", "memfd_create": "EPERM", "mmap(shared, anonymous)": "EPERM"],
                "\(report.tried ?? [:])")
        // The filter's refusals, not the machine's: outside the sandbox (this process) the kernel allows them here.
        let unconfined = Sandbox.tryRefusedCalls()
        #expect(unconfined["userfaultfd"] == "allowed" && unconfined["keyctl(session keyring)"] == "allowed", "\(unconfined)")
        for call in ["shmget", "memfd_create", "mmap(shared, anonymous)"] {
            #expect(unconfined[call] == "allowed", "\(call): \(unconfined)")
        }
        // The kernel's own answer to flags it refuses: the filter never let the calls reach it.
        for call in ["clone(CLONE_PARENT)", "clone(CLONE_NEWUSER)", "clone3"] {
            #expect(unconfined[call] == String(cString: strerror(EINVAL)), "\(call): \(unconfined)")
        }
        // Nor Landlock's: a file's metadata changed by its path in the folder it may write in, confined but unfiltered
        // (the attribute, which the file does not have, fails otherwise).
        let metadata = Sandbox.tryConfinedWrites()
        for call in ["chmod", "chown", "utimensat", "truncate"] {
            #expect(metadata["\(call)(in its folder)"] == "allowed", "\(metadata)")
        }
        for call in ["fchmod(read-only descriptor)", "fchown(read-only descriptor)", "open(read-only, truncating)",
                     "open(access mode 3, truncating)", "openat2(in its folder)"] {
            #expect(metadata[call] == "allowed", "\(call): \(metadata)")
        }
        #expect(metadata["removexattr(in its folder)"] == "failed" && metadata["setxattrat(in its folder)"] == "failed"
                && metadata["fsetxattr(read-only descriptor)"] == "failed", "\(metadata)")
        // Whatever the server runs as (root here, in CI): the child keeps at most CAP_DAC_OVERRIDE.
        let kept: UInt64 = 0x2
        for set in [report.capabilities, report.permittedCapabilities] {
            let bits = try #require(set.flatMap { UInt64($0, radix: 16) }, "\(report)")
            #expect(bits & ~kept == 0, "capabilities \(set ?? "") left to the child")
        }
        #expect(report.capabilityError == nil && report.complete, "\(report)")
        #expect(report.landlock == true, "\(report.landlockError ?? "")")
        let server = try TestServer(["--job-memory-mib", "1024"])
        #expect(server.log.contains(#""message":"job sandbox","seccomp":"on""#), "\(server.log.prefix(600))")
        // The child a real job runs in is under the same protections, as the kernel reports them.
        let job = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.standard)), "-F", Self.slowSettings])
            .object["id"] as? String)
        let child = try #require(try Self.runningChild(server, job: job, attempt: 1))
        let status = try String(contentsOfFile: "/proc/\(child)/status", encoding: .utf8)
        #expect(status.contains("Seccomp:\t2") && status.contains("NoNewPrivs:\t1"), "\(status)")
        let effective = status.split(separator: "\n").first { $0.hasPrefix("CapEff:") }?.split(separator: "\t").last
        #expect(effective.flatMap { UInt64($0, radix: 16) }.map { $0 & ~kept == 0 } == true, "\(effective ?? "")")
        let limits = try String(contentsOfFile: "/proc/\(child)/limits", encoding: .utf8)
        let data = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max data size") })
        #expect(data.split(separator: " ", omittingEmptySubsequences: true).contains("\(1024 * 1024 * 1024)"), "\(data)")
        #expect(getsid(child) == child, "a session of its own")
        _ = try server.json("/v1/jobs/\(job)/cancel", ["-X", "POST"])
    }

    /// The child writes only in a folder the server made for its job (Landlock lets it write in its output's parent
    /// folder, and nowhere else in `outputs/`, where other jobs' folders are); the server moves the result into place.
    @Test func aChildWritesItsOutputInAStageOfItsJobsOwn() throws {
        let server = try TestServer()
        let outputs = server.data.appendingPathComponent("outputs")
        let slow = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.standard)), "-F", Self.slowSettings])
            .object["id"] as? String)
        _ = try #require(try Self.runningChild(server, job: slow, attempt: 1))
        let stages = Media.files(in: outputs)
        #expect(stages.count == 1 && stages.allSatisfy { $0.hasPrefix(slow + ".") && $0.hasSuffix(".partial") }, "\(stages)")
        let inside = stages.first.map { Media.files(in: outputs.appendingPathComponent($0)) } ?? []
        #expect(inside.count == 1 && inside.allSatisfy { $0.hasPrefix("out.") && $0.hasSuffix(".partial") },
                "the child's own partial folder, alone in the stage: \(inside)")
        _ = try server.json("/v1/jobs/\(slow)/cancel", ["-X", "POST"])
        #expect(eventually(10) { Media.files(in: outputs).isEmpty }, "a cancel leaves no stage: \(Media.files(in: outputs))")

        let job = try #require(try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.audioOnly))]).object["id"] as? String)
        #expect(try eventually(60) { try server.json("/v1/jobs/\(job)").object["state"] as? String == "succeeded" })
        #expect(Media.files(in: outputs) == [job], "the output in place, the stage gone")
        #expect(try server.curl("/v1/jobs/\(job)/output", ["-o", "/dev/null"]).status == 200)
    }

    /// A job reading an input that never comes (a named pipe that stays open and silent) stops within a second of
    /// SIGTERM: the signal interrupts the read, and FFmpeg's interrupt callback sees the cancellation.
    @Test func aChildBlockedInAReadStopsWithinASecondOfSIGTERM() throws {
        let folder = try Media.scratch()
        let fifo = folder.appendingPathComponent("input.ts").path
        #expect(mkfifo(fifo, 0o600) == 0)
        // Held open for writing (O_RDWR does not wait for a reader), with the start of a real stream and then nothing.
        let writer = open(fifo, O_RDWR)
        defer { close(writer) }
        let start = try Data(contentsOf: URL(fileURLWithPath: try Media.path(.lateAudio))).prefix(20_000)
        _ = start.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }
        let output = folder.appendingPathComponent("out.mp4").path
        let child = try ChildProcess(executable: Binary.path, arguments: ["run-job"])
        let request = JobRequest(kind: .transcode, input: fifo, output: output, settings: .init())
        try child.send(try JSONEncoder().encode(request) + Data("\n".utf8))
        child.closeInput()
        // Blocked in a read of the pipe: it has the pipe open (after its SIGTERM handler is in place) and sleeps. A
        // fixed second was not always enough for a child to load its libraries on a busy machine.
        #expect(eventually(20) { Self.hasOpen(fifo, child.pid) && Self.state(of: child.pid) == "S" }, "the child sleeps in a read")
        #expect(getsid(child.pid) == child.pid, "it leads a session of its own: a Ctrl-C to ours does not reach it")
        // A SIGTERM from anyone but its parent (a service manager signalling every process) is not a cancel.
        try Shell.check("kill", ["-TERM", String(child.pid)])
        usleep(3_000_000) // as long as a real stop may take (below)
        #expect(child.isRunning && Self.state(of: child.pid) == "S", "a stranger's SIGTERM changes nothing")
        let asked = Date()
        child.signal(SIGTERM)
        let lines = LockedValue<[String]>([])
        let reader = DispatchSemaphore(value: 0)
        NamedThread.start("reader") {
            while let line = child.readLine() { lines.withLock { $0.append(line) } }
            reader.signal()
        }
        let answered = reader.wait(timeout: .now() + 5) == .success
        if !answered { child.signal(SIGKILL) }
        #expect(answered, "the child did not stop")
        let termination = child.wait()
        // Within a second but for a busy machine's process teardown; one that missed the signal waits out the 5 s
        // above and is killed.
        #expect(Date().timeIntervalSince(asked) < 3.0, "stopped \(Date().timeIntervalSince(asked)) s after SIGTERM")
        #expect(termination == .exited(0))
        #expect(lines.withLock { $0 }.last?.contains(#""code":"canceled""#) == true, "\(lines.withLock { $0 })")
        #expect(Media.files(in: folder) == ["input.ts"], "no partial output: \(Media.files(in: folder))")
    }

    /// A child's result leaves out the folder's file list, which the server makes itself: a long ladder's list (a
    /// line per segment per rendition) passed the line limit, and a child was killed after its work was done.
    @Test func aChildsResultLeavesTheFileListToTheServer() throws {
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent("ladder").path
        let child = try ChildProcess(executable: Binary.path, arguments: ["run-job"])
        let settings = try TranscodeSettings.parse(Data(#"{"container": "hls", "segmentDuration": 1, "renditions": [{"video": {"height": 180}}]}"#.utf8))
        let request = JobRequest(kind: .transcode, input: try Media.path(.standard), output: output, settings: settings)
        try child.send(try JSONEncoder().encode(request) + Data("\n".utf8))
        child.closeInput()
        var last: String?
        while let line = child.readLine() { last = line }
        #expect(child.wait() == .exited(0))
        let answer = try JSONSerialization.jsonObject(with: Data(try #require(last).utf8)) as? [String: Any]
        let result = try #require(answer?["result"] as? [String: Any], "\(last ?? "")")
        #expect(result["files"] == nil && (result["tracks"] as? [Any])?.isEmpty == false, "\(result.keys.sorted())")
        #expect(Media.files(in: URL(fileURLWithPath: output)).contains("master.m3u8"))
    }

    /// Whether the process has `path` open (a descriptor of its /proc links to it).
    private static func hasOpen(_ path: String, _ pid: pid_t) -> Bool {
        let folder = "/proc/\(pid)/fd"
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return descriptors.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "\(folder)/\($0)")) == path }
    }

    /// A process's state letter from /proc (S: sleeping, R: running, T: stopped, Z: zombie).
    private static func state(of pid: pid_t) -> String {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        return stat.split(separator: ")").last?.split(separator: " ").first.map(String.init) ?? "?"
    }
}

/// A probe, like a job, runs in a child; one that never ends (a silent named pipe stands in for a demuxer that loops)
/// is killed at its deadline instead of holding a request and a probe thread forever.
@Suite struct ProbeDeadlineTests {
    /// A child killed by SIGKILL that the server did not send (the kernel's out-of-memory killer when the machine
    /// or its container runs short, or someone outside) is not blamed on the job's memory limit, which only makes
    /// allocations fail: it is a crash, retried, whatever the child used last; for a probe, the server's failure
    /// (`worker_unavailable`: the API answers 503 and a tus upload keeps its bytes), where it refused the file as
    /// not media (422, and a completing tus upload's bytes deleted). And a child the server kills for a
    /// line too long fails as broken (`worker_failed`), not as a crash to retry. Stub children: scripts that say
    /// what a job's child says, then die as such a child would.
    @Test func aKillFromOutsideIsACrashAndAKillFromTheServerIsNamed() throws {
        let folder = try Media.scratch()
        let policy = SandboxPolicy(dataBytes: 512 * 1024 * 1024)
        let progress = #"{"progress": {"presentationTime": 1, "duration": 10, "framesEncoded": 30, "elapsed": 1}, "dataBytes": \#(policy.dataBytes * 9 / 10)}"#
        func stub(_ name: String, _ body: String) throws -> String {
            let path = folder.appendingPathComponent(name).path
            try Shell.writeScript("#!/bin/sh\nulimit -c 0\nread request\n\(body)\n", to: path)
            return path
        }
        let outside = try stub("killed.sh", "echo '\(progress)'\nkill -9 $$")
        let killed = try #require(throws: MediaError.self) { try ChildProcessRunner(executable: outside, policy: policy).probe(path: "/dev/null") }
        #expect(killed.code == "worker_unavailable" && killed.message.contains("from outside the server"), "\(killed)")
        let crashed = try stub("crashed.sh", "echo '\(progress)'\nkill -SEGV $$")
        let full = try #require(throws: MediaError.self) { try ChildProcessRunner(executable: crashed, policy: policy).probe(path: "/dev/null") }
        #expect(full.code == "out_of_memory", "a crash near its limit is still the limit's: \(full)")
        // Near the limit once, then far below it when it crashed: a crash (retried), not the limit's.
        let lower = #"{"progress": {"presentationTime": 2, "duration": 10, "framesEncoded": 60, "elapsed": 2}, "dataBytes": 1048576}"#
        let later = try stub("crashed-later.sh", "echo '\(progress)'\necho '\(lower)'\nkill -SEGV $$")
        let crash = try #require(throws: MediaError.self) { try ChildProcessRunner(executable: later, policy: policy).probe(path: "/dev/null") }
        #expect(crash.code == "worker_crashed", "\(crash)")
        let flooding = try stub("flood.sh", "head -c 20000000 /dev/zero\nsleep 30")
        let broken = try #require(throws: MediaError.self) { try ChildProcessRunner(executable: flooding, policy: policy).probe(path: "/dev/null") }
        #expect(broken.code == "worker_failed", "\(broken)")
    }

    /// A child's error becomes its job's only within bounds: a child taken over by a hostile file wrote a message of
    /// megabytes (into the job's row, every listing, event and webhook) or named a failure of the server's own
    /// (`store_error`: the job ran again). Its message is cut, its code kept only if it may give it.
    @Test func aChildsErrorIsBoundedAndCannotNameTheServersFailures() throws {
        let folder = try Media.scratch()
        func answering(_ code: String, _ message: String) throws -> MediaError {
            let path = folder.appendingPathComponent("\(code.hashValue).sh").path
            let text = String(decoding: try JSONEncoder().encode(JobMessage(error: .init(code: code, message: message))), as: UTF8.self)
            try Shell.writeScript("#!/bin/sh\nread request\nprintf '%s\\n' '\(text)'\n", to: path)
            return try #require(throws: MediaError.self) { try ChildProcessRunner(executable: path).probe(path: "/dev/null") }
        }
        let long = String(repeating: "é", count: 300_000)
        let forged = try answering("store_error", long)
        #expect(forged.code == "worker_failed", "\(forged.code)")
        #expect(forged.message.utf8.count <= 4096 + 200 && forged.message.hasSuffix("é…"), "\(forged.message.utf8.count) bytes")
        let odd = try answering("Bad Code\u{1B}", "x")
        #expect(odd.code == "worker_failed" && odd.message.contains("x"), "\(odd)")
        let own = try answering("unsupported_codec", long)
        #expect(own.code == "unsupported_codec" && own.message.utf8.count <= 4096, "\(own.code) \(own.message.utf8.count)")
        // Control characters shown as U+FFFD (a NUL cannot be stored: the job's end was never recorded).
        let controls = try answering("unsupported_codec", "a\u{0}b\u{1B}[31mc\nd")
        #expect(controls.message == "a\u{FFFD}b\u{FFFD}[31mc\nd", "\(controls.message.debugDescription)")
        let short = try answering("timestamps_invalid", "The video goes back in time.")
        #expect(short.code == "timestamps_invalid" && short.message == "The video goes back in time.")
    }

    /// A child that answers and then does not exit (a library's clean-up at exit, threads still running) is killed
    /// after a moment and its answer kept: before, it was waited for until its deadline (a probe) or the watchdog (a
    /// job), and its finished work was lost.
    @Test func aChildThatAnswersButDoesNotExitIsEndedAndItsAnswerKept() throws {
        let folder = try Media.scratch()
        let tracks = try ChildProcessRunner(executable: Binary.path).probe(path: try Media.path(.audioOnly))
        let answer = String(decoding: try JSONEncoder().encode(JobMessage(tracks: tracks)), as: UTF8.self)
        let path = folder.appendingPathComponent("lingers.sh").path
        try Shell.writeScript("#!/bin/sh\nread request\necho '\(answer)'\nexec sleep 60\n", to: path)
        var runner = ChildProcessRunner(executable: path)
        runner.probeTimeout = 20
        let started = Date()
        let found = try runner.probe(path: "/dev/null")
        #expect(found == tracks)
        #expect(Date().timeIntervalSince(started) < 10, "ended after its answer, not at the deadline: \(Date().timeIntervalSince(started)) s")
    }

    /// The server logs what a job's child writes on its standard error as a field of a line of its own, with the
    /// child's task: it went to the server's standard error as it was, so a child taken over by a hostile file wrote
    /// lines that read as the server's own.
    @Test func whatAChildWritesOnItsStandardErrorIsLoggedAsAField() throws {
        let folder = try Media.scratch()
        let tracks = try ChildProcessRunner(executable: Binary.path).probe(path: try Media.path(.audioOnly))
        let answer = String(decoding: try JSONEncoder().encode(JobMessage(tracks: tracks)), as: UTF8.self)
        let forged = #"{"time":"2026-01-01T00:00:00.000Z","level":"error","message":"forged"}"#
        let path = folder.appendingPathComponent("stderr.sh").path
        try Shell.writeScript("#!/bin/sh\nread request\necho '\(forged)' >&2\necho '\(answer)'\n", to: path)
        let logged = LockedValue<[String]>([])
        let logger = Logger { line in
            logged.withLock { $0.append(line) }
            logged.notifyAll()
        }
        #expect(try ChildProcessRunner(executable: path, logger: logger).probe(path: "/dev/null") == tracks)
        #expect(logged.wait(timeout: 10) { !$0.isEmpty }, "nothing logged")
        let lines = logged.withLock { $0 }
        try #require(lines.count == 1, "\(lines)")
        let entry = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(entry["level"] as? String == "warning" && entry["message"] as? String == "a job process wrote on its standard error", "\(entry)")
        #expect(entry["task"] as? String == "probe" && entry["text"] as? String == forged, "\(entry)")
    }

    /// A child that answers and then crashes on its way out (a library's clean-up at exit) has finished: its answer
    /// stands. It was thrown away, and a job ran again to the same crash, then failed as crashed.
    @Test func aChildThatCrashesAfterItsAnswerHasItsAnswerKept() throws {
        let folder = try Media.scratch()
        let tracks = try ChildProcessRunner(executable: Binary.path).probe(path: try Media.path(.audioOnly))
        let answer = String(decoding: try JSONEncoder().encode(JobMessage(tracks: tracks)), as: UTF8.self)
        for (name, end) in [("segv.sh", "kill -SEGV $$"), ("fails.sh", "exit 3")] {
            let path = folder.appendingPathComponent(name).path
            try Shell.writeScript("#!/bin/sh\nulimit -c 0\nread request\necho '\(answer)'\n\(end)\n", to: path)
            #expect(try ChildProcessRunner(executable: path).probe(path: "/dev/null") == tracks, "\(name)")
        }
    }

    @Test func aProbeThatNeverEndsIsGivenUpAtItsDeadline() throws {
        let fifo = try Media.scratch().appendingPathComponent("silent.ts").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let writer = open(fifo, O_RDWR)
        defer { close(writer) }
        var runner = ChildProcessRunner(executable: Binary.path)
        runner.probeTimeout = 1
        let started = Date()
        let error = try #require(throws: MediaError.self) { try runner.probe(path: fifo) }
        #expect(error.code == "probe_timeout", "\(error)")
        #expect(Date().timeIntervalSince(started) < 5)
        let tracks = try ChildProcessRunner(executable: Binary.path).probe(path: try Media.path(.audioOnly))
        #expect(tracks.map(\.mediaType) == [.audio], "a real file is probed in a child")
    }
}
