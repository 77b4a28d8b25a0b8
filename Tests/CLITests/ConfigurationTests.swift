import Foundation
import Jobs
import Pipeline
import Testing
import TestSupport
@testable import transcoderd

/// The options of `serve` and `work`, from flags over environment variables, and what a start does before its
/// workers claim anything.
@Suite struct ConfigurationTests {
    /// Kubernetes sets `TRANSCODER_PORT=tcp://10.96.0.7:8080` in every pod beside a Service named transcoder (a
    /// service link): a flag giving the port wins without the variable being read, and without one the link is no
    /// port setting (it stopped every node, the image's `serve` and `work` included). Any other bad value names
    /// the variable.
    @Test func aFlagWinsWithoutItsVariableBeingRead() throws {
        let environment = ["TRANSCODER_PORT": "tcp://10.96.0.7:8080", "TRANSCODER_WORKERS": "3"]
        let config = try Configuration.parse(["--port", "9000"], environment: environment)
        #expect(config.port == 9000 && config.workers == 3)
        #expect(try Configuration.parse(["--port=9001"], environment: environment).port == 9001)
        for link in ["tcp://10.96.0.7:9999", "udp://10.96.0.7:9999"] {
            let linked = try Configuration.parse([], environment: ["TRANSCODER_PORT": link, "TRANSCODER_WORKERS": "3"])
            #expect(linked.port == 8080 && linked.workers == 3, "the link's port is no setting: \(linked.port)")
        }
        let error = #expect(throws: Configuration.UsageError.self) { try Configuration.parse([], environment: ["TRANSCODER_PORT": "80a"]) }
        #expect(error?.message.hasPrefix("TRANSCODER_PORT: expected 0-65535") == true, "\(String(describing: error))")
    }

    /// Requests are matched by host name alone: an allowed host given with a port names its host, and a URL is
    /// refused (either matched nothing, and every request was refused as from a host not allowed).
    @Test func allowedHostsAreHostNames() throws {
        let config = try Configuration.parse(["--allowed-hosts", "Media.example.com:8443, [fe80::1]:80, fe80::2,proxy"], environment: [:])
        #expect(config.allowedHosts == ["media.example.com", "fe80::1", "fe80::2", "proxy"], "\(config.allowedHosts)")
        let error = #expect(throws: Configuration.UsageError.self) { try Configuration.parse(["--allowed-hosts", "https://media.example.com"], environment: [:]) }
        #expect(error?.message.contains("is a URL") == true, "\(String(describing: error))")
    }

    /// The connections an open-file limit holds beside the rest (a cap above it is warned of at start).
    @Test func connectionsHeldByAFileLimit() {
        // Two files each: the socket, and an upload or a download.
        #expect(ServeCommand.connectionsHeld(fileLimit: 1_048_576) == (1_048_576 - ServeCommand.filesBesideConnections) / 2)
        #expect(ServeCommand.connectionsHeld(fileLimit: 1024) == (1024 - ServeCommand.filesBesideConnections) / 2)
        #expect(ServeCommand.connectionsHeld(fileLimit: 1400)! < 1000, "a limit of 1,400 does not hold 1,000 uploads")
        #expect(ServeCommand.connectionsHeld(fileLimit: nil) == nil && ServeCommand.connectionsHeld(fileLimit: 10) == 0)
    }

    /// A store that is not one is refused without showing what may be its password (the message goes to the logs).
    @Test func aWrongStoreIsRefusedWithoutItsPassword() throws {
        for (value, shown) in [("password=hunter2 host=db", "password"), ("postgres:/user:hunter2@db/jobs", "postgres"),
                               ("mysql://user:hunter2@db", "mysql")] {
            let error = #expect(throws: Configuration.UsageError.self) { try Configuration.parse(["--store", value], environment: [:]) }
            #expect(error?.message.hasPrefix("--store: expected sqlite or a postgres:// URI") == true
                    && error?.message.contains("got \"\(shown)…\"") == true && error?.message.contains("hunt") == false,
                    "\(String(describing: error))")
        }
    }

    /// An empty token (compose's `${TOKEN}` with TOKEN unset) is refused, not taken for "no authentication".
    @Test func anEmptyTokenIsRefused() throws {
        #expect(throws: Configuration.UsageError.self) { try Configuration.parse(["--token", ""], environment: [:]) }
        let error = #expect(throws: Configuration.UsageError.self) { try Configuration.parse([], environment: ["TRANSCODER_TOKEN": ""]) }
        #expect(error?.message.hasPrefix("TRANSCODER_TOKEN: expected a token") == true, "\(String(describing: error))")
        #expect(try Configuration.parse([], environment: ["TRANSCODER_TOKEN": "s3cret"]).token == "s3cret")
    }

    /// A token no client can send (a space or line end at either end: a header value loses them) is refused, not
    /// kept to refuse every request with nothing saying why; an empty webhook secret (compose's `${SECRET}` unset)
    /// is refused as an empty token is: taken for "none", deliveries were signed with the data directory's own
    /// secret, which no receiver had.
    @Test func secretsNoOneCouldMatchAreRefused() throws {
        for token in [" s3cret", "s3cret ", "s3cret\n", "\ts3cret"] {
            let error = #expect(throws: Configuration.UsageError.self, "\(token.debugDescription)") {
                try Configuration.parse([], environment: ["TRANSCODER_TOKEN": token])
            }
            #expect(error?.message.hasPrefix("TRANSCODER_TOKEN: starts or ends with a space") == true, "\(String(describing: error))")
        }
        #expect(try Configuration.parse(["--token", "s3 cret"], environment: [:]).token == "s3 cret")
        // Nor a line end or other control character within it: a token file of two lines started, and everything
        // was answered 401.
        for token in ["abc\ndef", "abc\r\ndef", "ab\tc", "ab\u{7F}c"] {
            let error = #expect(throws: Configuration.UsageError.self, "\(token.debugDescription)") {
                try Configuration.parse(["--token", token], environment: [:])
            }
            #expect(error?.message.hasPrefix("--token: holds a line end or other control character") == true, "\(String(describing: error))")
        }
        // Nor one outside ASCII: a browser sends it as Latin-1 or not at all, and the web page could never sign in.
        for (arguments, environment) in [(["--token", "pässwort"], [String: String]()), ([], ["TRANSCODER_TOKEN": "pass€"])] {
            let error = #expect(throws: Configuration.UsageError.self, "\(arguments) \(environment)") {
                try Configuration.parse(arguments, environment: environment)
            }
            #expect(error?.message.contains("holds a character outside ASCII") == true, "\(String(describing: error))")
        }
        #expect(try Configuration.parse(["--token", "a-Z_0.9~+/=!"], environment: [:]).token == "a-Z_0.9~+/=!")
        let twoLines = try Media.scratch().appendingPathComponent("token")
        try Data("abc\ndef\n".utf8).write(to: twoLines)
        let fromFile = #expect(throws: Configuration.UsageError.self) { try Configuration.parse(["--token-file", twoLines.path], environment: [:]) }
        #expect(fromFile?.message.hasPrefix("--token-file: holds a line end") == true, "\(String(describing: fromFile))")
        for arguments in [["--webhook-secret", ""], ["--webhook-secret="]] {
            let error = #expect(throws: Configuration.UsageError.self) { try Configuration.parse(arguments, environment: [:]) }
            #expect(error?.message.hasPrefix("--webhook-secret: expected a secret, got an empty one") == true, "\(String(describing: error))")
        }
        let error = #expect(throws: Configuration.UsageError.self) { try Configuration.parse([], environment: ["TRANSCODER_WEBHOOK_SECRET": ""]) }
        #expect(error?.message.hasPrefix("TRANSCODER_WEBHOOK_SECRET: expected a secret") == true, "\(String(describing: error))")
    }

    /// `--token` and `--token-file` set one thing: a flag for either keeps both variables unread (`--token-file`
    /// with TRANSCODER_TOKEN="" from an env file failed on the variable; `--token` failed on a TRANSCODER_TOKEN_FILE
    /// naming no file), and two ways at once are refused (with both variables set, the file won silently).
    @Test func aFlagKeepsEveryVariableOfItsSettingUnread() throws {
        let folder = try Media.scratch()
        let token = folder.appendingPathComponent("token")
        try Data("from-file\n".utf8).write(to: token)
        #expect(try Configuration.parse(["--token-file", token.path], environment: ["TRANSCODER_TOKEN": ""]).token == "from-file")
        #expect(try Configuration.parse(["--token", "flag"], environment: ["TRANSCODER_TOKEN_FILE": folder.appendingPathComponent("none").path]).token == "flag")
        let both = #expect(throws: Configuration.UsageError.self) {
            try Configuration.parse([], environment: ["TRANSCODER_TOKEN": "variable", "TRANSCODER_TOKEN_FILE": token.path])
        }
        #expect(both?.message == "TRANSCODER_TOKEN and TRANSCODER_TOKEN_FILE: give one of them, not both", "\(String(describing: both))")
        let flags = #expect(throws: Configuration.UsageError.self) {
            try Configuration.parse(["--token-file", token.path, "--token", "flag"], environment: [:])
        }
        #expect(flags?.message == "--token and --token-file: give one of them, not both", "\(String(describing: flags))")
        let whsec = "whsec_" + Data((0..<32).map { UInt8($0) }).base64EncodedString()
        #expect(try Configuration.parse(["--webhook-secret", whsec], environment: ["TRANSCODER_WEBHOOK_SECRET_FILE": "/nonexistent"]).webhookSecret?.text == whsec)
    }

    /// A worker node with no worker runs nothing, for ever (with --exit-when-idle it waited on the other nodes).
    /// `work` passes over what only `serve` does (the API, webhooks) and says so: `work --webhook-url` started and
    /// sent nothing, and nothing said so. (Refused, the same flags given to every node of a cluster would stop its
    /// workers.) Their variables are passed over (an environment file shared with the API nodes), and its help
    /// lists only what it takes.
    @Test func aWorkerNodeSaysItPassesOverWhatOnlyTheAPIUses() throws {
        for arguments in [["--webhook-url", "https://example.com/hook"], ["--port", "9999"], ["--token", "abc"], ["--max-connections", "5"],
                          ["--cors-origin=*"]] {
            let config = try Configuration.parse(arguments, environment: [:], servesAPI: false)
            let flag = String(arguments[0].split(separator: "=")[0])
            #expect(config.ignoredFlags == [flag] && config.port == 8080 && config.token == nil && config.webhookURL == nil,
                    "\(arguments): \(config.ignoredFlags)")
            #expect(try Configuration.parse(arguments, environment: [:]).ignoredFlags.isEmpty)
        }
        let shared = ["TRANSCODER_PORT": "8080", "TRANSCODER_TOKEN": "abc", "TRANSCODER_TOKEN_FILE": "/nowhere", "TRANSCODER_WORKERS": "3",
                      "TRANSCODER_FETCH_TIMEOUT": "90"]
        let worker = try Configuration.parse([], environment: shared, servesAPI: false)
        #expect(worker.workers == 3 && worker.fetchTimeout == 90 && worker.token == nil)
        // What a worker does use is still taken: it fetches inputs given by URL, and reads the store.
        #expect(try Configuration.parse(["--fetch-timeout", "60", "--allow-private-urls", "10.0.0.0/8"], environment: [:], servesAPI: false).fetchTimeout == 60)
        let run = try Shell.run(Binary.path, ["work", "--webhook-url", "https://example.com/hook", "--exit-when-idle",
                                              "--data", try Media.scratch().appendingPathComponent("data").path])
        #expect(run.status == 0 && run.stderr.contains("--webhook-url: only serve uses it"), "\(run.status): \(run.stderr)")
        let help = try Shell.run(Binary.path, ["work", "--help"]).stdout
        #expect(!help.contains("--webhook-url") && !help.contains("--port ") && help.contains("--fetch-timeout") && help.contains("--store"), "\(help)")
    }

    @Test func aWorkerNodeWithoutWorkersIsRefused() throws {
        let run = try Shell.run(Binary.path, ["work", "--workers", "0", "--store", "postgres://nobody@127.0.0.1:1/none", "--exit-when-idle",
                                              "--data", try Media.scratch().appendingPathComponent("data").path])
        #expect(run.status == 2 && run.stderr.contains("--workers: 0 runs no job on a worker node"), "\(run.status): \(run.stderr)")
        #expect(WorkCommand.refusal(try Configuration.parse(["--workers", "0", "--store", "postgres://nobody@127.0.0.1:1/none"], environment: [:]))
                == "--workers: 0 runs no job on a worker node; give 1 to 64 (an API-only node is serve --workers 0)")
        #expect(WorkCommand.refusal(try Configuration.parse(["--store", "postgres://nobody@127.0.0.1:1/none"], environment: [:])) == nil)
    }

    /// Hours are 0.001 (3.6 s) to a hundred years: `--tus-expire-hours 1e16` (meant as "never") was taken, and the
    /// server trapped making the first upload's `Upload-Expires` date; `1e-9` had the sweep run without pause.
    @Test func hoursOutOfReachAreRefused() throws {
        for flag in ["--tus-expire-hours", "--retention-hours"] {
            for value in ["1e16", "876001", "1e-9", "0.0009", "0", "-1", "inf", "nan", "soon"] {
                let error = #expect(throws: Configuration.UsageError.self, "\(flag) \(value)") { try Configuration.parse([flag, value], environment: [:]) }
                #expect(error?.message.contains("a hundred years") == true, "\(String(describing: error))")
            }
        }
        #expect(try Configuration.parse(["--tus-expire-hours", "0.001"], environment: [:]).tusExpiryHours == 0.001)
        #expect(try Configuration.parse(["--tus-expire-hours", "876000"], environment: [:]).tusExpiryHours == 876_000)
        #expect(try Configuration.parse([], environment: ["TRANSCODER_RETENTION_HOURS": "720"]).retentionHours == 720)
    }

    /// The token and the webhook secret can come from files (a container's mounted secrets), the line end left by
    /// an editor dropped: as flags they were in /proc/PID/cmdline for every user of the machine to read. And a server
    /// started so answers to that token, with its command line free of it.
    @Test func secretsComeFromFiles() throws {
        let folder = try Media.scratch()
        let token = folder.appendingPathComponent("token"), secret = folder.appendingPathComponent("secret")
        let empty = folder.appendingPathComponent("empty"), wrong = folder.appendingPathComponent("wrong")
        let whsec = "whsec_" + Data((0..<32).map { UInt8($0) }).base64EncodedString()
        try Data("s3cret-from-file\n".utf8).write(to: token)
        try Data("\(whsec)\n".utf8).write(to: secret)
        try Data("\n".utf8).write(to: empty)
        try Data("not a secret\n".utf8).write(to: wrong)
        let config = try Configuration.parse(["--token-file", token.path, "--webhook-secret-file", secret.path], environment: [:])
        #expect(config.token == "s3cret-from-file" && config.webhookSecret?.text == whsec)
        #expect(try Configuration.parse([], environment: ["TRANSCODER_TOKEN_FILE": token.path]).token == "s3cret-from-file")
        for (arguments, problem) in [(["--token-file", empty.path], "is empty"), (["--token-file", folder.appendingPathComponent("none").path], "cannot read"),
                                     (["--webhook-secret-file", wrong.path], "does not hold whsec_")] {
            let error = #expect(throws: Configuration.UsageError.self, "\(arguments)") { try Configuration.parse(arguments, environment: [:]) }
            #expect(error?.message.contains(problem) == true, "\(String(describing: error))")
        }
        let server = try TestServer(["--token-file", token.path])
        #expect(try server.curl("/v1/jobs").status == 401)
        #expect(try server.curl("/v1/jobs", ["-H", "Authorization: Bearer s3cret-from-file"]).status == 200)
        let commandLine = try Data(contentsOf: URL(fileURLWithPath: "/proc/\(server.process.processIdentifier)/cmdline"))
        #expect(!String(decoding: commandLine, as: UTF8.self).contains("s3cret"), "the token is not on the command line")
    }

    /// `--exit-when-idle=false` turned the option on.
    @Test func aSwitchGivenAValueIsRefused() throws {
        let flags: [String: (inout Configuration) -> Void] = ["--exit-when-idle": { $0.exitWhenIdle = true }]
        #expect(throws: Configuration.UsageError.self) {
            try Configuration.parse(["--exit-when-idle=false"], environment: [:], extraFlags: flags)
        }
        #expect(try Configuration.parse(["--exit-when-idle"], environment: [:], extraFlags: flags).exitWhenIdle)
    }

    /// A new data folder and its database are not for every local user: the database holds webhook and input URLs
    /// whose secrets the API hides (they were 0755 and 0644 under the usual umask; SQLite gives its journals the
    /// database's mode).
    @Test func aNewDataFolderAndItsDatabaseAreNotWorldReadable() throws {
        let root = try Media.scratch().appendingPathComponent("fresh").path
        let run = try Shell.run(Binary.path, ["work", "--data", root, "--exit-when-idle"])
        #expect(run.status == 0, "\(run.stderr)")
        let mode = { (path: String) in (try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1 }
        #expect(mode(root) == 0o750, "\(String(mode(root), radix: 8))")
        let database = DataDirectory(path: root).databasePath
        #expect(mode(database) == 0o600, "\(String(mode(database), radix: 8))")
        #expect(!run.stderr.contains("every local user may read"), "\(run.stderr)")
        // One made before (0755 and 0644 under the usual umask) keeps its modes, and a start says so, naming each.
        chmod(root, 0o755)
        chmod(database, 0o644)
        let old = try Shell.run(Binary.path, ["work", "--data", root, "--exit-when-idle"])
        #expect(old.status == 0, "\(old.stderr)")
        let warnings = old.stderr.split(separator: "\n").filter { $0.contains("every local user may read") }
        #expect(warnings.count == 2 && warnings.contains { $0.contains(#""mode":"755""#) } && warnings.contains { $0.contains(#""mode":"644""#) },
                "\(old.stderr)")
    }

    /// A start that fails on the webhook secret fails before its workers claim a job: each such start (a restart
    /// policy tries again and again) spent an attempt of the jobs it claimed, until they failed as crashed.
    @Test func aStartRefusedForItsWebhookSecretClaimsNothing() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.standard))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let secret = fixture.directory.root.appendingPathComponent("webhook-secret")
        try Data("not a secret\n".utf8).write(to: secret)
        defer { try? FileManager.default.removeItem(at: secret) }
        for _ in 0..<2 {
            let run = try Shell.run(Binary.path, ["serve", "--data", fixture.directory.root.path, "--port", "0"])
            #expect(run.status == 1 && run.stderr.contains("does not hold a whsec_ secret"), "\(run.status) \(run.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.directory.storeIdentityPath), "the queue never started")
        let stored = try #require(try fixture.store.job(id: job.id))
        #expect(stored.state == .queued && stored.attempts == 1 && stored.startedAt == nil, "\(stored.state) after \(stored.attempts) attempts")
    }

    /// A port the server cannot have (another process listens there) fails the start before its workers claim
    /// anything: they claimed a job, started its child, handed it back, and sent its webhook, at every restart.
    @Test func aStartRefusedForItsPortClaimsNothing() throws {
        let fixture = try StoreFixture()
        let upload = try fixture.upload(try Media.path(.standard))
        let job = try fixture.store.createJob(input: upload.id, settings: TranscodeSettings())
        let taken = try SilentListener(backlog: 1)
        defer { taken.close() }
        let run = try Shell.run(Binary.path, ["serve", "--data", fixture.directory.root.path, "--host", "127.0.0.1", "--port", String(taken.port),
                                              "--webhook-url", "http://127.0.0.1:9/hook", "--allow-private-urls", "127.0.0.0/8", "--workers", "2"])
        #expect(run.status == 1 && run.stderr.contains(String(taken.port)), "\(run.status) \(run.stderr) \(run.stdout)")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory.storeIdentityPath), "the queue never started")
        let stored = try #require(try fixture.store.job(id: job.id))
        #expect(stored.state == .queued && stored.leaseToken == job.leaseToken, "claimed: lease token \(job.leaseToken) → \(stored.leaseToken)")
        #expect(try fixture.store.deliveries(jobID: job.id).isEmpty, "no webhook for a job that never ran")
    }
}
