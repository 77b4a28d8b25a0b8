import Foundation
import Glibc
import Locks

/// Waits for the processes left to this one as their init, when it is PID 1 of its PID namespace (a container run
/// without an init: the compose files run the server so). A job's child that forked and ended leaves its forks here
/// (`ChildProcess.wait` then kills them), and the kernel keeps each as a zombie until its parent waits for it: a pid
/// taken for good, until the container's limit of processes is reached. `ChildProcess` reaps its own children; this
/// reaps every other one, and never one of those.
public enum OrphanReaper {
    /// The children a `ChildProcess` owns and reaps itself: added as each is spawned, removed once it is reaped, under
    /// the lock a sweep holds, so a sweep never takes a child's end from its owner.
    static let owned = LockedValue<Set<pid_t>>([])

    /// Starts sweeping once a second, if this process is PID 1; once per process.
    public static func startIfInit() {
        guard getpid() == 1 else { return }
        _ = started
    }

    private static let started: Void = {
        NamedThread.start("orphan-reaper") {
            while true {
                sweep()
                sleep(1)
            }
        }
    }()

    /// Reaps the zombies among this process's children that no `ChildProcess` owns; returns how many.
    @discardableResult
    static func sweep() -> Int {
        let me = getpid()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        var reaped = 0
        for name in names {
            guard let pid = pid_t(name), pid != me, let stat = ProcessStat(pid: pid), stat.state == "Z", stat.parent == me else { continue }
            owned.withLock { owned in
                guard !owned.contains(pid) else { return }
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid { reaped += 1 }
            }
        }
        return reaped
    }
}
