import Foundation
import Jobs
import Pipeline

// Job store benchmark: (1) restart with a large store in mixed states — time until the queue is ready;
// (2) claim + complete throughput with trivial jobs. Usage: jobs-bench [JOBS] [TRIVIAL_JOBS]

/// Finishes every job at once with an empty result: measures the queue and the store, not FFmpeg.
struct TrivialRunner: JobRunner {
    func run(_ job: Job, input: Upload, outputPath: String, cancellation: CancellationToken,
             progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        TranscodeResult(path: outputPath, size: 0, container: .mp4, tracks: [], duration: 0, framesEncoded: 0, elapsed: 0,
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
    let store = try JobStore(path: directory.databasePath)
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
let restartStore = try JobStore(path: restartDirectory.databasePath)
let restartQueue = JobQueue(store: restartStore, directory: restartDirectory, runner: TrivialRunner(), configuration: configuration)
let recovered = try restartQueue.start()
let firstClaim = try restartStore.claimNext(lease: "bench")
let ready = seconds(since: restartStart)
restartQueue.stop(grace: 0)
print(String(format: "restart with %d jobs (%d left running): ready and first job claimed in %.3f s (target < 1 s)",
             total, recovered.requeued.count, ready))
precondition(firstClaim != nil)

// 2. Throughput: trivial jobs through the real queue and store (2 workers, synchronous=FULL).
let throughputDirectory = try makeStore(count: trivial, stateSQL: "'queued'")
configuration.workers = 2
configuration.pollInterval = 0.01
let throughputStore = try JobStore(path: throughputDirectory.databasePath)
let throughputQueue = JobQueue(store: throughputStore, directory: throughputDirectory, runner: TrivialRunner(),
                               configuration: configuration)
let throughputStart = ContinuousClock.now
try throughputQueue.start()
while (try throughputStore.counts()[.succeeded] ?? 0) < trivial { usleep(5_000) }
let elapsed = seconds(since: throughputStart)
throughputQueue.stop(grace: 0)
print(String(format: "claim + complete: %d trivial jobs in %.2f s = %.0f jobs/s (2 workers)", trivial, elapsed, Double(trivial) / elapsed))
for directory in [restartDirectory, throughputDirectory] { try? FileManager.default.removeItem(at: directory.root) }
