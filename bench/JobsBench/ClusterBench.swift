import Foundation
import Jobs
import Pipeline

/// The queue on PostgreSQL across processes: enqueue-to-start latency on an idle cluster, and the throughput of
/// trivial jobs with 1, 2 and 4 worker processes (each a `JobQueue` with one worker thread on its own connections,
/// as `transcoderd work` runs it, with a runner that does nothing: this measures claims, leases and records).
enum ClusterBench {
    /// `jobs-bench cluster-worker URI DATA`: a worker node until killed.
    static func worker(uri: String, data: String) throws -> Never {
        let directory = DataDirectory(path: data)
        let store = try PostgresJobStore(uri: uri, root: directory.root.path)
        var configuration = JobQueue.Configuration()
        configuration.workers = 1
        let queue = JobQueue(store: store, directory: directory, runner: TrivialRunner(), configuration: configuration)
        try queue.start()
        while true { sleep(60) }
    }

    /// `jobs-bench cluster URI [JOBS]`.
    static func run(uri: String, jobs: Int) throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("cluster-bench-\(UUID().uuidString)")
        let directory = DataDirectory(path: folder.path)
        try directory.prepare()
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try PostgresJobStore(uri: uri, root: directory.root.path)
        let upload = "bench-\(UUID().uuidString)"
        try store.insert(Upload(id: upload, filename: "in.wav", contentType: nil, size: 1, sha256: "0", path: "/dev/null",
                                tracks: [], createdAt: 0))

        // 1. Latency: one idle worker process (polling every second); jobs queued one by one, 50 ms apart.
        var workers = try spawn(1, uri: uri, data: folder.path)
        Thread.sleep(forTimeInterval: 1)
        var ids: [String] = []
        for _ in 0..<200 {
            ids.append(try store.createJob(input: upload, settings: TranscodeSettings()).id)
            Thread.sleep(forTimeInterval: 0.05)
        }
        try wait(for: ids.count, store)
        let waits = try ids.map { id -> Double in
            let job = try store.job(id: id)
            return ((job?.startedAt ?? .nan) - (job?.createdAt ?? .nan)) * 1000
        }.sorted()
        print(String(format: "enqueue to start on an idle cluster (database clock, %d jobs): p50 %.1f ms, p99 %.1f ms, max %.1f ms (target p99 < 100 ms)",
                     waits.count, waits[waits.count / 2], waits[waits.count * 99 / 100], waits.last ?? 0))
        stop(workers)

        // 2. Throughput: `jobs` queued beforehand, then 1, 2, 4 worker processes take them all.
        var rates: [Int: Double] = [:]
        for count in [1, 2, 4] {
            let before = try store.counts()[.succeeded] ?? 0
            for _ in 0..<jobs { _ = try store.createJob(input: upload, settings: TranscodeSettings()) }
            let start = ContinuousClock.now
            workers = try spawn(count, uri: uri, data: folder.path)
            try wait(for: before + jobs, store)
            let took = seconds(since: start)
            stop(workers)
            rates[count] = Double(jobs) / took
            print(String(format: "%d trivial jobs with %d worker process%@: %.2f s = %.0f jobs/s", jobs, count, count == 1 ? "" : "es",
                         took, Double(jobs) / took))
        }
        print(String(format: "scaling: 2 processes %.2fx, 4 processes %.2fx the rate of 1 (this machine has %d cores)",
                     (rates[2] ?? 0) / (rates[1] ?? 1), (rates[4] ?? 0) / (rates[1] ?? 1), ProcessInfo.processInfo.activeProcessorCount))
        store.close()
    }

    private static func spawn(_ count: Int, uri: String, data: String) throws -> [Process] {
        try (0..<count).map { _ in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
            process.arguments = ["cluster-worker", uri, data]
            try process.run()
            return process
        }
    }

    private static func stop(_ processes: [Process]) {
        for process in processes {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    private static func wait(for succeeded: Int, _ store: PostgresJobStore) throws {
        let deadline = Date().addingTimeInterval(600)
        while (try store.counts()[.succeeded] ?? 0) < succeeded {
            guard Date() < deadline else { throw StoreError(code: "bench", message: "jobs did not finish") }
            usleep(5_000)
        }
    }
}
