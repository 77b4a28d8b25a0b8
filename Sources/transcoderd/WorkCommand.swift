import Dispatch
import Foundation
import Jobs
import Pipeline

/// `transcoderd work`: runs the job queue of a data directory without the HTTP server.
enum WorkCommand {
    static let usage = """
        Usage: transcoderd work [options]

        Runs queued jobs on worker threads, without the HTTP API. With the default store (SQLite in --data), recovery of
        jobs a crashed process left running happens first. With --store postgres://..., it is a worker node of a
        cluster: any number of them (and of API nodes, serve --workers 0) share the database and the --data folder
        on shared storage; a job whose node stops renewing its lease goes to another node. SIGTERM/SIGINT stop it:
        running jobs get --shutdown-grace seconds to finish, then go back to the queue (at once on a second signal;
        a third exits).

        Options (each also read from the environment variable shown):
        \(Configuration.help(servesAPI: false))
          --exit-when-idle
              exit once no job is queued or running (on a shared store: on any node)
        """

    /// Why options `serve` takes make no worker node: no worker (`serve --workers 0` is an API-only node).
    static func refusal(_ config: Configuration) -> String? {
        guard config.workers == 0 else { return nil }
        return "--workers: 0 runs no job on a worker node; give 1 to 64 (an API-only node is serve --workers 0)"
    }

    /// Seconds `--exit-when-idle` goes on asking a store that cannot count the queued jobs.
    static let storeFailureLimit = 60.0

    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(usage)
            return 0
        }
        let config: Configuration
        do {
            config = try Configuration.parse(arguments, environment: ProcessInfo.processInfo.environment,
                                             extraFlags: ["--exit-when-idle": { $0.exitWhenIdle = true }], servesAPI: false)
        } catch {
            Console.error(error.message)
            return 2
        }
        if let refusal = refusal(config) {
            Console.error(refusal)
            return 2
        }
        for flag in config.ignoredFlags {
            config.logger.warning("\(flag): only serve uses it (the API, webhooks); this work node passes it over")
        }
        do {
            let runner = config.makeRunner(logger: config.logger)
            defer { runner.shutdown() }
            let (queue, lock) = try config.openQueue(runner: runner, logger: config.logger)
            try config.checkSandbox(runner, logger: config.logger)
            defer { withExtendedLifetime(lock) {} }
            let stop = DispatchSemaphore(value: 0)
            let signals = Signals.onTerminateThenExit({ stop.signal() }, hurry: {
                config.logger.info("shutting down now: the running jobs go back to the queue")
                queue.endGrace()
            })
            defer { signals.cancel() }
            try queue.start()
            config.logger.info("worker node ready", ["workers": .int(config.workers), "data": .string(queue.directory.root.path),
                                                     "store": .string(queue.store.isShared ? "postgresql" : "sqlite")])
            defer { queue.store.close() }
            var failingSince: Date?
            var status: Int32 = 0
            while true {
                // Once a second: the count reads the whole jobs table.
                if stop.wait(timeout: .now() + 1) == .success { break }
                // The store's count first: a job claimed after it is read is being claimed or running by then. A
                // store that cannot answer for a moment (a failover) is asked again, the running jobs going on
                // meanwhile; one that cannot for a minute ends the command.
                guard config.exitWhenIdle else { continue }
                do {
                    let counts = try queue.store.counts()
                    failingSince = nil
                    // On a shared store, the jobs other nodes run too: one whose node dies goes back to the queue
                    // when its lease runs out, and with every idle worker gone it stayed there for good.
                    let running = queue.store.isShared ? counts[.running] ?? 0 : 0
                    // Queued jobs this node leaves to others (their settings are a newer version's) are not its work:
                    // it waited for them until their grace ran out (a day), then failed them.
                    // Looked up only once nothing else keeps the node (a busy node looked them up every second).
                    let queued = counts[.queued] ?? 0
                    guard running == 0, queue.isIdle else { continue }
                    var othersOnly = false
                    if queued > 0, case let left = queue.jobsLeftToOthers, left.count >= queued {
                        var leftQueued = 0
                        for id in left where try queue.store.job(id: id)?.state == .queued { leftQueued += 1 }
                        othersOnly = leftQueued == queued
                    }
                    if queued == 0 || othersOnly { break }
                } catch {
                    if failingSince == nil {
                        failingSince = Date()
                        config.logger.warning("could not count the queued jobs; asking again", ["error": .string(error.description)])
                    } else if let since = failingSince, Date().timeIntervalSince(since) > Self.storeFailureLimit {
                        Console.error("The store could not count the queued jobs for \(Int(Self.storeFailureLimit)) s: \(error)")
                        status = 1
                        break
                    }
                }
            }
            queue.stop(grace: config.shutdownGrace)
            return status
        } catch {
            Console.error("\(error)")
            return 1
        }
    }
}
