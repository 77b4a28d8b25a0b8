import CProcess
import Foundation
import Glibc
import Locks

/// A child process with a pipe to its standard input and one from its standard output; its standard error is ours,
/// or read line by line for its owner (`ChildErrorOutput`). Owns the pipe ends and the process: it is reaped by
/// `wait`, or killed and reaped when the owner goes away.
///
/// Signals are only ever sent to a child not yet reaped (`waitid` with `WNOWAIT` sees the exit first, the reaping
/// happens under the same lock `signal` takes), so a pid the kernel has handed to another process is never hit.
public final class ChildProcess: Sendable {
    /// How a child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)

        public var description: String {
            switch self {
            case .exited(let status): "exit status \(status)"
            case .signaled(let signal): "signal \(Self.name(of: signal)) (\(signal))"
            }
        }

        /// `SIGSEGV` for 11, and so on for the signals a crash or a stop brings.
        public static func name(of signal: Int32) -> String {
            switch signal {
            case SIGSEGV: "SIGSEGV"
            case SIGABRT: "SIGABRT"
            case SIGBUS: "SIGBUS"
            case SIGILL: "SIGILL"
            case SIGFPE: "SIGFPE"
            case SIGTRAP: "SIGTRAP"
            case SIGKILL: "SIGKILL"
            case SIGTERM: "SIGTERM"
            case SIGXCPU: "SIGXCPU"
            case SIGXFSZ: "SIGXFSZ"
            case SIGSYS: "SIGSYS"
            default: "signal \(signal)"
            }
        }
    }

    private struct State {
        var termination: Termination?
        var input: Int32
        /// Whether this process sent SIGKILL (a cancel, a deadline, a line too long).
        var killed = false
        /// Whether it was for a line longer than `maxLineBytes`.
        var lineTooLong = false
    }

    public let pid: pid_t
    private let output: Int32
    private let state: LockedValue<State>
    private let buffer = LockedValue(LineBuffer())
    private let errorOutput: ChildErrorOutput?

    /// What a child writing on its standard error is doing, handed with each of its lines to the owner's
    /// `errorLines` (a job's id, say); set when the child takes a task.
    public var task: String {
        get { errorOutput?.task.withLock { $0 } ?? "" }
        set { errorOutput?.task.withLock { $0 = newValue } }
    }

    /// Bytes read from the child and not yet returned as lines. Lines are taken from `start` on, and the bytes before
    /// it dropped only once they are most of the array, so a burst of many short lines costs no shifting per line; a
    /// long line arriving in many reads is searched for its newline only in what each read added.
    private struct LineBuffer {
        var bytes: [UInt8] = []
        var start = 0
        var searched = 0

        mutating func takeLine() -> [UInt8]? {
            guard let newline = bytes[searched...].firstIndex(of: UInt8(ascii: "\n")) else {
                searched = bytes.count
                return nil
            }
            let line = Array(bytes[start..<newline])
            start = newline + 1
            if start == bytes.count {
                bytes.removeAll(keepingCapacity: true)
                start = 0
            } else if start >= 65536 && start * 2 >= bytes.count {
                bytes.removeFirst(start)
                start = 0
            }
            searched = start
            return line
        }

        var pending: Int { bytes.count - start }
    }

    /// What a process that runs children needs, set up once, when it starts its first: SIGPIPE ignored (writing to
    /// a child that died must fail with EPIPE, not end this process; children get every default back), SIGCHLD at
    /// its default (ignored, inherited from whoever started us, the kernel would reap children behind our back), and
    /// no longer dumpable (children run as the same user: they must not reach this process's /proc files, its
    /// memory or its environment, where a token may be).
    private static let prepareParent: Void = {
        _ = Glibc.signal(SIGPIPE, SIG_IGN)
        _ = Glibc.signal(SIGCHLD, SIG_DFL)
        _ = tc_set_dumpable(0)
    }()

    /// Variables of this process's environment a child gets (`NAME=value`): what a program needs to run (the
    /// search paths, locale, time zone, temporary folder, the C library's and sanitizers' settings) and FFmpeg's
    /// log switch, nothing else. A server's environment holds its secrets (`TRANSCODER_TOKEN`, the store's URL with
    /// its password, the webhook secret): a child taken over by a hostile file could write them into its output.
    public static func environment(_ variables: [String: String]) -> [String] {
        let kept: Set = ["PATH", "LD_LIBRARY_PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "MALLOC_ARENA_MAX",
                         "GLIBC_TUNABLES", "TRANSCODER_FFMPEG_LOG"]
        return variables.filter { kept.contains($0.key) || $0.key.hasSuffix("SAN_OPTIONS") }.map { "\($0.key)=\($0.value)" }.sorted()
    }

    /// Starts `executable` with `arguments` (not counting the program name) and a filtered environment
    /// (`environment`), as the leader of a process group of its own. Its standard error is this process's, or, with
    /// `errorLines`, a pipe whose lines (bounded, escaped: `ChildErrorOutput`) go there with the child's `task`.
    public init(executable: String, arguments: [String],
                errorLines: (@Sendable (_ line: String, _ task: String) -> Void)? = nil) throws(ProcessError) {
        _ = Self.prepareParent
        var toChild: [Int32] = [-1, -1], fromChild: [Int32] = [-1, -1], errorPipe: [Int32] = [-1, -1]
        guard tc_pipe(&toChild) == 0 else { throw ProcessError(errnoCode: errno, reason: "creating a pipe") }
        guard tc_pipe(&fromChild) == 0, errorLines == nil || tc_pipe(&errorPipe) == 0 else {
            let error = errno
            for descriptor in toChild + fromChild where descriptor >= 0 { Glibc.close(descriptor) }
            throw ProcessError(errnoCode: error, reason: "creating a pipe")
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = Self.environment(ProcessInfo.processInfo.environment).map { strdup($0) } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var error: Int32 = 0
        // Owned from its first moment: an `OrphanReaper` sweep never reaps it.
        let pid = OrphanReaper.owned.withLock { owned in
            let pid = tc_spawn(executable, argv, envp, toChild[0], fromChild[1], errorPipe[1], &error)
            if pid > 0 { owned.insert(pid) }
            return pid
        }
        Glibc.close(toChild[0])
        Glibc.close(fromChild[1])
        if errorPipe[1] >= 0 { Glibc.close(errorPipe[1]) }
        guard pid > 0 else {
            Glibc.close(toChild[1])
            Glibc.close(fromChild[0])
            if errorPipe[0] >= 0 { Glibc.close(errorPipe[0]) }
            throw ProcessError(errnoCode: error, reason: "starting \(executable)")
        }
        self.pid = pid
        output = fromChild[0]
        errorOutput = errorLines.map { ChildErrorOutput(descriptor: errorPipe[0], lines: $0) }
        state = LockedValue(State(termination: nil, input: toChild[1]))
    }

    /// Writes `data` to the child's standard input.
    public func send(_ data: Data) throws(ProcessError) {
        let descriptor = state.withLock { $0.input }
        guard descriptor >= 0 else { throw ProcessError(errnoCode: EPIPE, reason: "writing to the child") }
        var offset = 0
        while offset < data.count {
            let written = data.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                throw ProcessError(errnoCode: errno, reason: "writing to the child")
            }
            offset += written
        }
    }

    /// Closes the child's standard input: it reads end of file there.
    public func closeInput() {
        state.withLock { state in
            if state.input >= 0 { Glibc.close(state.input) }
            state.input = -1
        }
    }

    /// Longest line read from a child, bytes: past it the child is killed and its output counts as ended (a child gone
    /// wrong must not fill this process's memory).
    public static let maxLineBytes = 16 * 1024 * 1024

    /// The next line the child writes on its standard output, without its newline; nil once the output ends (the
    /// child exited or closed it) or a line runs past `maxLineBytes`. Blocks. Call from one thread.
    public func readLine() -> String? {
        let line = buffer.withLock { $0.takeLine() }
        if let line { return String(decoding: line, as: UTF8.self) }
        // The chunk only when the buffer holds no line: a child writing many short lines costs no zeroed 64 KiB each.
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let line = buffer.withLock { $0.takeLine() }
            if let line { return String(decoding: line, as: UTF8.self) }
            let count = Glibc.read(output, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            let full = buffer.withLock { buffer -> Bool in
                buffer.bytes.append(contentsOf: chunk[0..<count])
                return buffer.pending > Self.maxLineBytes
            }
            if full {
                state.withLock { $0.lineTooLong = true }
                signal(SIGKILL) // a child gone wrong: it would block writing the rest
                return nil
            }
        }
    }

    /// Whether the child has not ended yet (looked at without reaping it).
    public var isRunning: Bool {
        guard state.withLock({ $0.termination }) == nil else { return false }
        var info = siginfo_t()
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else { return false }
        return info._sifields._sigchld.si_pid == 0 // nothing to report: the child is still there
    }

    /// Sends `signal` to the child and its process group (whatever it started, which would otherwise keep its
    /// output pipe open and outlive it), unless it has already been reaped.
    public func signal(_ signal: Int32) {
        state.withLock { state in
            guard state.termination == nil else { return }
            kill(-pid, signal)
            if signal == SIGKILL { state.killed = true }
        }
    }

    /// Whether this process sent the child SIGKILL: one it died of came from here, not from the kernel's
    /// out-of-memory killer or from outside.
    public var killedByParent: Bool { state.withLock { $0.killed } }

    /// Whether the child was killed for writing a line longer than `maxLineBytes` (a child gone wrong).
    public var lineTooLong: Bool { state.withLock { $0.lineTooLong } }

    /// Waits for the child to end, kills what it left running in its process group, and reaps it; later calls return
    /// the same answer.
    @discardableResult
    public func wait() -> Termination {
        if let known = state.withLock({ $0.termination }) { return known }
        var info = siginfo_t()
        var exited = false
        while !exited {
            if waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == 0 { exited = true } else if errno != EINTR { break }
        }
        let termination = state.withLock { state -> Termination in
            if let known = state.termination { return known }
            // What the child started and left running (its process group, which it cannot leave) ends with it:
            // it would otherwise go on with the job's limits lifted and its files open, past the job's end. Sent
            // while the child is not yet reaped, so the group's id cannot be another's.
            if exited { kill(-pid, SIGKILL) }
            let status = Self.reap(pid)
            // Not ours to reap (cannot happen: no one else waits for an owned child): not a success.
            let ended: Termination = status.map { $0 & 0x7F == 0 ? .exited(($0 >> 8) & 0xFF) : .signaled($0 & 0x7F) } ?? .exited(255)
            state.termination = ended
            return ended
        }
        state.notifyAll()
        errorOutput?.childEnded()
        return termination
    }

    deinit {
        closeInput()
        if state.withLock({ $0.termination }) == nil {
            kill(-pid, SIGKILL)
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            _ = Self.reap(pid)
        }
        errorOutput?.childEnded()
        Glibc.close(output)
    }

    /// Reaps `pid`, which has ended (`waitid` saw it), and gives it up in `OrphanReaper.owned` under the same lock:
    /// a child spawned meanwhile under the pid just freed stays owned. Its wait status, nil when it could not be had.
    private static func reap(_ pid: pid_t) -> Int32? {
        OrphanReaper.owned.withLock { owned in
            var status: Int32 = 0
            var reaped = waitpid(pid, &status, 0)
            while reaped < 0 && errno == EINTR { reaped = waitpid(pid, &status, 0) }
            owned.remove(pid)
            return reaped == pid ? status : nil
        }
    }
}
