import CProcess
import Foundation
import Glibc

/// Puts the current process (a job's child) into its sandbox, before it reads a byte of media: resource limits,
/// no new privileges, death with its parent, a seccomp filter that keeps it off the network, from running other
/// programs and from signalling other processes, and (`confineFiles`) a Landlock ruleset that lets it touch only its
/// job's files — defence in depth behind the protocol and demuxer whitelists.
public enum Sandbox {
    /// The calls the filter refuses with EPERM. `socket` of every family: with `connect`, `bind` and `listen`
    /// refused a stream socket could do nothing, but a datagram one reaches any Unix socket with `sendto` (the
    /// journal, `/dev/log`, abstract names), which Landlock does not cover; `socketpair` stays. The signal calls only
    /// for a target other than this process (its own threads are signalled through its own pid); io_uring because
    /// its operations (sockets among them) never pass through the filter; `setsid` and `setpgid` because the server
    /// stops a child by its process group, which a process it started must not leave; `unshare` and `setns`,
    /// whose new namespaces (a user namespace: every capability again, inside it) a job has no use for; and the file
    /// handle calls, which open a file by its inode past the paths Landlock checks. And, as Docker's default profile
    /// refuses them, the calls that serve kernel exploits or reach the kernel's shared state with no privilege:
    /// `userfaultfd` (open to any process in user mode since Linux 5.11; it makes kernel races reliable), the key
    /// calls (the user's and session's keyrings; `request_key` starts a helper program), `perf_event_open` and `bpf`
    /// (where the host's settings allow them); and those that take capabilities the child has dropped (mounts,
    /// modules, kexec, swap), refused before the kernel looks. And the calls that change a file's metadata by its
    /// path, which Landlock does not check (nor, before its ABI 3, truncation): a child taken over in a server run as
    /// root made `/bin/bash` setuid or `/etc/shadow` readable, and as any user it could make the database or the
    /// uploads unreadable or empty, or age other uploads into the sweep. The same by a descriptor (`fchmod`,
    /// `fchown`, the `f…xattr` calls), which Landlock never checks: a descriptor opened to read is enough for its
    /// owner, and the server owns every upload (a watermark shared by many jobs made unreadable for all). And
    /// `openat2`, whose flags the filter cannot read (see `refusedWithFlags`). The pipeline changes no file's mode,
    /// owner, times or attributes, and opens with `openat`. And memory outside the data limit (RLIMIT_DATA counts
    /// private mappings only): System V shared memory, whose segments outlive the job and the server, nobody's to
    /// free (two jobs left 512 MiB), its semaphores and message queues with it, and `memfd_create` (a shared
    /// anonymous mapping: `refusedWithFlags`). More with some arguments only: `refusedWithArguments`.
    static let refused = ["socket", "connect", "bind", "listen", "accept", "accept4", "execve", "execveat", "ptrace",
                          "process_vm_readv", "process_vm_writev", "io_uring_setup", "io_uring_enter",
                          "io_uring_register", "kill", "tgkill", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
                          "pidfd_send_signal", "pidfd_open", "setsid", "setpgid", "unshare", "setns",
                          "open_by_handle_at", "name_to_handle_at",
                          "userfaultfd", "keyctl", "add_key", "request_key", "perf_event_open", "bpf",
                          "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "fspick", "open_tree", "move_mount",
                          "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
                          "swapon", "swapoff", "acct",
                          "chmod", "fchmodat", "chown", "lchown", "fchownat", "truncate", "utime", "utimes",
                          "futimesat", "setxattr", "lsetxattr", "removexattr", "lremovexattr",
                          "fchmod", "fchown", "fsetxattr", "fremovexattr", "openat2",
                          "shmget", "shmat", "shmctl", "semget", "semop", "semtimedop", "semctl",
                          "msgget", "msgsnd", "msgrcv", "msgctl", "memfd_create"]

    /// Calls refused when a flags argument, masked, has a value: opening to read only and truncate (`O_TRUNC` with
    /// `O_RDONLY`), which Landlock before its ABI 3 (Debian 12's kernel has 2) lets through on a file it may read:
    /// a child taken over emptied its input or a shared watermark. Nothing opens so on purpose. Nor with access mode
    /// 3 (neither read nor write, which Linux takes for an `ioctl`-only open), for which Landlock asks no right at
    /// all: with `O_TRUNC` it emptied the file as well. And `clone` (see `cloneRules`) with
    /// `CLONE_PARENT`, which makes the new process a child of the server: after the job it stayed a zombie there
    /// (the server reaps only its own children), as many as a job made, until no child could start; or with a new
    /// namespace, as `unshare` is refused. And `mmap` shared and anonymous (`MAP_SHARED`, or `MAP_SHARED_VALIDATE`,
    /// with `MAP_ANONYMOUS`): memory the data limit does not count (a child limited to 64 MiB held 256).
    static let refusedWithFlags: [(name: String, index: UInt32, mask: UInt64, value: UInt64)] = [
        ("open", 1, UInt64(O_ACCMODE | O_TRUNC), UInt64(O_RDONLY | O_TRUNC)),
        ("openat", 2, UInt64(O_ACCMODE | O_TRUNC), UInt64(O_RDONLY | O_TRUNC)),
        ("open", 1, UInt64(O_ACCMODE), 3),
        ("openat", 2, UInt64(O_ACCMODE), 3),
        ("mmap", 3, 0x21, 0x21), // MAP_SHARED (1, also in MAP_SHARED_VALIDATE's 3) | MAP_ANONYMOUS (0x20)
    ] + cloneRules

    /// `clone`'s flags are its first argument everywhere but on s390x (where the rules would refuse threads at
    /// random): there none.
    private static var cloneRules: [(name: String, index: UInt32, mask: UInt64, value: UInt64)] {
        #if !arch(s390x)
        cloneFlags.values.map { ("clone", 0, $0, $0) }
        #else
        []
        #endif
    }

    /// The `clone` flags refused (Linux's values, the same on every architecture; Swift does not import them).
    static let cloneFlags: [String: UInt64] = [
        "CLONE_PARENT": 0x8000, "CLONE_NEWNS": 0x20000, "CLONE_NEWCGROUP": 0x200_0000, "CLONE_NEWUTS": 0x400_0000,
        "CLONE_NEWIPC": 0x800_0000, "CLONE_NEWUSER": 0x1000_0000, "CLONE_NEWPID": 0x2000_0000, "CLONE_NEWNET": 0x4000_0000,
    ]

    /// Calls refused as if the kernel did not have them (ENOSYS), so the C library falls back to an older one the
    /// filter can read: `clone3`, whose flags are in memory it cannot see (glibc starts threads with `clone` then).
    /// With their numbers (the same everywhere), for a libseccomp that does not know the name.
    static let missing: [(name: String, number: Int32)] = [("clone3", 435)]

    /// Calls newer than the libseccomp some systems have (Debian 12's 2.5.4 knows `fchmodat2` but not the others;
    /// Ubuntu 22.04's none), refused by their numbers, the same on every architecture since Linux 5.1, when the name
    /// does not resolve: a name it does not know would have turned the whole filter off. Changing metadata by path
    /// as `refused` does (`setxattrat`, `removexattrat`: Linux 6.13; `file_setattr`: 6.17).
    static let refusedByNumber: [(name: String, number: Int32)] = [
        ("fchmodat2", 452), ("setxattrat", 463), ("removexattrat", 466), ("file_setattr", 469),
    ]

    /// Calls refused only with certain arguments: the ways to have the kernel act on another process that are not
    /// signal calls. Making another process the owner of a descriptor's I/O signals (`fcntl` F_SETOWN, F_SETOWN_EX,
    /// F_SETSIG; `ioctl` FIOSETOWN, SIOCSPGRP): a write then sends it SIGIO, whose default ends it. Setting the
    /// resource limits of another process (`prlimit64` with a pid other than 0 and new limits; reading them is
    /// harmless): RLIMIT_CPU of 1 s kills it, RLIMIT_NOFILE of 0 cripples it. And the scheduling of another process
    /// (or, with `setpriority`, of a whole process group or user, the server's threads among them): niceness 19,
    /// SCHED_IDLE, one CPU or the idle I/O class starve it, and outlive the job. Each for a target other than the
    /// calling thread (0). The server is such a process.
    static let refusedWithArguments: [(name: String, conditions: [(index: UInt32, equal: Bool, value: UInt64)])] = [
        // F_SETOWN, F_SETOWN_EX (15) and F_SETSIG (10): the last two are GNU names Swift does not import.
        ("fcntl", [(1, true, UInt64(F_SETOWN))]), ("fcntl", [(1, true, 15)]), ("fcntl", [(1, true, 10)]),
        ("ioctl", [(1, true, 0x8901)]), ("ioctl", [(1, true, 0x8902)]), // FIOSETOWN, SIOCSPGRP
        ("prlimit64", [(0, false, 0), (2, false, 0)]),
        ("setpriority", [(0, false, UInt64(PRIO_PROCESS.rawValue))]), ("setpriority", [(1, false, 0)]),
        ("sched_setscheduler", [(0, false, 0)]), ("sched_setparam", [(0, false, 0)]), ("sched_setattr", [(0, false, 0)]),
        ("sched_setaffinity", [(0, false, 0)]), ("ioprio_set", [(0, false, 1)]), ("ioprio_set", [(1, false, 0)]), // 1: IOPRIO_WHO_PROCESS
        ("migrate_pages", [(0, false, 0)]), ("move_pages", [(0, false, 0)]),
        ("utimensat", [(1, false, 0)]), // by a path (a null one is `futimens`, on a descriptor the child opened)
    ]

    /// The capabilities a child keeps when the server has them (runs as root): reading and writing files whatever
    /// their modes, as the server does (Landlock decides which). Every other one goes: with them a child taken over
    /// could load a kernel module, use eBPF, raise its own limits, change its user, or (CAP_DAC_READ_SEARCH) open a
    /// file by its handle past Landlock's path checks.
    static let keptCapabilities: UInt64 = 1 << 1 // CAP_DAC_OVERRIDE

    /// The first argument a refused call may still have: this process's pid for the signals.
    private static func allowedFirstArgument(of name: String) -> UInt64? {
        switch name {
        case "kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo": UInt64(getpid())
        default: nil
        }
    }

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
        setAutogroupNice(policy.nice)
        _ = tc_set_parent_death_signal(SIGKILL)
        if let parent, getppid() != parent { exit(1) }
        _ = tc_set_no_new_privileges()
        let capabilityError = tc_drop_capabilities(keptCapabilities) == 0 ? nil : String(cString: strerror(errno))
        var seccompError: String?
        do throws(ProcessError) {
            let filter = try SeccompFilter()
            for name in refused {
                try filter.refuse(name, unlessFirstArgumentIs: allowedFirstArgument(of: name))
            }
            for call in refusedByNumber {
                try filter.refuse(call.name, number: call.number)
            }
            for call in missing {
                try filter.refuse(call.name, number: call.number, error: ENOSYS)
            }
            for rule in refusedWithFlags {
                try filter.refuse(rule.name, argument: rule.index, masked: rule.mask, equal: rule.value)
            }
            for rule in refusedWithArguments {
                try filter.refuse(rule.name, when: rule.conditions, low32: rule.name == "fcntl" || rule.name == "ioctl")
            }
            try filter.load()
        } catch {
            seccompError = error.description
        }
        var report = report(seccompError: seccompError)
        report.capabilityError = capabilityError
        return report
    }

    /// Lets this process touch only the files of its job from now on (Landlock): read `read`, and read, write,
    /// create, rename and remove files and folders beneath the directories in `write`. Nil when in force, else why not (a kernel
    /// or container without Landlock: the other protections still hold).
    public static func confineFiles(read: [String], write: [String]) -> String? {
        let readPaths = read.map { strdup($0) }, writePaths = write.map { strdup($0) }
        defer { (readPaths + writePaths).forEach { free($0) } }
        let result = readPaths.map { UnsafePointer<CChar>($0) }.withUnsafeBufferPointer { reading in
            writePaths.map { UnsafePointer<CChar>($0) }.withUnsafeBufferPointer { writing in
                tc_landlock_restrict(reading.baseAddress, Int32(reading.count), writing.baseAddress, Int32(writing.count))
            }
        }
        return result == 0 ? nil : "Landlock: \(String(cString: strerror(errno)))"
    }

    /// Tries the rule a job's files get from `confineFiles`, from processes this one forks: a folder made for the
    /// check (as a job's output stage) may be written in, the folder that holds it (as `outputs/`, where every job's
    /// folder is) not. Call before this process confines itself; the scratch folders go afterwards.
    public static func tryConfinedWrites() -> [String: String] {
        let keys = (inside: "write(in its folder)", beside: "write(beside its folder)")
        var template = Array(((ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp") + "/transcoderd-check-XXXXXX").utf8CString)
        guard mkdtemp(&template) != nil else {
            let reason = "no scratch folder: \(String(cString: strerror(errno)))"
            return [keys.inside: reason, keys.beside: reason]
        }
        let base = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let folder = base + "/stage"
        defer { try? FileManager.default.removeItem(atPath: base) }
        guard mkdir(folder, 0o700) == 0 else {
            let reason = "no scratch folder: \(String(cString: strerror(errno)))"
            return [keys.inside: reason, keys.beside: reason]
        }
        func forked(creating path: String) -> String {
            inForkedProcess(outcomes: [0: "allowed", 1: "EACCES", 3: "Landlock unavailable"]) {
                if confineFiles(read: [], write: [folder]) != nil { return 3 }
                let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                return descriptor >= 0 ? 0 : (errno == EACCES ? 1 : 2)
            }
        }
        // A file's metadata changed by its path, in the folder Landlock lets it write in (so a refusal is the
        // filter's), each changing nothing if allowed: setting the mode it has, the owner it has, no time, the size it
        // has; removing an attribute it does not have.
        let file = folder + "/metadata"
        close(open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))
        func forked(_ call: @escaping () -> Int32) -> String {
            inForkedProcess(outcomes: [0: "allowed", 1: "EPERM"]) {
                _ = confineFiles(read: [], write: [folder])
                return call() == 0 ? 0 : (errno == EPERM ? 1 : 2)
            }
        }
        return [keys.inside: forked(creating: folder + "/file"), keys.beside: forked(creating: base + "/file"),
                "chmod(in its folder)": forked { chmod(file, 0o600) },
                "chown(in its folder)": forked { chown(file, uid_t.max, gid_t.max) },
                "utimensat(in its folder)": forked { tc_touch_nothing(file) },
                "truncate(in its folder)": forked { truncate(file, 0) },
                "removexattr(in its folder)": forked { tc_remove_attribute(file, "user.transcoderd-check") },
                "fchmod(read-only descriptor)": forked { onReadOnlyDescriptor(file) { fchmod($0, 0o600) } },
                "fchown(read-only descriptor)": forked { onReadOnlyDescriptor(file) { fchown($0, uid_t.max, gid_t.max) } },
                // Replacing an attribute the file does not have: fails unfiltered, changing nothing.
                "fsetxattr(read-only descriptor)": forked { onReadOnlyDescriptor(file) { tc_try_fsetxattr($0, "user.transcoderd-check") } },
                "openat2(in its folder)": forked { tc_try_openat2(file) },
                "open(read-only, truncating)": forked {
                    let descriptor = open(file, O_RDONLY | O_TRUNC | O_CLOEXEC)
                    return descriptor >= 0 ? 0 : -1
                },
                "open(access mode 3, truncating)": forked {
                    let descriptor = open(file, O_ACCMODE | O_TRUNC | O_CLOEXEC)
                    return descriptor >= 0 ? 0 : -1
                },
                "setxattrat(in its folder)": forked { tc_try_setxattrat(file, "user.transcoderd-check") }]
    }

    /// `call` on a descriptor of `path` opened to read (its result; -1 with errno when the open fails).
    private static func onReadOnlyDescriptor(_ path: String, _ call: (Int32) -> Int32) -> Int32 {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return -1 }
        let result = call(descriptor)
        let error = errno
        close(descriptor)
        errno = error
        return result
    }

    /// Runs `work` in a process forked from this one, which exits with what it returns; that code's name in
    /// `outcomes` ("failed" for another), or the signal that ended the process (killed: no answer at all).
    private static func inForkedProcess(outcomes: [Int32: String], _ work: () -> Int32) -> String {
        let child = fork()
        if child == 0 { _exit(work()) }
        guard child > 0 else { return String(cString: strerror(errno)) }
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        if status & 0x7F != 0 { return "signal \(status & 0x7F)" }
        return outcomes[(status >> 8) & 0xFF] ?? "failed"
    }

    /// Sets the niceness of this process's scheduling autogroup, where the kernel has them on (Debian's default,
    /// outside a container's CPU controller): the child leads a session of its own, and each session is a group the
    /// scheduler shares the CPU between as equals, a process's own niceness counting only within it. At niceness
    /// 19 a job took as much CPU as the whole server. Before Landlock, which then denies the file (a child cannot
    /// set it back); only when the process leads its session. The kernel takes one change every 100 ms from a
    /// process without CAP_SYS_ADMIN, machine-wide: tried again for up to a second.
    private static func setAutogroupNice(_ nice: Int) {
        // Only a session of its own (as the server starts it): another's group is its caller's too.
        guard getsid(0) == getpid() else { return }
        let descriptor = open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        let text = Array(String(nice).utf8)
        for _ in 0..<20 {
            if write(descriptor, text, text.count) >= 0 || errno != EAGAIN { return }
            usleep(50_000)
        }
    }

    /// The niceness of this process's autogroup (`/proc/self/autogroup`: `/autogroup-123 nice 10`), nil without one.
    static func autogroupNice() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/autogroup", encoding: .utf8) else { return nil }
        return text.split(whereSeparator: \.isWhitespace).last.flatMap { Int($0) }
    }

    /// What is in force now, read back from the kernel.
    public static func report(seccompError: String? = nil) -> SandboxReport {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Substring? {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }?.split(whereSeparator: { $0 == " " || $0 == "\t" }).last
        }
        let seccompMode = field("Seccomp").flatMap { Int($0) } ?? 0
        let deathSignal = tc_parent_death_signal()
        errno = 0
        let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        return SandboxReport(
            // Any filter sets the mode (a container's own, systemd's): on only when this one was loaded.
            seccomp: seccompMode == 2 && seccompError == nil, seccompError: seccompError,
            refusedCalls: seccompMode == 2 && seccompError == nil ? refused + missing.map(\.name) + refusedByNumber.map(\.name)
                + refusedWithFlags.map { "\($0.name)(arg\($0.index) & \($0.mask) = \($0.value))" } + refusedWithArguments.map { "\($0.name)(\($0.conditions.map { "arg\($0.index) \($0.equal ? "=" : "≠") \($0.value)" }.joined(separator: ", ")))" } : [],
            noNewPrivileges: tc_no_new_privileges() == 1,
            parentDeathSignal: deathSignal == 0 ? nil : ChildProcess.Termination.name(of: deathSignal),
            dataBytes: current(Int32(RLIMIT_DATA.rawValue)), openFiles: current(Int32(RLIMIT_NOFILE.rawValue)), coreBytes: current(Int32(RLIMIT_CORE.rawValue)),
            nice: Int(nice), autogroupNice: autogroupNice(), capabilities: field("CapEff").map(String.init), permittedCapabilities: field("CapPrm").map(String.init))
    }

    /// Tries calls the sandbox should refuse, and one it should let through, and says what happened to each:
    /// `socket(AF_INET)`, `socket(AF_INET6)`, `execve` of a path that does not exist (so without the filter it
    /// fails with ENOENT rather than replacing this process), `kill` of the parent with signal 0, `setsid` and
    /// `setpgid` (from a forked process), the parent made the owner of a socket's I/O signals (`fcntl` F_SETOWN, also
    /// with high bits set in the command, F_SETOWN_EX, `ioctl` FIOSETOWN), the parent's open-files limit, niceness,
    /// CPUs and I/O priority, and this process group's niceness and I/O priority, set to what they are, `unshare` of
    /// nothing, `userfaultfd`, `keyctl` reading the session keyring's id, reading `/etc/hostname` (outside any job's
    /// files, once `confineFiles` is in force), `socket(AF_UNIX)`; and, allowed, `socketpair(AF_UNIX)` and this
    /// thread's own niceness.
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
        let signal = outcome(kill(getppid(), 0))
        // From a process this one forks (this one leads its group, where both calls fail whatever the filter says).
        func forked(_ call: @escaping () -> Int32) -> String {
            inForkedProcess(outcomes: [0: "allowed", 1: "EPERM"]) { call() >= 0 ? 0 : (errno == EPERM ? 1 : 2) }
        }
        let session = forked { setsid() }
        let group = forked { setpgid(0, 0) }
        // The parent as the owner of a descriptor's I/O signals, and its limit of open files set to what it is
        // (changing nothing if allowed).
        var pair: [Int32] = [-1, -1]
        let paired = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0
        let failed = paired ? "" : String(cString: strerror(errno))
        let owner = paired ? outcome(fcntl(pair[0], F_SETOWN, getppid())) : failed
        let ownerEx = paired ? outcome(tc_set_io_owner(pair[0], getppid(), 0)) : failed
        let ownerIoctl = paired ? outcome(tc_set_io_owner(pair[0], getppid(), 1)) : failed
        let ownerHighBits = paired ? outcome(tc_set_io_owner(pair[0], getppid(), 2)) : failed
        pair.filter { $0 >= 0 }.forEach { close($0) }
        let limits = outcome(tc_reset_open_files_limit(getppid()))
        // Niceness and CPUs set to what they are (changing nothing if allowed): the parent's, this process group's
        // (this process alone), and this thread's own, which stays allowed.
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        errno = 0
        let parentNice = getpriority(which, id_t(getppid()))
        let parentPriority = errno == 0 ? outcome(setpriority(which, id_t(getppid()), parentNice)) : String(cString: strerror(errno))
        let ownNice = getpriority(which, 0)
        let groupPriority = outcome(setpriority(__priority_which_t(PRIO_PGRP.rawValue), 0, ownNice))
        let ownPriority = outcome(setpriority(which, 0, ownNice))
        let affinity = outcome(tc_reset_affinity(getppid()))
        let ioPriority = outcome(tc_reset_io_priority(1, getppid()))
        let groupIOPriority = outcome(tc_reset_io_priority(2, 0)) // this process group: this process alone
        let namespaces = outcome(tc_unshare_nothing())
        let faults = outcome(tc_try_userfaultfd())
        let keys = outcome(tc_try_keyctl())
        var unixPair: [Int32] = [-1, -1]
        let pairOutcome = outcome(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &unixPair))
        unixPair.filter { $0 >= 0 }.forEach { close($0) }
        let file = open("/etc/hostname", O_RDONLY | O_CLOEXEC)
        let read = file >= 0 ? "allowed" : (errno == EACCES ? "EACCES" : String(cString: strerror(errno)))
        if file >= 0 { close(file) }
        return ["socket(AF_INET)": socketOutcome(AF_INET), "socket(AF_INET6)": socketOutcome(AF_INET6),
                "execve": exec, "kill(parent)": signal, "setsid": session, "setpgid": group, "open(/etc/hostname)": read,
                "fcntl(F_SETOWN, parent)": owner, "fcntl(F_SETOWN_EX, parent)": ownerEx, "ioctl(FIOSETOWN, parent)": ownerIoctl,
                "fcntl(F_SETOWN with high bits, parent)": ownerHighBits,
                "prlimit(parent, set)": limits, "setpriority(parent)": parentPriority,
                "setpriority(own group)": groupPriority, "setpriority(self)": ownPriority, "sched_setaffinity(parent)": affinity,
                "ioprio_set(parent)": ioPriority, "ioprio_set(own group)": groupIOPriority,
                "unshare(nothing)": namespaces, "userfaultfd": faults, "keyctl(session keyring)": keys,
                "clone(CLONE_PARENT)": outcome(tc_try_clone(UInt(cloneFlags["CLONE_PARENT"]!))),
                "clone(CLONE_NEWUSER)": outcome(tc_try_clone(UInt(cloneFlags["CLONE_NEWUSER"]!))),
                "clone3": tc_try_clone3() >= 0 ? "allowed" : errno == ENOSYS ? "ENOSYS" : String(cString: strerror(errno)),
                "socket(AF_UNIX)": socketOutcome(AF_UNIX), "socketpair(AF_UNIX)": pairOutcome,
                "shmget": outcome(tc_try_shared_memory_segment()), "memfd_create": outcome(tc_try_memfd()),
                "mmap(shared, anonymous)": outcome(tc_try_shared_mapping())]
    }

    /// Reads this process's data size (heap and anonymous mappings: what RLIMIT_DATA limits) from
    /// `/proc/self/statm`, opened once, before `confineFiles` closes the rest of the file system.
    public final class DataSize {
        private let descriptor: Int32

        public init() { descriptor = open("/proc/self/statm", O_RDONLY | O_CLOEXEC) }

        /// Bytes now (0 when it cannot be read).
        public var bytes: Int {
            var buffer = [UInt8](repeating: 0, count: 256)
            let count = pread(descriptor, &buffer, buffer.count, 0)
            guard count > 0 else { return 0 }
            // statm: size resident shared text lib data dt, in pages.
            let fields = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ")
            guard fields.count >= 6, let pages = Int(fields[5]) else { return 0 }
            return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
        }

        deinit { if descriptor >= 0 { close(descriptor) } }
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
