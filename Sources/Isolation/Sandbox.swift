import CProcess
import Foundation
import Glibc

/// Puts the current process (a job's child) into its sandbox, before it reads a byte of media: resource limits,
/// no new privileges, death with its parent, and a seccomp filter that keeps it off the network and from running
/// other programs — defence in depth behind the protocol and demuxer whitelists.
public enum Sandbox {
    /// The calls the filter refuses with EPERM (`socket` only for families other than AF_UNIX).
    static let refused = ["socket", "connect", "bind", "listen", "accept", "accept4", "execve", "execveat", "ptrace",
                          "process_vm_readv", "process_vm_writev"]

    /// Applies `policy` to this process and reports what is in force. If `parent` (the server's pid) is no longer
    /// this process's parent, it died before the death signal was set: the process exits at once.
    public static func enter(_ policy: SandboxPolicy, parent: pid_t?) -> SandboxReport {
        // A crash ends the process at once with its signal, which the server reads. The Swift runtime's backtracer
        // would catch it and run a helper program, which the filter refuses: it then carried on after a SIGSEGV.
        for signal in [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP] { Glibc.signal(signal, SIG_DFL) }
        limit(Int32(RLIMIT_DATA.rawValue), policy.dataBytes)
        limit(Int32(RLIMIT_NOFILE.rawValue), policy.openFiles)
        limit(Int32(RLIMIT_CORE.rawValue), 0)
        setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, Int32(policy.nice))
        _ = tc_set_parent_death_signal(SIGKILL)
        if let parent, getppid() != parent { exit(1) }
        _ = tc_set_no_new_privileges()
        var seccompError: String?
        do throws(ProcessError) {
            let filter = try SeccompFilter()
            for name in refused {
                try filter.refuse(name, unlessFirstArgumentIs: name == "socket" ? UInt64(AF_UNIX) : nil)
            }
            try filter.load()
        } catch {
            seccompError = error.description
        }
        return report(seccompError: seccompError)
    }

    /// What is in force now, read back from the kernel.
    public static func report(seccompError: String? = nil) -> SandboxReport {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let seccompMode = status.split(separator: "\n").first { $0.hasPrefix("Seccomp:") }?
            .split(whereSeparator: { $0 == " " || $0 == "\t" }).last.flatMap { Int($0) } ?? 0
        let deathSignal = tc_parent_death_signal()
        errno = 0
        let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        return SandboxReport(
            seccomp: seccompMode == 2, seccompError: seccompError, refusedCalls: seccompMode == 2 ? refused : [],
            noNewPrivileges: tc_no_new_privileges() == 1,
            parentDeathSignal: deathSignal == 0 ? nil : ChildProcess.Termination.name(of: deathSignal),
            dataBytes: current(Int32(RLIMIT_DATA.rawValue)), openFiles: current(Int32(RLIMIT_NOFILE.rawValue)), coreBytes: current(Int32(RLIMIT_CORE.rawValue)),
            nice: Int(nice))
    }

    /// Tries calls the filter should refuse, and one it should let through, and says what happened to each:
    /// `socket(AF_INET)`, `socket(AF_INET6)`, `execve` of a path that does not exist (so without the filter it
    /// fails with ENOENT rather than replacing this process), and `socket(AF_UNIX)`.
    public static func tryRefusedCalls() -> [String: String] {
        func outcome(_ result: Int32) -> String {
            if result >= 0 { return "allowed" }
            return errno == EPERM ? "EPERM" : String(cString: strerror(errno))
        }
        func socketOutcome(_ family: Int32) -> String {
            let descriptor = socket(family, Int32(SOCK_STREAM.rawValue), 0)
            let text = outcome(descriptor)
            if descriptor >= 0 { close(descriptor) }
            return text
        }
        let path = "/nonexistent/transcoderd-sandbox-check"
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(path), nil]
        defer { free(argv[0]) }
        let exec = outcome(execv(path, argv))
        return ["socket(AF_INET)": socketOutcome(AF_INET), "socket(AF_INET6)": socketOutcome(AF_INET6),
                "execve": exec, "socket(AF_UNIX)": socketOutcome(AF_UNIX)]
    }

    /// Bytes of data (heap and anonymous mappings) this process uses now: what RLIMIT_DATA limits.
    public static var dataBytes: Int {
        // statm: size resident shared text lib data dt, in pages.
        let fields = ((try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? "").split(separator: " ")
        guard fields.count >= 6, let pages = Int(fields[5]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    private static func limit(_ resource: Int32, _ value: Int) {
        var limit = rlimit(rlim_cur: rlim_t(value), rlim_max: rlim_t(value))
        setrlimit(resource, &limit)
    }

    private static func current(_ resource: Int32) -> Int? {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return nil }
        return limit.rlim_cur == rlim_t.max ? nil : Int(limit.rlim_cur) // rlim_t.max is RLIM_INFINITY
    }
}
