import Foundation
import Isolation
import Locks
import Testing

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
}
