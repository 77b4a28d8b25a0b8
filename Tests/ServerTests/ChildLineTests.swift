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

    /// What a child writes on its standard error is read by the parent, line by line, and handed on with the child's
    /// task: it went straight to the server's own standard error, its JSON log, where a child taken over by a hostile
    /// file could write a line that reads as the server's, redraw a terminal, or write without end. Lines are cut,
    /// control characters escaped, and a child's output bounded; a last line without a newline still comes.
    @Test func aChildsStandardErrorComesAsBoundedEscapedLines() throws {
        let script = """
        import sys
        sys.stdin.readline()
        err = sys.stderr.buffer
        err.write(b'{"level":"error","message":"forged"}\\n')
        err.write(b"\\x1b[2Jred\\r\\n")
        err.write("\\u009b2Jc1 \\u202eright-to-left\\n".encode())
        err.write(b"a" * 5000 + b"\\n")
        err.write(b"next\\n")
        for i in range(400):
            err.write(b"b" * 999 + b"\\n")
        err.flush()
        print("done", flush=True)
        """
        let lines = LockedValue<[String]>([])
        let child = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", script]) { line, task in
            lines.withLock { $0.append(task + ":" + line) }
            lines.notifyAll()
        }
        child.task = "job 7"
        try child.send(Data("go\n".utf8))
        #expect(child.readLine() == "done")
        #expect(child.wait() == .exited(0))
        let dropped = "job 7:(more than 262144 bytes: the rest is dropped)"
        #expect(lines.wait(timeout: 10) { $0.last == dropped }, "\(lines.withLock { $0.suffix(2) })")
        let read = lines.withLock { $0 }
        try #require(read.count > 5)
        #expect(read[0] == #"job 7:{"level":"error","message":"forged"}"#, "a line, as text")
        #expect(read[1] == #"job 7:\x1b[2Jred"#, "the escape shown, the carriage return gone: \(read[1])")
        #expect(read[2] == #"job 7:\x9b2Jc1 \u{202e}right-to-left"#, "C1 and bidirectional controls shown: \(read[2])")
        #expect(read[3] == "job 7:" + String(repeating: "a", count: 4096) + " (cut)", "cut at 4096 bytes: \(read[3].count)")
        #expect(read[4] == "job 7:next", "the cut line's rest is dropped, the next line whole")
        let middle = read[5..<(read.count - 1)]
        #expect(middle.allSatisfy { $0 == "job 7:" + String(repeating: "b", count: 999) })
        #expect(middle.count < 262, "at most 256 KiB handed on: \(middle.count) lines")
        #expect(middle.count > 250, "all but the last few kB: \(middle.count) lines")

        let last = LockedValue<[String]>([])
        let unterminated = try ChildProcess(executable: "/bin/sh", arguments: ["-c", "printf 'no newline' >&2"]) { line, _ in
            last.withLock { $0.append(line) }
            last.notifyAll()
        }
        #expect(unterminated.wait() == .exited(0))
        #expect(last.wait(timeout: 10) { !$0.isEmpty } && last.withLock { $0 } == ["no newline"], "\(last.withLock { $0 })")
    }

    /// Line ends count towards a child's bound, and so do lines: a child writing nothing but line ends passed the
    /// byte bound uncounted, each handed on as an empty line (1.5 million warnings in the server's log in 20 s);
    /// blank lines are not handed on, and past 1000 lines the rest is dropped.
    @Test func blankAndShortLinesCountTowardsAChildsBound() throws {
        func handedOn(_ script: String) throws -> [String] {
            let lines = LockedValue<[String]>([])
            let child = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", script]) { line, _ in
                lines.withLock { $0.append(line) }
                lines.notifyAll()
            }
            #expect(child.readLine() == "done")
            #expect(child.wait() == .exited(0))
            _ = lines.wait(timeout: 10) { $0.last?.hasPrefix("(more than") == true }
            return lines.withLock { $0 }
        }
        let blank = try handedOn("""
        import sys
        sys.stderr.buffer.write(b"\\n" * 1000000 + b"\\r\\n" * 10 + b"late\\n")
        sys.stderr.flush()
        print("done", flush=True)
        """)
        // Counts first: a failure's comparison of a million lines would take minutes.
        #expect(blank.count == 1 && blank.first == "(more than 1000 lines: the rest is dropped)", "\(blank.count) lines: \(blank.prefix(3))")
        let short = try handedOn("""
        import sys
        sys.stderr.buffer.write(b"\\n".join(b"line-%d" % i for i in range(5000)) + b"\\n")
        sys.stderr.flush()
        print("done", flush=True)
        """)
        #expect(short.count == 1001 && short == (0..<1000).map { "line-\($0)" } + ["(more than 1000 lines: the rest is dropped)"],
                "\(short.count) lines: \(short.suffix(2))")
    }

    /// A process that left the child's group (`setsid`) and holds its standard error open does not keep the
    /// parent's reader for ever: it stops a moment after the child was reaped.
    @Test func theStandardErrorReaderStopsAfterTheChildEvenIfAnotherProcessHoldsThePipe() throws {
        let lines = LockedValue<[String]>([])
        let marker = try Media.scratch().appendingPathComponent("late-written").path
        let script = "setsid sh -c 'echo started $$; echo early >&2; sleep 4; touch \(marker); echo late >&2; exec sleep 30' & exec sleep 30"
        let child = try ChildProcess(executable: "/bin/sh", arguments: ["-c", script]) { line, _ in
            lines.withLock { $0.append(line) }
            lines.notifyAll()
        }
        let said = child.readLine() ?? ""
        let escaped = pid_t(said.split(separator: " ").last ?? "") ?? 0
        defer { if escaped > 0 { kill(-escaped, SIGKILL) } } // its own session and group, led by it
        #expect(said.hasPrefix("started ") && escaped > 0, "said once out of the child's group: \(said)")
        child.signal(SIGKILL)
        #expect(child.wait() == .signaled(SIGKILL))
        #expect(lines.wait(timeout: 10) { $0 == ["early"] })
        // "late" is written 4 s after the child started (the marker comes just before it; with the reader gone the
        // write fails): by then the reader had stopped.
        #expect(eventually(15) { FileManager.default.fileExists(atPath: marker) }, "the escaped process wrote its line")
        usleep(500_000)
        #expect(lines.withLock { $0 } == ["early"], "the reader stopped about 1 s after the child ended, before the line at 4 s")
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
