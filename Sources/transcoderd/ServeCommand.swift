import Logging
import Dispatch
import Foundation
import Jobs
import Pipeline
import Server
import Locks
import Outbound
import Webhooks

/// `transcoderd serve`: the HTTP API and the job queue over one data directory.
enum ServeCommand {
    static let usage = """
        Usage: transcoderd serve [options]

        Serves the HTTP API (uploads, jobs, live progress, downloads) and runs the job queue. Jobs and uploads live
        in the data directory (SQLite file transcoderd.sqlite, uploads/, outputs/), created if missing.
        SIGTERM/SIGINT: stop accepting, finish requests in flight, let running jobs finish for --shutdown-grace
        seconds, send the rest back to the queue for the next start, exit 0. A second signal ends the grace (the
        running jobs go back to the queue now); a third exits at once.

        Options (each also read from the environment variable shown; flags win):
        \(Configuration.help())
        """

    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(usage)
            return 0
        }
        let config: Configuration
        do {
            config = try Configuration.parse(arguments, environment: ProcessInfo.processInfo.environment)
        } catch {
            Console.error(error.message)
            return 2
        }
        let logger = config.logger
        let fileLimit = raiseFileLimit()
        do {
            let runner = config.makeRunner(logger: logger)
            defer { runner.shutdown() }
            let (queue, lock) = try config.openQueue(runner: runner, logger: logger)
            try config.checkSandbox(runner, logger: logger)
            defer { withExtendedLifetime(lock) {} }
            // Read before the workers start: a failure after they claimed jobs would leave them claimed.
            let webhookSettings = try config.webhookSettings(directory: queue.directory)
            var serverConfig = HTTPServerConfiguration(uploadDirectory: queue.directory.uploads)
            serverConfig.host = config.host
            serverConfig.port = config.port
            serverConfig.maxUploadBytes = config.maxUploadBytes
            serverConfig.maxConnections = config.maxConnections
            if let held = connectionsHeld(fileLimit: fileLimit), held < config.maxConnections {
                // Said, not changed: the server answers 503 past the cap, and out of descriptors it rests its
                // listeners; what fails first past the limit is the rest (uploads, the store, children's pipes).
                logger.warning("the open-file limit holds fewer connections than --max-connections: past them, uploads and jobs fail for want of files; raise the limit or lower --max-connections",
                               ["max_connections": .int(config.maxConnections), "connections_held": .int(held),
                                "file_limit": .int(fileLimit ?? 0)])
            }
            serverConfig.headerTimeout = config.headerTimeout
            serverConfig.idleTimeout = config.idleTimeout
            serverConfig.handlerThreads = config.handlerThreads
            serverConfig.probeThreads = config.probeThreads
            serverConfig.fetchThreads = config.fetchThreads
            // Shared storage: partial uploads of a node that died are the ones left alone for an hour, as the stray
            // sweep takes them. A store of its own: the queue removed them all as it started, before its workers
            // began fetching inputs (named alike), which a sweep now would delete.
            serverConfig.leftoverUploadAge = queue.store.isShared ? DataDirectory.abandonedUploadAge : nil
            let metricsBox = LockedValue<ServerMetrics?>(nil)
            let dispatcherBox = LockedValue<WebhookDispatcher?>(nil)
            let api = TranscoderAPI(queue: queue, prober: runner, logger: logger, cors: CORSPolicy(config.corsOrigin),
                                    tusExpiryHours: config.tusExpiryHours, maxUploadBytes: config.maxUploadBytes,
                                    fetcher: config.fetcher, serverWebhookURL: config.webhookURL,
                                    authentication: BearerToken(config.token)) {
                Prometheus.render(server: metricsBox.withLock { $0 }, queue: queue,
                                  webhookAttempts: dispatcherBox.withLock { $0?.attemptCounts } ?? [:])
            }
            // The API nodes send webhooks: each job's JSON as the API shows it.
            let dispatcher = WebhookDispatcher(store: queue.store, settings: webhookSettings,
                                               logger: logger) { job in api.jobData(job) }
            dispatcherBox.withLock { $0 = dispatcher }
            let server: HTTPServer
            do {
                // Loopback by where it listens, however `--host` spells it (a name the hosts file maps to 127.0.1.1
                // bound there with no Host check); the name given is then one a request may use.
                let host = config.host.lowercased()
                let loopbackOnly = BrowserGuard.isLoopback(host) || BrowserGuard.resolvesToLoopbackOnly(host)
                let browsers = BrowserGuard(cors: CORSPolicy(config.corsOrigin), checksHost: config.token == nil && loopbackOnly,
                                            allowedHosts: config.allowedHosts + (BrowserGuard.isLoopback(host) ? [] : [host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))]))
                let authentication = api.authentication
                server = try HTTPServer(configuration: serverConfig, router: api.router, logger: logger,
                                        authenticate: { head in browsers.check(head) ?? authentication.check(head) })
                metricsBox.withLock { $0 = server.metrics }
                // Bound before the workers start: a port taken (or a host that does not resolve) failed the start
                // after they had claimed jobs, started their children, and sent their webhooks, every restart.
                try server.bindListeners()
            }
            let recovered = try queue.start()
            if !recovered.requeued.isEmpty || !recovered.failed.isEmpty {
                logger.info("recovered jobs left running", ["requeued": .int(recovered.requeued.count), "failed": .int(recovered.failed.count)])
            }
            queue.events.watchChanges { dispatcher.wake() }
            dispatcher.start()
            // On a failure to start; a stop by signal stops it within the grace, below.
            defer { dispatcher.stop(timeout: 0) }
            // What was written before the loops answer anything is what a crash left (a tenth of a second for a file
            // system's coarse clock): the first pass leaves alone what requests write from here, as later ones do. On
            // a shared data folder other nodes' requests write meanwhile too: their last 5 s are left, as by later passes.
            let started = Date().timeIntervalSince1970 - (queue.store.isShared ? 5 : 0.1)
            do {
                try server.start()
            } catch {
                // The loops could not start: the workers stop before the spare children go, and jobs go back to the queue.
                queue.stop(grace: 0)
                throw error
            }
            logger.info("listening", ["host": .string(config.host), "port": .int(server.port), "data": .string(queue.directory.root.path),
                                      "workers": .int(config.workers), "store": .string(queue.store.isShared ? "postgresql" : "sqlite")])
            // At start, and then as often as expired uploads are swept: an upload whose bytes all arrived but whose
            // completion failed for now (the store or the disk) is completed once it can be, though its client
            // never asks again; before, it waited for a restart, and was deleted as expired a day later.
            let recoveryStop = DispatchSemaphore(value: 0)
            NamedThread.start("tus-recovery") {
                // At start every one a crash left, the latest too; not one a request wrote since the loops started
                // (a completion whose probe ran out of time a moment ago was tried again at once: a try of three gone,
                // where its client was told to ask again in 5 s).
                api.completeInterruptedUploads(writtenBefore: started)
                while recoveryStop.wait(timeout: .now() + min(60, config.tusExpiryHours * 900)) == .timedOut {
                    api.completeInterruptedUploads()
                }
            }
            let stop = DispatchSemaphore(value: 0)
            let hurried = LockedValue(false)
            let sources = Signals.onTerminateThenExit({ stop.signal() }, hurry: {
                logger.info("shutting down now: the running jobs go back to the queue")
                hurried.withLock { $0 = true }
                server.endGrace()
                queue.endGrace()
            })
            defer { sources.cancel() }
            stop.wait()
            recoveryStop.signal()
            logger.info("shutting down", ["grace_seconds": .int(Int(config.shutdownGrace))])
            // One grace for both, counted from the signal: a compose file's stop period a little over it holds.
            let stopping = Date()
            queue.stopTakingJobs()
            server.stop(grace: min(config.shutdownGrace, 10))
            queue.stop(grace: max(0, config.shutdownGrace - Date().timeIntervalSince(stopping)))
            // The webhook senders, within what is left of the grace (a second at least), before the store closes:
            // one waiting on a receiver that does not answer (15 s) kept the process past the grace, and past a
            // compose file's stop period, killed. What is not sent stays owed in the store, sent after a restart.
            dispatcher.stop(timeout: hurried.withLock { $0 } ? 1 : max(1, config.shutdownGrace - Date().timeIntervalSince(stopping)))
            queue.store.close()
            logger.info("stopped")
            return 0
        } catch let error as StoreError {
            Console.error(error.message)
            return 1
        } catch let error as MediaError {
            Console.error(error.description)
            return 1
        } catch let error as IOError {
            Console.error(error.description)
            return 1
        } catch {
            Console.error("\(error)")
            return 1
        }
    }

    /// Lets the process hold as many connections as the hard limit allows; returns the limit now (nil: unknown).
    private static func raiseFileLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) != 0 { _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) }
        }
        return limit.rlim_cur == rlim_t.max ? nil : Int(clamping: limit.rlim_cur) // rlim_t.max: RLIM_INFINITY
    }

    /// Files the server keeps besides its connections: the 32 answered past the cap (`/healthz`), those turned away
    /// past them while they linger, listening sockets, the store, uploads being written, downloads being read,
    /// children's pipes, the log.
    static let filesBesideConnections = 32 + HTTPServer.lingering(eventLoops: HTTPServerConfiguration.defaultEventLoops) + 224

    /// The connections the open-file limit leaves room for beside the rest (nil: no limit known), each with its
    /// socket and a file (an upload being written, a download being read): a cap above it is warned of at start.
    /// Counted at one each, a limit of 1,400 passed 1,000 connections, and 143 of 760 uploads failed for want of
    /// files.
    static func connectionsHeld(fileLimit: Int?) -> Int? {
        fileLimit.map { max(0, $0 - filesBesideConnections) / 2 }
    }
}
