import Foundation
import Isolation
import Locks
import Logging
import Pipeline

/// Runs each job, and each probe, in a child process of this binary (`transcoderd run-job`), sandboxed by
/// `policy`: a decoder that crashes, hangs or eats memory takes down its child, not the server. A few children are
/// kept started in advance (`ChildPool`), so a job does not wait for the binary to load.
///
/// The child gets a `JobRequest` line and answers with `JobMessage` lines. Cancellation sends it SIGTERM (it
/// removes its partial output and exits within a second) and SIGKILL after `killGrace`; an immediate one (a stalled
/// job) sends SIGKILL at once. A child that dies of a signal it was not sent fails with `worker_crashed` (the queue
/// runs the job again), or with `out_of_memory` when its data had grown near its limit.
public struct ChildProcessRunner: JobRunner, MediaProber {
    /// The `transcoderd` binary to run: `/proc/self/exe` for the server itself (the binary this process runs, even
    /// when a newer one has since replaced it on disk, so parent and child always speak the same protocol).
    public let executable: String
    public let policy: SandboxPolicy
    /// Bounds on what an input may demand, passed to the child.
    public let limits: MediaLimits
    /// Seconds a child that has answered has to exit before it gets SIGKILL (its answer is kept).
    public var answeredExitGrace = 3.0
    /// Seconds a child has to exit after SIGTERM before it gets SIGKILL.
    public var killGrace = 1.0
    private let pool: ChildPool

    /// Where what a child writes on its standard error goes: nil leaves it this process's standard error.
    private let errorLines: (@Sendable (_ line: String, _ task: String) -> Void)?

    /// A runner whose children run `executable`; `spares` of them are kept started in advance. With a `logger`,
    /// what a child writes on its standard error is logged, a warning a line, its text a field (bounded, escaped:
    /// a child taken over by a hostile file cannot write lines that read as this process's own, nor flood its log);
    /// without one it goes to this process's standard error.
    public init(executable: String = "/proc/self/exe", policy: SandboxPolicy = SandboxPolicy(),
                limits: MediaLimits = MediaLimits(), spares: Int = 0, logger: Logger? = nil) {
        self.executable = executable
        self.policy = policy
        self.limits = limits
        if let logger {
            errorLines = { @Sendable line, task in
                logger.warning("a job process wrote on its standard error", ["task": .string(task), "text": .string(line)])
            }
        } else {
            errorLines = nil
        }
        pool = ChildPool(executable: executable, arguments: Self.arguments(policy), count: spares, errorLines: errorLines)
    }

    private static func arguments(_ policy: SandboxPolicy) -> [String] {
        ["run-job"] + policy.arguments + ["--parent", String(getpid())]
    }

    /// Ends the spare children; the runner starts no more.
    public func shutdown() { pool.shutdown() }

    /// Seconds a probe may take before its child is killed: a demuxer looping on a hostile file must not hold a
    /// request (and a probe thread) forever.
    public var probeTimeout = 30.0

    public func run(_ job: Job, input: Upload, outputDirectory: String, cancellation: CancellationToken,
                    progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        try run(job, input: input, outputDirectory: outputDirectory, checkpointDirectory: nil, cancellation: cancellation, progress: progress)
    }

    public func run(_ job: Job, input: Upload, outputDirectory: String, checkpointDirectory: String?, cancellation: CancellationToken,
                    progress: (TranscodeProgress) -> Void) throws(MediaError) -> TranscodeResult {
        // The child may write in a stage of this job's own, not in `outputs/` where every job's folder is.
        let stage = try OutputStage(finalPath: outputDirectory)
        defer { stage.discard() }
        var request = JobRequest(kind: .transcode, input: input.path, output: stage.childOutput, settings: job.settings,
                                 watermark: job.settings.filters?.video?.watermark?.imagePath, limits: limits)
        request.checkpoint = checkpointDirectory
        let answer = try exchange(request, task: "job \(job.id)", cancellation: cancellation, progress: progress)
        guard var result = answer.result else { throw Self.unexpected }
        try stage.commit()
        // The output is where this process said, whatever the child claims; its files are listed here too.
        let mainType = job.settings.container.mimeType(hasVideo: result.tracks.contains { $0.mediaType == .video })
        let files = OutputFile.list(directory: outputDirectory, mainType: mainType)
        // The list holds regular files only. The main file must be one of them: a link the child left in its place
        // (a child taken over by a hostile file; Landlock, where it runs, refuses it links) was served as the output,
        // and the server, unconfined, followed it to whatever it named (the webhook secret, the database).
        guard files.contains(where: { $0.path == job.settings.container.mainFileName }) else {
            throw MediaError(code: "output_failed", message: "The job's process left no \(job.settings.container.mainFileName) file in its output.")
        }
        result.path = outputDirectory + "/" + job.settings.container.mainFileName
        result.files = files
        result.size = files.reduce(0) { $0 + $1.size }
        return result
    }

    public func probe(path: String) throws(MediaError) -> [Track] {
        let deadline = CancellationToken()
        let timeout = probeTimeout
        let timer = Deadlines.shared.schedule(after: timeout) { deadline.cancel(immediately: true) }
        defer { Deadlines.shared.cancel(timer) }
        do throws(MediaError) {
            let answer = try exchange(JobRequest(kind: .probe, input: path), task: "probe", cancellation: deadline) { _ in }
            guard let tracks = answer.tracks else { throw Self.unexpected }
            return tracks
        } catch where error.code == "canceled" {
            throw MediaError(code: "probe_timeout", message: "Reading the file's tracks took more than \(String(format: "%g", timeout)) s; it was given up.")
        } catch where error == Self.killedFromOutside {
            // Not the file's fault: a 422 refused the upload as not media, and a tus upload completing then had its
            // bytes deleted, because the machine was short of memory. The API answers 503 and keeps them.
            throw MediaError(code: "worker_unavailable", message: "The process examining the file was killed (SIGKILL) from outside "
                                 + "the server: the machine may be short of memory.")
        }
    }

    /// What `run-job --check` reports for this policy: the protections a job's child runs under.
    public func check() throws(MediaError) -> SandboxReport {
        let child: ChildProcess
        do {
            child = try ChildProcess(executable: executable, arguments: Self.arguments(policy) + ["--check"], errorLines: errorLines)
            child.task = "sandbox check"
        } catch {
            throw MediaError(code: "worker_failed", message: "Starting the job process failed: \(error).")
        }
        // A check that hangs (its scratch folder on a dead mount, say) must not hold the server's start for ever.
        let timer = Deadlines.shared.schedule(after: 30) { child.signal(SIGKILL) }
        defer { Deadlines.shared.cancel(timer) }
        let line = child.readLine()
        let termination = child.wait()
        if child.killedByParent {
            throw MediaError(code: "worker_failed", message: "The job sandbox check did not end within 30 s and was stopped.")
        }
        guard termination == .exited(0), let line,
              let report = try? JSONDecoder().decode(SandboxReport.self, from: Data(line.utf8)) else {
            throw MediaError(code: "worker_failed", message: "The job sandbox check failed (\(termination)).")
        }
        return report
    }

    private static let unexpected = MediaError(code: "worker_failed", message: "The job process answered something unexpected.")

    private func spawn() throws(MediaError) -> ChildProcess {
        do {
            return try pool.take()
        } catch {
            // Out of processes or memory for a moment: nothing to do with the file. A job runs again, as after a
            // crash; an upload's probe is answered 503, its bytes kept.
            throw MediaError(code: "worker_unavailable", message: "Starting the job process failed: \(error).")
        }
    }

    /// Runs one request in a new child: progress lines go to `progress`, the last line is the answer.
    private func exchange(_ request: JobRequest, task: String, cancellation: CancellationToken,
                          progress: (TranscodeProgress) -> Void) throws(MediaError) -> JobMessage {
        let child = try spawn()
        child.task = task
        let grace = killGrace
        let graceStarted = LockedValue(false)
        cancellation.whenCanceled { immediately in
            guard !immediately else { return child.signal(SIGKILL) }
            child.signal(SIGTERM)
            guard graceStarted.withLock({ started in defer { started = true }; return !started }) else { return }
            // SIGKILL if it is still there when the grace is over (a reaped child is never signalled).
            Deadlines.shared.schedule(after: grace) { child.signal(SIGKILL) }
        }
        let encoder = JSONEncoder()
        do {
            try child.send((try? encoder.encode(request)) ?? Data())
            try child.send(Data("\n".utf8))
        } catch {
            // It died before reading: what it died of says more, below.
        }
        child.closeInput()
        let decoder = JSONDecoder()
        var answer: JobMessage?
        var dataBytes = 0
        while let line = child.readLine() {
            guard let message = (try? decoder.decode(JobMessage.self, from: Data(line.utf8)))?.bounded() else { continue }
            if let update = message.progress {
                // The latest, not the most: a crash long after the job's peak is a crash, retried, not its limit.
                dataBytes = message.dataBytes ?? dataBytes
                progress(update)
            } else if [message.result != nil, message.tracks != nil, message.error != nil].filter({ $0 }).count == 1 {
                answer = message
                break // the last line: nothing more is read
            }
        }
        // Answered: a child that then fails to exit (a library's clean-up at exit, threads still running) is killed
        // after a moment, its answer kept (the output was flushed before it; the server checks it anyway). It was
        // waited for until the watchdog stopped it, and its finished work was lost.
        let exitTimer = answer == nil ? nil : Deadlines.shared.schedule(after: answeredExitGrace) { child.signal(SIGKILL) }
        defer { if let exitTimer { Deadlines.shared.cancel(exitTimer) } }
        let termination = child.wait()
        // An answer stands however the child ended after it: one that crashed or exited non-zero in a library's
        // clean-up had finished (its answer is its last line, written once the output was flushed), and the job ran
        // again to the same crash, three times, then failed as crashed, or as out of memory, its output complete.
        if let answer {
            // Finished work stands, even when a cancel came while the child was on its way out.
            if answer.error == nil { return answer }
            if cancellation.isCanceled { throw MediaError.canceled }
            if let failure = answer.error { throw Self.failure(failure) }
        }
        if cancellation.isCanceled { throw MediaError.canceled }
        // It died without answering. Of a line too long, which it would write again: not retried.
        if child.lineTooLong {
            throw MediaError(code: "worker_failed", message: "The job process wrote a line of more than \(ChildProcess.maxLineBytes) bytes and was stopped.")
        }
        // Of a SIGKILL this process did not send: the kernel's out-of-memory killer (the machine or its container
        // short of memory) or someone outside, not the job's own limit (which only makes allocations fail): it runs
        // again, and raising the limit would not help.
        if termination == .signaled(SIGKILL), !child.killedByParent { throw Self.killedFromOutside }
        // Of a crash, or of its memory limit.
        if dataBytes >= policy.dataBytes * 3 / 4 {
            let mib = policy.dataBytes / (1024 * 1024)
            throw MediaError(code: "out_of_memory",
                             message: "The transcode process ran out of its \(mib) MiB memory limit and ended (\(termination)). "
                                 + "Raise --job-memory-mib (TRANSCODER_JOB_MEMORY_MIB), or ask for a smaller output.")
        }
        throw MediaError(code: "worker_crashed", message: "The transcode process stopped unexpectedly: \(termination).")
    }

    /// A child killed by a SIGKILL this process did not send.
    private static let killedFromOutside = MediaError(code: "worker_crashed", message: "The transcode process was killed (SIGKILL) "
                                                          + "from outside the server: the machine may be short of memory.")

    /// Bytes of a child's error message kept, at most.
    static let maxMessageBytes = 4096

    /// The codes only this side gives, for what happens outside the child (the queue runs such a job again).
    private static let parentCodes: Set = ["worker_unavailable", "store_error", "worker_crashed", "canceled"]

    /// A child's error as the job's: its message cut to `maxMessageBytes`, its code kept only if it is a code a
    /// child may give (`worker_failed` otherwise). A child taken over by a hostile file wrote 16 MiB into the job's
    /// row, every listing, event and webhook, or named a failure of this side's (`store_error`: the job ran again).
    static func failure(_ failure: JobMessage.Failure) -> MediaError {
        let code = failure.code
        let isCode = (1...64).contains(code.utf8.count) && code.utf8.first.map { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) } == true
            && code.utf8.allSatisfy { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "_") }
        // Control characters but line breaks and tabs shown as U+FFFD: a NUL cannot be stored at all.
        // Only what can be kept is looked at (every scalar is a byte at least): a 16 MiB line made an array of them all.
        var message = String(String.UnicodeScalarView(failure.message.unicodeScalars.prefix(maxMessageBytes + 1).map { scalar in
            scalar.value < 0x20 && scalar != "\n" && scalar != "\t" || scalar.value == 0x7F ? "\u{FFFD}" : scalar
        }))
        if message.utf8.count > maxMessageBytes {
            // Cut on a scalar's start, room left for the ellipsis (3 bytes).
            var end = message.utf8.index(message.startIndex, offsetBy: maxMessageBytes - 3)
            while end.samePosition(in: message.unicodeScalars) == nil { end = message.utf8.index(before: end) }
            message = message[..<end] + "…"
        }
        guard isCode, !parentCodes.contains(code) else {
            return MediaError(code: "worker_failed", message: "The job process failed with an error it may not give (\(code.prefix(64).debugDescription)): \(message)")
        }
        return MediaError(code: code, message: message)
    }
}
