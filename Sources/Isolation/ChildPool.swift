import Glibc
import Locks

/// Keeps a few children started and waiting for their request, their libraries loaded and their sandbox entered,
/// so a job takes one at once: starting the binary costs about 90 ms (Debian's FFmpeg brings some 180 shared
/// libraries; the ffmpeg CLI itself takes as long to start), which a spare child pays before the job arrives.
///
/// A thread of the pool starts the spares and lives as long as the pool: a child's parent-death signal fires when
/// the thread that started it ends, so the spares must not be started by short-lived threads.
public final class ChildPool: Sendable {
    private struct State {
        var spares: [ChildProcess] = []
        var stopping = false
    }

    public let executable: String
    public let arguments: [String]
    /// Spares kept ready.
    public let count: Int
    private let errorLines: (@Sendable (_ line: String, _ task: String) -> Void)?
    private let state = LockedValue(State())
    private let finished = LockedValue(false)

    /// Starts the thread that keeps `count` spares of `executable arguments` ready (none when `count` is 0); their
    /// standard error goes to `errorLines` (`ChildProcess`).
    public init(executable: String, arguments: [String], count: Int,
                errorLines: (@Sendable (_ line: String, _ task: String) -> Void)? = nil) {
        self.executable = executable
        self.arguments = arguments
        self.count = count
        self.errorLines = errorLines
        guard count > 0 else {
            finished.withLock { $0 = true }
            return
        }
        NamedThread.start("child-spares") { [self] in keepSpares() }
    }

    /// A spare child if one is ready (and still alive), else one started now on the calling thread.
    public func take() throws(ProcessError) -> ChildProcess {
        while let spare = state.withLock({ state -> ChildProcess? in state.spares.isEmpty ? nil : state.spares.removeFirst() }) {
            state.notifyAll()
            if spare.isRunning { return spare }
            spare.wait() // it died waiting (killed from outside): reap it and take another
        }
        state.notifyAll()
        return try ChildProcess(executable: executable, arguments: arguments, errorLines: errorLines)
    }

    /// Stops making spares and ends the ones waiting.
    public func shutdown() {
        let spares = state.withLock { state -> [ChildProcess] in
            state.stopping = true
            defer { state.spares = [] }
            return state.spares
        }
        state.notifyAll()
        for spare in spares {
            spare.signal(SIGKILL)
            spare.wait()
        }
        _ = finished.wait { $0 }
    }

    private func keepSpares() {
        while true {
            let stop = state.wait { $0.stopping || $0.spares.count < count }
            guard stop, !state.withLock({ $0.stopping }) else { break }
            guard let child = try? ChildProcess(executable: executable, arguments: arguments, errorLines: errorLines) else {
                // The binary cannot start now (out of processes, of memory): jobs start their own, and say why.
                _ = state.wait(timeout: 1) { $0.stopping }
                continue
            }
            child.task = "waiting spare"
            let kept = state.withLock { state -> Bool in
                guard !state.stopping else { return false }
                state.spares.append(child)
                return true
            }
            if !kept {
                child.signal(SIGKILL)
                child.wait()
            }
        }
        finished.withLock { $0 = true }
        finished.notifyAll()
    }
}
