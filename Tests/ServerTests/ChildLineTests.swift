import Foundation
import Isolation
import Locks
import Testing
import TestSupport

/// A job's child speaks in lines on its standard output. The parent must get every line whole and in order however
/// the pipe cuts them (a burst of many short lines in one read, one long line over many reads), and must stop a
/// child whose line runs past the limit instead of holding it all in memory. A real child: Python writing to a pipe.
@Suite struct ChildLineTests {
    @Test func everyLineComesWholeAndInOrderAndAnOverlongOneKillsTheChild() throws {
        let script = """
        import sys, time
        out = sys.stdout.buffer
        out.write(b"".join(b"line-%d\\n" % i for i in range(50000)))
        out.flush()
        for i in range(3):
            out.write(b"x" * 1000000)
            out.flush()
            time.sleep(0.05)
        out.write(b"\\nafter\\n")
        out.flush()
        out.write(b"y" * (\(ChildProcess.maxLineBytes) + 1000000))
        out.flush()
        time.sleep(30)
        """
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", script])
        let lines = LockedValue<[String]>([])
        let done = DispatchSemaphore(value: 0)
        NamedThread.start("reader") {
            while let line = child.readLine() { lines.withLock { $0.append(line) } }
            done.signal()
        }
        let ended = done.wait(timeout: .now() + 20) == .success
        if !ended { child.signal(SIGKILL) }
        #expect(ended, "the reader did not return at the overlong line")
        let termination = child.wait()
        let read = lines.withLock { $0 }
        try #require(read.count == 50002, "\(read.count) lines")
        #expect(read.prefix(50000) == ArraySlice((0..<50000).map { "line-\($0)" }), "the burst of short lines")
        #expect(read[50000] == String(repeating: "x", count: 3_000_000), "the long line read in pieces")
        #expect(read[50001] == "after")
        #expect(termination == .signaled(SIGKILL), "the child is killed at the overlong line: \(termination)")
    }

    /// A process may name itself with any bytes (`prctl(PR_SET_NAME)`); its parent and state are still read, so
    /// the orphan reaper finds its zombie. Read as UTF-8 text, a process named "\xff\xfe" was nobody's.
    @Test func aProcessNamedWithBytesThatAreNoTextIsStillRead() throws {
        let script = "import ctypes, sys, time; assert ctypes.CDLL(None).prctl(15, b'\\xff\\xfe(x) ', 0, 0, 0) == 0; "
            + "print('named', flush=True); time.sleep(30)"
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", script])
        defer {
            child.signal(SIGKILL)
            _ = child.wait()
        }
        #expect(child.readLine() == "named")
        let name = try #require(FileManager.default.contents(atPath: "/proc/\(child.pid)/comm"))
        #expect(name.starts(with: [0xff, 0xfe]), "named \(Array(name))")
        let stat = try #require(ProcessStat(pid: child.pid), "the stat of \(child.pid) did not read")
        #expect(stat.parent == getpid() && (stat.state == "S" || stat.state == "R"), "\(stat)")
    }

    /// A child gets what a program needs of the environment and nothing else: a server's holds its secrets (the
    /// token, the store's password, the webhook secret), which a child taken over by a hostile file could write into
    /// its output. It had the whole environment.
    @Test func aChildGetsNoneOfTheServersSecrets() throws {
        let kept = ChildProcess.environment(["PATH": "/bin", "TRANSCODER_TOKEN": "s3cret", "TRANSCODER_STORE": "postgres://u:pw@db/t",
                                             "TRANSCODER_FFMPEG_LOG": "info", "ASAN_OPTIONS": "detect_leaks=0", "HOME": "/root"])
        #expect(kept == ["ASAN_OPTIONS=detect_leaks=0", "PATH=/bin", "TRANSCODER_FFMPEG_LOG=info"])
        // A real child's: none of this process's variables beyond those.
        let child = try ChildProcess(executable: "/usr/bin/env", arguments: [])
        var lines: [String] = []
        while let line = child.readLine() { lines.append(line) }
        #expect(child.wait() == .exited(0))
        #expect(lines == ChildProcess.environment(ProcessInfo.processInfo.environment), "\(lines)")
        #expect(lines.count < ProcessInfo.processInfo.environment.count, "this process has more: \(ProcessInfo.processInfo.environment.keys.sorted())")
    }

    /// A signal to a child reaches what it started (its process group): a process it forked kept the output pipe
    /// open and outlived it, and the parent's read of the child's lines never ended.
    @Test func aSignalReachesWhatTheChildStarted() throws {
        let script = """
        import os, sys, time
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        print("started", flush=True)
        time.sleep(30)
        """
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", script])
        #expect(child.readLine() == "started")
        child.signal(SIGKILL)
        let ended = DispatchSemaphore(value: 0)
        NamedThread.start("reader") {
            while child.readLine() != nil {}
            ended.signal()
        }
        #expect(ended.wait(timeout: .now() + 10) == .success, "the output ended: the forked process went with the child")
        #expect(child.wait() == .signaled(SIGKILL))
    }

    /// What a child started and left running when it ended by itself ends with it: it went on past the job, with
    /// the job's files open, where no signal of the server's reached it once the child was reaped.
    @Test func whatAChildLeftRunningEndsWithIt() throws {
        let script = """
        import os, sys
        pid = os.fork()
        if pid == 0:
            os.close(1)
            import time
            time.sleep(60)
            os._exit(0)
        print(pid, flush=True)
        """
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", script])
        let left = try #require(child.readLine().flatMap { pid_t($0) })
        #expect(child.wait() == .exited(0))
        // Dead (or a zombie waiting for init): gone from the group's running processes.
        #expect(eventually(5) {
            let status = (try? String(contentsOfFile: "/proc/\(left)/status", encoding: .utf8)) ?? ""
            return status.isEmpty || status.contains("State:\tZ")
        }, "the process the child left is still running")
    }
}
