import Foundation
import Jobs
import Pipeline

// Job store benchmark: (1) restart with a large store in mixed states — time until the queue is ready;
// (2) claim + complete throughput with trivial jobs; (3) with TRANSCODERD_BINARY set, tiny real transcodes through
// the queue in this process and in sandboxed child processes, and the child's overhead per job.
// Usage: jobs-bench [JOBS] [TRIVIAL_JOBS] [TINY_JOBS]

/// Finishes every job at once with an empty result: measures the queue and the store, not FFmpeg.
struct TrivialRunner: JobRunner {
    func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        TranscodeResult(path: outputDirectory + "/output.mp4", size: 0, container: .mp4, tracks: [], duration: 0, framesEncoded: 0, elapsed: 0,
                        mimeType: "video/mp4")
    }
}

func seconds(since start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
}

/// A store with one upload and `count` jobs inserted by the sqlite3 CLI (states by `stateSQL` over the row number n).
func makeStore(count: Int, stateSQL: String) throws -> DataDirectory {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("jobs-bench-\(UUID().uuidString)")
    let directory = DataDirectory(path: folder.path)
    try directory.prepare()
    let store = try SQLiteJobStore(path: directory.databasePath)
    try store.insert(Upload(id: "u", filename: "in.mp4", contentType: nil, size: 1, sha256: "0", path: "/dev/null", tracks: [],
                            createdAt: 0))
    let sql = """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(count))
        INSERT INTO jobs (id, state, settings, input_upload, attempts, priority, created_at, updated_at, finished_at)
        SELECT printf('job-%08d', i), \(stateSQL), '{}', 'u', 1, i % 3, i, i,
               CASE WHEN \(stateSQL) IN ('succeeded', 'failed', 'canceled') THEN i END FROM n;
        """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    process.arguments = [directory.databasePath, sql]
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw StoreError(code: "bench", message: "sqlite3 failed") }
    return directory
}

// `jobs-bench cluster URI [JOBS]` (bench/cluster.sh) and the worker processes it starts.
if CommandLine.arguments.count > 3, CommandLine.arguments[1] == "cluster-worker" {
    try ClusterBench.worker(uri: CommandLine.arguments[2], data: CommandLine.arguments[3])
}
if CommandLine.arguments.count > 2, CommandLine.arguments[1] == "cluster" {
    try ClusterBench.run(uri: CommandLine.arguments[2], jobs: CommandLine.arguments.count > 3 ? Int(CommandLine.arguments[3]) ?? 1000 : 1000)
    exit(0)
}

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let total = arguments.first ?? 100_000
let trivial = arguments.dropFirst().first ?? 3_000

// 1. Restart: 40% queued, 40% succeeded, 10% failed, 5% canceled, 5% left running by a "crashed" process.
let mixed = "CASE i % 20 WHEN 0 THEN 'running' WHEN 1 THEN 'canceled' WHEN 2 THEN 'failed' WHEN 3 THEN 'failed' " +
    "ELSE CASE WHEN i % 2 = 0 THEN 'queued' ELSE 'succeeded' END END"
let restartDirectory = try makeStore(count: total, stateSQL: mixed)
var configuration = JobQueue.Configuration()
configuration.workers = 0
let restartStart = ContinuousClock.now
let restartStore = try SQLiteJobStore(path: restartDirectory.databasePath)
let restartQueue = JobQueue(store: restartStore, directory: restartDirectory, runner: TrivialRunner(), configuration: configuration)
let recovered = try restartQueue.start()
let firstClaim = try restartStore.claimNext(worker: "bench", leaseSeconds: 20)
let ready = seconds(since: restartStart)
restartQueue.stop(grace: 0)
print(String(format: "restart with %d jobs (%d left running): ready and first job claimed in %.3f s (target < 1 s)",
             total, recovered.requeued.count, ready))
precondition(firstClaim != nil)

// 2. Throughput: trivial jobs through the real queue and store (2 workers, synchronous=FULL).
let throughputDirectory = try makeStore(count: trivial, stateSQL: "'queued'")
configuration.workers = 2
configuration.pollInterval = 0.01
let throughputStore = try SQLiteJobStore(path: throughputDirectory.databasePath)
let throughputQueue = JobQueue(store: throughputStore, directory: throughputDirectory, runner: TrivialRunner(),
                               configuration: configuration)
let throughputStart = ContinuousClock.now
try throughputQueue.start()
while (try throughputStore.counts()[.succeeded] ?? 0) < trivial { usleep(5_000) }
let elapsed = seconds(since: throughputStart)
throughputQueue.stop(grace: 0)
print(String(format: "claim + complete: %d trivial jobs in %.2f s = %.0f jobs/s (2 workers)", trivial, elapsed, Double(trivial) / elapsed))
for directory in [restartDirectory, throughputDirectory] { try? FileManager.default.removeItem(at: directory.root) }

// 3. Tiny real jobs (0.2 s of audio to AAC) through the queue (1 worker): in this process, then each in a child
//    process of the transcoderd binary; the difference per job is what the child costs (spawn, sandbox, request,
//    result). Rounds alternate, the median of the per-round figures is printed.
if let binary = ProcessInfo.processInfo.environment["TRANSCODERD_BINARY"] {
    let tiny = arguments.dropFirst(2).first ?? 200
    let input = FileManager.default.temporaryDirectory.appendingPathComponent("jobs-bench-tiny-\(getpid()).wav")
    let ffmpeg = Process()
    ffmpeg.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
    ffmpeg.arguments = ["-v", "error", "-y", "-f", "lavfi", "-i", "sine=d=0.2", input.path]
    try ffmpeg.run()
    ffmpeg.waitUntilExit()
    /// Seconds for `tiny` jobs on `runner`.
    func tinyJobs(_ runner: any JobRunner) throws -> Double {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("jobs-bench-\(UUID().uuidString)")
        let directory = DataDirectory(path: folder.path)
        try directory.prepare()
        let store = try SQLiteJobStore(path: directory.databasePath)
        try store.insert(Upload(id: "tiny", filename: "tiny.wav", contentType: nil, size: 1, sha256: "0", path: input.path,
                                tracks: [], createdAt: 0))
        for _ in 0..<tiny { _ = try store.createJob(input: "tiny", settings: TranscodeSettings(video: .drop)) }
        var settings = JobQueue.Configuration()
        settings.workers = 1
        settings.pollInterval = 0.01
        let queue = JobQueue(store: store, directory: directory, runner: runner, configuration: settings)
        let start = ContinuousClock.now
        try queue.start()
        while (try store.counts()[.succeeded] ?? 0) < tiny {
            let failed = try store.counts()[.failed] ?? 0
            precondition(failed == 0, "a tiny job failed")
            usleep(2_000)
        }
        let took = seconds(since: start)
        queue.stop(grace: 0)
        try? FileManager.default.removeItem(at: folder)
        return took
    }
    let child = ChildProcessRunner(executable: binary, spares: 2)
    var rounds: [(inProcess: Double, child: Double)] = []
    for round in 0..<3 {
        if round % 2 == 0 {
            let inProcess = try tinyJobs(TranscodeRunner())
            rounds.append((inProcess, try tinyJobs(child)))
        } else {
            let inChild = try tinyJobs(child)
            rounds.append((try tinyJobs(TranscodeRunner()), inChild))
        }
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    let inProcess = median(rounds.map(\.inProcess)), inChild = median(rounds.map(\.child))
    print(String(format: "tiny jobs back to back: %.0f jobs/s in this process, %.0f jobs/s in child processes (%.1f ms more a job: each child's start is paid)",
                 Double(tiny) / inProcess, Double(tiny) / inChild, (inChild - inProcess) / Double(tiny) * 1000))

    // The child on a job's critical path: a probe of the tiny file, in this process and in a spare child (started
    // beforehand, as the server keeps them), 200 ms apart so the spare is there; and a child started cold.
    func median(of count: Int, _ body: () throws -> Void) throws -> Double {
        var times: [Double] = []
        for _ in 0..<count {
            let start = ContinuousClock.now
            try body()
            times.append(seconds(since: start))
            usleep(200_000)
        }
        return median(times)
    }
    let local = try median(of: 21) { _ = try InProcessProber().probe(path: input.path) }
    let spare = try median(of: 21) { _ = try child.probe(path: input.path) }
    let cold = ChildProcessRunner(executable: binary, spares: 0)
    let started = try median(of: 11) { _ = try cold.probe(path: input.path) }
    print(String(format: "a job's wait for its child (spawn + handshake + result): %.1f ms with a spare child, %.1f ms started cold (target < 20 ms)",
                 (spare - local) * 1000, (started - local) * 1000))
    child.shutdown()
    try? FileManager.default.removeItem(at: input)
}
