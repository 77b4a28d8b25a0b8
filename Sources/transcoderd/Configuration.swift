import Foundation
import Isolation
import Jobs
import Logging
import Outbound
import Pipeline
import Server
import Webhooks

/// Settings of a long-running transcoderd (`serve`, `work`), from flags, then environment variables, then defaults.
/// Parsed and validated once at start; invalid values stop start-up with one clear line.
struct Configuration: Sendable {
    var data = "./data"
    /// nil: the SQLite file in `data`; else a PostgreSQL URI.
    var store: String?
    /// Seconds a job's claim lasts unless renewed, and between renewals.
    var leaseSeconds = 20.0
    var heartbeatInterval = 5.0
    var workers = 1
    var stallTimeout = 120.0
    var retentionHours: Double?
    var tusExpiryHours = 24.0
    var exitWhenIdle = false
    /// Flags given to `work` that only `serve` uses, passed over (the command says so at start).
    var ignoredFlags: [String] = []
    var host = "127.0.0.1"
    var port = 8080
    var token: String?
    var corsOrigin: String?
    /// Host names answered on a loopback address without a token, besides localhost's (`BrowserGuard`).
    var allowedHosts: [String] = []
    var maxUploadBytes: Int64 = 20 * 1024 * 1024 * 1024
    var maxConnections = 4096
    var handlerThreads = 8
    var probeThreads = 2
    /// Seconds an upload's probe (reading its tracks, in a child) may take.
    var probeTimeout = 30.0
    var headerTimeout = 10.0
    var idleTimeout = 60.0
    var shutdownGrace = 30.0
    var logFormat = "json"
    /// Addresses outbound requests (inputs by URL, webhooks) may reach besides public ones.
    var outboundPolicy = AddressPolicy()
    /// Seconds a download of an input by URL may take in all, and without a byte.
    var fetchTimeout = 3600.0
    var fetchStallTimeout = 30.0
    var fetchThreads = 4
    /// Receives every job's events, besides a job's own webhook.
    var webhookURL: String?
    /// Signs webhooks; nil: the one kept in the data directory (made at first use).
    var webhookSecret: WebhookSecret?
    /// Multiplies the webhook retry schedule (tests run it in seconds).
    var webhookRetryScale = 1.0

    /// The logger the options ask for (on stderr).
    var logger: Logger { Logger(format: logFormat == "text" ? .text : .json) }
    var limits = MediaLimits()
    var sandbox = SandboxPolicy()
    var maxAttempts = 3

    /// One option: its flag, environment variable, default shown in help, and how it is applied.
    struct Option: Sendable {
        let flag: String
        let environment: String
        let help: String
        /// What the option sets, when another option sets it too (`--token` and `--token-file`): a flag for either
        /// keeps both variables unread, and two given at once are refused.
        var setting: String?
        /// Used by `serve` alone (the API and webhooks): `work` passes over its flag, saying so, and its variable.
        var serveOnly: Bool
        let apply: @Sendable (inout Configuration, String) throws(UsageError) -> Void

        init(flag: String, environment: String, help: String, setting: String? = nil, serveOnly: Bool = false,
             apply: @escaping @Sendable (inout Configuration, String) throws(UsageError) -> Void) {
            self.flag = flag
            self.environment = environment
            self.help = help
            self.setting = setting
            self.serveOnly = serveOnly
            self.apply = apply
        }

        /// The setting's name, or the flag's own.
        var sets: String { setting ?? flag }
    }

    struct UsageError: Error, Sendable { let message: String }

    static let options: [Option] = [
        Option(flag: "--data", environment: "TRANSCODER_DATA", help: "data directory (SQLite, uploads, outputs); default ./data") {
            config, value throws(UsageError) in
            guard !value.isEmpty else { throw UsageError(message: "--data: expected a directory, got \"\"") }
            config.data = value
        },
        Option(flag: "--store", environment: "TRANSCODER_STORE",
               help: "where jobs are kept: sqlite (the file in --data) or postgres://user@host/db for nodes sharing one database; default sqlite") {
            config, value throws(UsageError) in
            if value.isEmpty || value == "sqlite" {
                config.store = nil
            } else if value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") {
                config.store = value
            } else {
                // Only what comes before a `:`, `=`, `@` or space: the rest of a URI or keyword string mistyped may
                // hold a password, and this goes to the logs.
                let shown = value.prefix { !":=@ ".contains($0) }.prefix(20)
                throw UsageError(message: "--store: expected sqlite or a postgres:// URI, got \"\(shown)…\" (the rest not shown)")
            }
        },
        Option(flag: "--workers", environment: "TRANSCODER_WORKERS",
               help: "transcodes run at once, 0-64 (serve --workers 0: an API-only node of a shared --store); default 1") {
            config, value throws(UsageError) in
            config.workers = try integer(value, flag: "--workers", range: 0...64)
        },
        Option(flag: "--lease-seconds", environment: "TRANSCODER_LEASE_SECONDS",
               help: "seconds a job's claim lasts unless its node renews it (every quarter of it); a shared store gives the job to another node then; default 20") {
            config, value throws(UsageError) in
            config.leaseSeconds = Double(try integer(value, flag: "--lease-seconds", range: 2...3600))
            config.heartbeatInterval = config.leaseSeconds / 4
        },
        Option(flag: "--stall-timeout", environment: "TRANSCODER_STALL_TIMEOUT",
               help: "seconds without progress before a job fails with `stalled`; default 120") { config, value throws(UsageError) in
            config.stallTimeout = Double(try integer(value, flag: "--stall-timeout", range: 1...86_400))
        },
        Option(flag: "--retention-hours", environment: "TRANSCODER_RETENTION_HOURS",
               help: "delete finished jobs and their files after this many hours; default keep") { config, value throws(UsageError) in
            config.retentionHours = try hours(value, flag: "--retention-hours")
        },
        Option(flag: "--tus-expire-hours", environment: "TRANSCODER_TUS_EXPIRE_HOURS",
               help: "delete an unfinished resumable (tus) upload this many hours after its last bytes; default 24") {
            config, value throws(UsageError) in
            config.tusExpiryHours = try hours(value, flag: "--tus-expire-hours")
        },
        Option(flag: "--host", environment: "TRANSCODER_HOST", help: "address to listen on; default 127.0.0.1 (0.0.0.0 or :: for all)", serveOnly: true) {
            config, value throws(UsageError) in
            guard !value.isEmpty else { throw UsageError(message: "--host: expected an address, got \"\"") }
            config.host = value
        },
        Option(flag: "--port", environment: "TRANSCODER_PORT", help: "TCP port, 1-65535 (0: any free port); default 8080", serveOnly: true) {
            config, value throws(UsageError) in
            config.port = try integer(value, flag: "--port", range: 0...65535)
        },
        Option(flag: "--token", environment: "TRANSCODER_TOKEN",
               help: "require Authorization: Bearer TOKEN on every route but /healthz, /readyz, the web page and GET /v1/session; default none",
               setting: "token", serveOnly: true) {
            config, value throws(UsageError) in
            // An empty one is a mistake (compose's `${TOKEN}` with TOKEN unset), not a wish to let everyone in.
            guard !value.isEmpty else {
                throw UsageError(message: "--token: expected a token, got an empty one (give none at all for no authentication)")
            }
            config.token = try token(value, flag: "--token")
        },
        Option(flag: "--cors-origin", environment: "TRANSCODER_CORS_ORIGIN",
               help: "let pages on these origins (comma-separated, or *) read output files: players of a ladder elsewhere; default none", serveOnly: true) {
            config, value throws(UsageError) in
            for origin in value.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) where origin != "*" {
                guard origin.hasPrefix("http://") || origin.hasPrefix("https://"), !origin.dropFirst(8).contains("/") else {
                    throw UsageError(message: "--cors-origin: expected * or origins like https://player.example.com, got \"\(origin)\"")
                }
            }
            config.corsOrigin = value.isEmpty ? nil : value
        },
        Option(flag: "--allowed-hosts", environment: "TRANSCODER_ALLOWED_HOSTS",
               help: "host names (comma-separated) answered besides localhost when listening on a loopback address without a token, and whose pages may make changes: a proxy's", serveOnly: true) {
            config, value throws(UsageError) in
            config.allowedHosts = []
            for entry in value.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) where !entry.isEmpty {
                // Requests are matched by their host name alone: an entry with a port or a scheme never matched,
                // every request then refused as from a host not allowed.
                guard !entry.contains("/") else {
                    throw UsageError(message: "--allowed-hosts: \"\(entry)\" is a URL; give host names (media.example.com)")
                }
                let bareIPv6 = !entry.hasPrefix("[") && entry.filter { $0 == ":" }.count > 1
                config.allowedHosts.append(bareIPv6 ? entry : BrowserGuard.hostName(entry))
            }
        },
        Option(flag: "--max-upload-bytes", environment: "TRANSCODER_MAX_UPLOAD_BYTES", help: "largest upload in bytes; default 21474836480 (20 GiB)") {
            config, value throws(UsageError) in
            guard let bytes = Int64(value), bytes > 0 else {
                throw UsageError(message: "--max-upload-bytes: expected a positive number of bytes, got \"\(value)\"")
            }
            config.maxUploadBytes = bytes
        },
        Option(flag: "--max-connections", environment: "TRANSCODER_MAX_CONNECTIONS", help: "open connections at most (503 past it; /healthz still answered on 32 more); default 4096", serveOnly: true) {
            config, value throws(UsageError) in
            config.maxConnections = try integer(value, flag: "--max-connections", range: 1...1_000_000)
        },
        Option(flag: "--handler-threads", environment: "TRANSCODER_HANDLER_THREADS",
               help: "threads for requests that use the job store, 1-256; default 8") { config, value throws(UsageError) in
            config.handlerThreads = try integer(value, flag: "--handler-threads", range: 1...256)
        },
        Option(flag: "--probe-threads", environment: "TRANSCODER_PROBE_THREADS",
               help: "threads for requests that upload a file (probed with FFmpeg), 1-64; default 2", serveOnly: true) { config, value throws(UsageError) in
            config.probeThreads = try integer(value, flag: "--probe-threads", range: 1...64)
        },
        Option(flag: "--probe-timeout", environment: "TRANSCODER_PROBE_TIMEOUT",
               help: "seconds reading an upload's tracks may take before it is given up (probe_timeout), 0.001-3600; default 30") {
            config, value throws(UsageError) in
            guard let seconds = Double(value), seconds.isFinite, (0.001...3600).contains(seconds) else {
                throw UsageError(message: "--probe-timeout: expected a number of seconds from 0.001 to 3600, got \"\(value)\"")
            }
            config.probeTimeout = seconds
        },
        Option(flag: "--header-timeout", environment: "TRANSCODER_HEADER_TIMEOUT", help: "seconds to send a request head, and a new connection its first; default 10", serveOnly: true) {
            config, value throws(UsageError) in
            config.headerTimeout = Double(try integer(value, flag: "--header-timeout", range: 1...3600))
        },
        Option(flag: "--idle-timeout", environment: "TRANSCODER_IDLE_TIMEOUT", help: "seconds an idle keep-alive connection stays open; default 60", serveOnly: true) {
            config, value throws(UsageError) in
            config.idleTimeout = Double(try integer(value, flag: "--idle-timeout", range: 1...86_400))
        },
        Option(flag: "--shutdown-grace", environment: "TRANSCODER_SHUTDOWN_GRACE",
               help: "seconds running jobs may finish after SIGTERM before they go back to the queue; default 30") {
            config, value throws(UsageError) in
            config.shutdownGrace = Double(try integer(value, flag: "--shutdown-grace", range: 0...86_400))
        },
        Option(flag: "--max-input-duration", environment: "TRANSCODER_MAX_INPUT_DURATION",
               help: "longest input in seconds; longer ones fail with input_too_long; default 21600 (6 h)") { config, value throws(UsageError) in
            config.limits.maxDuration = Double(try integer(value, flag: "--max-input-duration", range: 1...7 * 86_400))
        },
        Option(flag: "--max-input-dimension", environment: "TRANSCODER_MAX_INPUT_DIMENSION",
               help: "largest input width or height in pixels, refused before decoding (input_too_large); default 8192") {
            config, value throws(UsageError) in
            config.limits.maxDimension = try integer(value, flag: "--max-input-dimension", range: 16...16_384)
        },
        Option(flag: "--max-frame-mib", environment: "TRANSCODER_MAX_FRAME_MIB",
               help: "largest decoded input picture in MiB, refused before decoding; default 512") { config, value throws(UsageError) in
            config.limits.maxFrameBytes = try integer(value, flag: "--max-frame-mib", range: 1...16_384) * 1024 * 1024
        },
        Option(flag: "--job-memory-mib", environment: "TRANSCODER_JOB_MEMORY_MIB",
               help: "memory a job's process may use (heap and buffers, RLIMIT_DATA) in MiB; past it: out_of_memory; default 2048") {
            config, value throws(UsageError) in
            config.sandbox.dataBytes = try integer(value, flag: "--job-memory-mib", range: 64...1_048_576) * 1024 * 1024
        },
        Option(flag: "--job-nice", environment: "TRANSCODER_JOB_NICE",
               help: "scheduling niceness of a job's process, 0-19 (higher yields more to the API); default 10") {
            config, value throws(UsageError) in
            config.sandbox.nice = try integer(value, flag: "--job-nice", range: 0...19)
        },
        Option(flag: "--job-open-files", environment: "TRANSCODER_JOB_OPEN_FILES",
               help: "files a job's process may hold open, 16-65536; default 256") { config, value throws(UsageError) in
            config.sandbox.openFiles = try integer(value, flag: "--job-open-files", range: 16...65_536)
        },
        Option(flag: "--max-attempts", environment: "TRANSCODER_MAX_ATTEMPTS",
               help: "attempts a job may crash in (its process, or the server's) before it fails with worker_crashed, 1-10; default 3") {
            config, value throws(UsageError) in
            config.maxAttempts = try integer(value, flag: "--max-attempts", range: 1...10)
        },
        Option(flag: "--allow-private-urls", environment: "TRANSCODER_ALLOW_PRIVATE_URLS",
               help: "CIDR blocks (comma-separated) that inputs by URL and webhooks may reach besides public addresses, e.g. 10.0.0.0/8; default none") {
            config, value throws(UsageError) in
            switch AddressPolicy.parse(value) {
            case .success(let policy): config.outboundPolicy = policy
            case .failure(let error): throw UsageError(message: "--allow-private-urls: expected CIDR blocks like 10.0.0.0/8, got \"\(error.entry)\"")
            }
        },
        Option(flag: "--fetch-timeout", environment: "TRANSCODER_FETCH_TIMEOUT",
               help: "seconds a download of an input by URL may take; default 3600") { config, value throws(UsageError) in
            config.fetchTimeout = Double(try integer(value, flag: "--fetch-timeout", range: 1...86_400))
        },
        Option(flag: "--fetch-stall-timeout", environment: "TRANSCODER_FETCH_STALL_TIMEOUT",
               help: "seconds a download of an input by URL may go without a byte (or under 1 KiB/s); default 30") { config, value throws(UsageError) in
            config.fetchStallTimeout = Double(try integer(value, flag: "--fetch-stall-timeout", range: 1...3600))
        },
        Option(flag: "--fetch-threads", environment: "TRANSCODER_FETCH_THREADS",
               help: "threads for uploads fetched from a URL (POST /v1/uploads with {\"url\"}), 1-64; default 4", serveOnly: true) { config, value throws(UsageError) in
            config.fetchThreads = try integer(value, flag: "--fetch-threads", range: 1...64)
        },
        Option(flag: "--webhook-url", environment: "TRANSCODER_WEBHOOK_URL",
               help: "http(s) URL that receives every job's events (job.running, job.succeeded, job.failed, job.canceled); default none", serveOnly: true) {
            config, value throws(UsageError) in
            guard !value.isEmpty else {
                config.webhookURL = nil
                return
            }
            guard let url = WebhookTarget.validURL(value) else {
                throw UsageError(message: "--webhook-url: expected an http or https URL, got \"\(RedactedURL.text(value))\"")
            }
            config.webhookURL = url
        },
        Option(flag: "--webhook-secret", environment: "TRANSCODER_WEBHOOK_SECRET",
               help: "whsec_<base64 of 24-64 bytes> that signs webhooks (transcoderd webhook-secret prints a fresh one); "
                   + "default: one kept in the data directory",
               setting: "webhook secret", serveOnly: true) {
            config, value throws(UsageError) in
            // An empty one is a mistake (compose's `${WEBHOOK_SECRET}` unset), as for --token: taken for "none", the
            // server signed with the data directory's own secret, which no receiver had, and every delivery failed.
            guard !value.isEmpty else {
                throw UsageError(message: "--webhook-secret: expected a secret, got an empty one "
                                 + "(give none at all to use the one kept in the data directory)")
            }
            guard let secret = WebhookSecret(value) else {
                throw UsageError(message: "--webhook-secret: expected whsec_ and the base64 of 24 to 64 bytes (transcoderd webhook-secret prints one)")
            }
            config.webhookSecret = secret
        },
        // The secrets from files (a container's mounted secrets): a flag's value is in /proc/PID/cmdline, which
        // every user of the machine can read.
        Option(flag: "--token-file", environment: "TRANSCODER_TOKEN_FILE",
               help: "read the --token from this file (a trailing newline is dropped); keeps it off the command line",
               setting: "token", serveOnly: true) {
            config, value throws(UsageError) in
            config.token = try token(try secret(fromFile: value, flag: "--token-file"), flag: "--token-file")
        },
        Option(flag: "--webhook-secret-file", environment: "TRANSCODER_WEBHOOK_SECRET_FILE",
               help: "read the --webhook-secret from this file (a trailing newline is dropped)",
               setting: "webhook secret", serveOnly: true) {
            config, value throws(UsageError) in
            let text = try secret(fromFile: value, flag: "--webhook-secret-file")
            guard let secret = WebhookSecret(text) else {
                throw UsageError(message: "--webhook-secret-file: \(value) does not hold whsec_ and the base64 of 24 to 64 bytes")
            }
            config.webhookSecret = secret
        },
        Option(flag: "--webhook-retry-scale", environment: "TRANSCODER_WEBHOOK_RETRY_SCALE",
               help: "multiplies the webhook retry schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 24 h); default 1", serveOnly: true) {
            config, value throws(UsageError) in
            guard let scale = Double(value), scale > 0, scale <= 100 else {
                throw UsageError(message: "--webhook-retry-scale: expected a number above 0 and at most 100, got \"\(value)\"")
            }
            config.webhookRetryScale = scale
        },
        Option(flag: "--log-format", environment: "TRANSCODER_LOG_FORMAT", help: "json (one object per line) or text; default json") {
            config, value throws(UsageError) in
            guard value == "json" || value == "text" else { throw UsageError(message: "--log-format: expected json or text, got \"\(value)\"") }
            config.logFormat = value
        },
    ]

    /// The secret a file holds, without the line end an editor or `echo` leaves; refused if there is none.
    static func secret(fromFile path: String, flag: String) throws(UsageError) -> String {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw UsageError(message: "\(flag): cannot read \(path): \(error.localizedDescription)")
        }
        let secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !secret.isEmpty else { throw UsageError(message: "\(flag): \(path) is empty") }
        return secret
    }

    /// A token a client can send in a header: every request would be refused, and nothing would say why, for one
    /// that starts or ends with a space (a header value loses them) or holds a line end or other control character
    /// (a token file of two lines started, and answered 401 to everything), or a character outside ASCII.
    static func token(_ value: String, flag: String) throws(UsageError) -> String {
        guard value.trimmingCharacters(in: .whitespacesAndNewlines) == value else {
            throw UsageError(message: "\(flag): starts or ends with a space or line end, which no client can send; remove it")
        }
        guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw UsageError(message: "\(flag): holds a line end or other control character, which no client can send in a header")
        }
        // curl sends such a token as UTF-8, a browser not at all (past U+00FF) or as Latin-1, which matched nothing:
        // the web page could never sign in with it.
        guard value.unicodeScalars.allSatisfy(\.isASCII) else {
            throw UsageError(message: "\(flag): holds a character outside ASCII, which browsers cannot send in a header (the web page could not sign in); use letters, digits and ASCII punctuation")
        }
        return value
    }

    /// A number of hours from 0.001 (3.6 s) to a hundred years: a huge one (meant as "never") overflowed the dates
    /// made from it and stopped the server at the first upload, a tiny one had its sweep run without pause.
    static func hours(_ value: String, flag: String) throws(UsageError) -> Double {
        guard let hours = Double(value), hours.isFinite, (0.001...876_000).contains(hours) else {
            throw UsageError(message: "\(flag): expected a number of hours from 0.001 (3.6 s) to 876000 (a hundred years), got \"\(value)\"")
        }
        return hours
    }

    static func integer(_ value: String, flag: String, range: ClosedRange<Int>) throws(UsageError) -> Int {
        guard let number = Int(value), range.contains(number) else {
            throw UsageError(message: "\(flag): expected \(range.lowerBound)-\(range.upperBound), got \"\(value)\"")
        }
        return number
    }

    /// Whether a `TRANSCODER_PORT` value is a Kubernetes service link (`tcp://10.96.0.7:8080`), set beside a
    /// Service named transcoder: not a port setting.
    static func isServiceLink(_ value: String) -> Bool {
        value.hasPrefix("tcp://") || value.hasPrefix("udp://")
    }

    /// Reads `arguments` over `environment`; `extraFlags` are boolean flags the command adds. A variable whose
    /// option a flag gives is not read at all: a wrong one (Kubernetes sets `TRANSCODER_PORT=tcp://…` beside a
    /// Service named transcoder) cannot stop a start the flags set right.
    /// - Parameter servesAPI: false for `work`, which passes over the options only `serve` uses, their flags
    ///   listed in `ignoredFlags` (for the command to say so: `work --webhook-url` sent nothing, and nothing said
    ///   why; refused, the same flags given to every node of a cluster stopped its workers) and their variables
    ///   unread (an environment file shared with the API nodes).
    static func parse(_ arguments: [String], environment: [String: String], extraFlags: [String: (inout Configuration) -> Void] = [:],
                      servesAPI: Bool = true) throws(UsageError) -> Configuration {
        var given: [(apply: (inout Configuration) throws(UsageError) -> Void, flag: String)] = []
        var index = 0
        while index < arguments.count {
            var argument = arguments[index]
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                inlineValue = String(argument[argument.index(after: equals)...])
                argument = String(argument[..<equals])
            }
            if let flag = extraFlags[argument] {
                // `--exit-when-idle=false` would have turned it on.
                guard inlineValue == nil else { throw UsageError(message: "\(argument) takes no value") }
                given.append(({ config throws(UsageError) in flag(&config) }, argument))
            } else if let option = options.first(where: { $0.flag == argument }) {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    index += 1
                    guard index < arguments.count else { throw UsageError(message: "\(argument) needs a value") }
                    value = arguments[index]
                }
                if option.serveOnly && !servesAPI {
                    given.append(({ config throws(UsageError) in config.ignoredFlags.append(argument) }, argument))
                } else {
                    given.append(({ config throws(UsageError) in try option.apply(&config, value) }, argument))
                }
            } else {
                throw UsageError(message: "unknown option \(argument)")
            }
            index += 1
        }
        var config = Configuration()
        // A flag keeps every variable of its setting unread (`--token-file` with TRANSCODER_TOKEN="" from an env
        // file failed on the variable); two ways to give one setting at once are refused, not one taken silently.
        let flaggedOptions = given.compactMap { flag in options.first { $0.flag == flag.flag } }
        let flagged = Set(flaggedOptions.map(\.sets))
        for setting in flagged {
            let flags = Set(flaggedOptions.filter { $0.sets == setting }.map(\.flag)).sorted()
            if flags.count > 1 {
                throw UsageError(message: "\(flags.joined(separator: " and ")): give one of them, not both")
            }
        }
        let unread = options(servesAPI: servesAPI).filter { !flagged.contains($0.sets) }
        for setting in Set(unread.compactMap(\.setting)) {
            let set = unread.filter { $0.setting == setting && environment[$0.environment] != nil }.map(\.environment)
            if set.count > 1 {
                throw UsageError(message: "\(set.sorted().joined(separator: " and ")): give one of them, not both")
            }
        }
        for option in unread {
            guard let value = environment[option.environment] else { continue }
            // Kubernetes sets `TRANSCODER_PORT=tcp://10.96.0.7:8080` in every pod of a namespace with a Service named
            // transcoder (a service link, not a setting): taken for the port, it stopped every node, `work` ones
            // (which listen on nothing) and the image's `serve` included.
            if option.environment == "TRANSCODER_PORT", isServiceLink(value) { continue }
            do throws(UsageError) {
                try option.apply(&config, value)
            } catch {
                // Named as it was given: the variable, not a flag nobody typed.
                let message = error.message.hasPrefix(option.flag + ":")
                    ? option.environment + String(error.message.dropFirst(option.flag.count)) : error.message
                throw UsageError(message: message)
            }
        }
        for flag in given { try flag.apply(&config) }
        if config.workers == 0 && config.store == nil {
            throw UsageError(message: "--workers: 0 (an API-only node) needs a shared --store postgres://...; with SQLite nothing else could run the jobs")
        }
        // An address the outbound policy refuses would fail every delivery (a job's URL is checked as the job is
        // made; this one was never): the server started and dropped every event. A name is checked as it resolves.
        if let url = config.webhookURL, let (address, kind) = config.outboundPolicy.refusal(ofURL: url) {
            throw UsageError(message: "--webhook-url: \(address) is a \(kind) address; allow its block with --allow-private-urls")
        }
        return config
    }

    /// Runs each job, and each upload's probe, in a sandboxed child process of this binary; one spare child per
    /// worker, and one for probes, is kept started; what a child writes on its standard error goes to `logger`.
    /// Make one per process.
    func makeRunner(logger: Logger) -> ChildProcessRunner {
        OrphanReaper.startIfInit() // in a container without an init, what a job's child leaves is this process's
        var runner = ChildProcessRunner(policy: sandbox, limits: limits, spares: workers + 1, logger: logger)
        runner.probeTimeout = probeTimeout
        return runner
    }

    /// Checks that a job's process starts and logs what protects it (a warning for a protection not in force);
    /// throws when it cannot start at all, so the server does not take jobs it cannot run.
    func checkSandbox(_ runner: ChildProcessRunner, logger: Logger) throws(MediaError) {
        let report = try runner.check()
        let fields: KeyValuePairs<String, LogValue> = [
            "seccomp": .string(report.seccomp ? "on" : "off: \(report.seccompError ?? "unavailable")"),
            "refused_calls": .string(report.refusedCalls.joined(separator: ",")),
            "no_new_privileges": .string(report.noNewPrivileges ? "on" : "off"),
            "parent_death_signal": .string(report.parentDeathSignal ?? "none"),
            "memory_bytes": .int(report.dataBytes ?? 0), "open_files": .int(report.openFiles ?? 0),
            "core_bytes": .int(report.coreBytes ?? -1), "nice": .int(report.nice),
            "capabilities": .string(report.capabilityError.map { "not dropped: \($0)" } ?? report.capabilities ?? "unknown"),
            "tried": .string((report.tried ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")),
        ]
        logger.log(report.complete ? .info : .warning, "job sandbox", fields)
    }

    /// Prepares and locks the data directory, opens the store, and builds the job queue (not started yet).
    /// The lock must stay alive as long as the queue runs.
    /// With a shared store, the directory is shared storage other nodes use too: no lock, nothing of theirs touched.
    func openQueue(runner: any JobRunner, logger: Logger) throws(StoreError) -> (JobQueue, DirectoryLock?) {
        let directory = DataDirectory(path: data)
        try directory.prepare()
        for (path, mode) in directory.readableByOthers() {
            logger.warning("every local user may read this part of the data directory "
                           + "(it holds input and webhook URLs with their signatures): chmod o-rwx it",
                           ["path": .string(path), "mode": .string(String(mode, radix: 8))])
        }
        let lock: DirectoryLock?
        let jobStore: any JobStore
        if let uri = store {
            lock = nil
            jobStore = try PostgresJobStore(uri: uri, root: directory.root.path, connections: min(8, handlerThreads + workers + 2))
        } else {
            lock = try directory.lock()
            jobStore = try SQLiteJobStore(path: directory.databasePath, root: directory.root.path)
        }
        var queueConfiguration = JobQueue.Configuration()
        queueConfiguration.workers = workers
        queueConfiguration.stallTimeout = stallTimeout
        queueConfiguration.retentionHours = retentionHours
        queueConfiguration.maxAttempts = maxAttempts
        queueConfiguration.leaseSeconds = leaseSeconds
        queueConfiguration.tusExpiryHours = tusExpiryHours
        queueConfiguration.heartbeatInterval = heartbeatInterval
        queueConfiguration.fetcher = fetcher
        queueConfiguration.prober = runner as? any MediaProber
        let queue = JobQueue(store: jobStore, directory: directory, runner: runner, configuration: queueConfiguration, logger: logger)
        return (queue, lock)
    }

    /// Help lines for the options: flag, environment variable, meaning.
    /// The flag column is as wide as the longest flag (`padding(toLength:)` would cut a longer one short).
    /// The options `serve` takes, or (`servesAPI` false) `work`.
    static func options(servesAPI: Bool) -> [Option] {
        options.filter { servesAPI || !$0.serveOnly }
    }

    /// The options a command takes, each with its variable; `servesAPI` false: `work`'s.
    static func help(servesAPI: Bool = true) -> String {
        let listed = options(servesAPI: servesAPI)
        let width = listed.map(\.flag.count).max() ?? 0
        return listed.map { option in
            let gap = String(repeating: " ", count: width - option.flag.count + 1)
            return "  \(option.flag)\(gap)$\(option.environment)\n      \(option.help)"
        }
        .joined(separator: "\n")
    }
}

extension Configuration {
    /// How webhooks are sent: signed with `--webhook-secret`, or else with the secret kept in the data directory's
    /// `webhook-secret` file (made, readable by the owner only, at the first start without the flag).
    func webhookSettings(directory: DataDirectory) throws(StoreError) -> WebhookDispatcher.Settings {
        let secret: WebhookSecret
        if let webhookSecret {
            secret = webhookSecret
        } else {
            let path = directory.root.appendingPathComponent("webhook-secret").path
            if access(path, F_OK) != 0 { try Self.makeWebhookSecret(at: path) }
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw StoreError(code: "storage_error", message: "Reading \(path) failed.")
            }
            guard let kept = WebhookSecret(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw StoreError(code: "invalid_webhook_secret", message: "\(path) does not hold a whsec_ secret; remove it or pass --webhook-secret.")
            }
            secret = kept
        }
        return WebhookDispatcher.Settings(secret: secret, policy: outboundPolicy, schedule: RetrySchedule(scale: webhookRetryScale))
    }

    /// Writes a new secret to `path`, readable by the owner only, unless one is there: written whole and flushed
    /// under a name of its own first, then linked into place, so that nodes starting at once on a shared data
    /// directory all read the one that got there first, and a crash never leaves an empty file every later start
    /// refuses.
    static func makeWebhookSecret(at path: String) throws(StoreError) {
        do throws(MediaError) {
            try FileDurability.createOnce(at: path, text: WebhookSecret.generate().text + "\n", mode: 0o600)
        } catch {
            throw StoreError(code: "storage_error", message: error.message)
        }
    }

    /// Downloads inputs given by URL under the outbound policy and the upload limit.
    var fetcher: URLFetcher {
        URLFetcher(policy: outboundPolicy, maxBytes: maxUploadBytes, timeout: fetchTimeout, stallTimeout: fetchStallTimeout)
    }
}
