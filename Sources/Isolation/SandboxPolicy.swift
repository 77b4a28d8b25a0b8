/// The limits a job's child process runs under, set by the server's flags and passed on the child's command line.
public struct SandboxPolicy: Sendable, Codable, Equatable {
    /// Largest data segment plus anonymous mappings (RLIMIT_DATA), in bytes: the heap and every buffer, not the
    /// shared libraries (RLIMIT_AS would count those, and a 1080p x264 encode maps about 1 GB of address space).
    public var dataBytes: Int
    /// Most files open at once (RLIMIT_NOFILE).
    public var openFiles: Int
    /// Scheduling niceness, 0 (as the server) to 19 (yields to everything).
    public var nice: Int

    /// 2 GiB, 256 files, niceness 10.
    public init(dataBytes: Int = 2048 * 1024 * 1024, openFiles: Int = 256, nice: Int = 10) {
        self.dataBytes = dataBytes
        self.openFiles = openFiles
        self.nice = nice
    }

    /// The `run-job` options that carry the policy.
    public var arguments: [String] {
        ["--memory-mib", String(dataBytes / (1024 * 1024)), "--open-files", String(openFiles), "--nice", String(nice)]
    }

    /// Reads the options `arguments` writes (others are left to the caller); nil for a bad value.
    public static func parse(_ options: [String: String]) -> SandboxPolicy? {
        var policy = SandboxPolicy()
        if let text = options["--memory-mib"] {
            guard let mib = Int(text), mib > 0 else { return nil }
            policy.dataBytes = mib * 1024 * 1024
        }
        if let text = options["--open-files"] {
            guard let files = Int(text), files > 3 else { return nil }
            policy.openFiles = files
        }
        if let text = options["--nice"] {
            guard let nice = Int(text), (0...19).contains(nice) else { return nil }
            policy.nice = nice
        }
        return policy
    }
}
