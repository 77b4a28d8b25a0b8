/// What protects a job's child process, as read back from the kernel after `Sandbox.enter`: what `run-job --check`
/// prints and the server logs at start.
public struct SandboxReport: Sendable, Codable, Equatable {
    /// The seccomp filter is loaded (the kernel reports filter mode).
    public var seccomp: Bool
    /// Why it is not, when it is not.
    public var seccompError: String?
    /// The system calls the filter refuses with EPERM.
    public var refusedCalls: [String]
    /// Landlock confines the files a job's child may touch (filled in where it was applied: `run-job --check`
    /// applies it with no files at all).
    public var landlock: Bool?
    /// Why it is not, when it is not.
    public var landlockError: String?
    /// PR_SET_NO_NEW_PRIVS: no exec can gain privileges.
    public var noNewPrivileges: Bool
    /// The signal the child gets when the server dies (`SIGKILL`), nil when none is set.
    public var parentDeathSignal: String?
    /// RLIMIT_DATA, bytes.
    public var dataBytes: Int?
    /// RLIMIT_NOFILE.
    public var openFiles: Int?
    /// RLIMIT_CORE, bytes (0: no core dumps).
    public var coreBytes: Int?
    /// Scheduling niceness.
    public var nice: Int
    /// The niceness of the process's scheduling autogroup (its session's share of the CPU against the server's),
    /// nil where the kernel has none.
    public var autogroupNice: Int?
    /// The effective capability set, as the kernel shows it (hexadecimal): at most `Sandbox.keptCapabilities`.
    /// (The bounding set matters only to a program run with `execve`, which is refused.)
    public var capabilities: String?
    /// The permitted set, which bounds what the effective one could be raised to: as little.
    public var permittedCapabilities: String?
    /// Why the capabilities could not be dropped, when they could not.
    public var capabilityError: String?
    /// What the filter did to calls tried for real (`run-job --check` tries them): call → `EPERM`, `allowed`, or
    /// the error it failed with.
    public var tried: [String: String]?

    /// Whether everything asked for is in force (and, when calls were tried, the filter refused them).
    public var complete: Bool {
        let refusedAsTried = (tried ?? [:]).allSatisfy { call, outcome in
            switch call {
            case "socketpair(AF_UNIX)", "write(in its folder)", "setpriority(self)": outcome == "allowed"
            case "open(/etc/hostname)", "write(beside its folder)": outcome == "EACCES"
            case "clone3": outcome == "ENOSYS"
            default: outcome == "EPERM"
            }
        }
        let dropped = [capabilities, permittedCapabilities].allSatisfy { set in
            set.flatMap { UInt64($0, radix: 16) }.map { $0 & ~Sandbox.keptCapabilities == 0 } == true
        }
        return seccomp && noNewPrivileges && parentDeathSignal != nil && coreBytes == 0 && landlock != false && dropped && refusedAsTried
    }
}
