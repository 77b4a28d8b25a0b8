import CProcess
import Foundation
import Isolation
import Pipeline

/// `transcoderd run-job`: the child process a server runs each job (and each upload's probe) in. It enters its
/// sandbox before it reads anything, reads one `JobRequest` line on stdin, writes `JobMessage` lines on stdout
/// (progress, then the result or a typed error) and exits 0; a crash is seen by the server as the signal it died of.
/// SIGTERM cancels: the partial output is removed and the child exits within a second.
enum RunJobCommand {
    static let usage = """
        Usage: transcoderd run-job [--memory-mib N] [--open-files N] [--nice N] [--parent PID] [--check]

        Internal: the child process a server runs each job in (it reads a JSON request on stdin and writes JSON lines
        on stdout). --check enters the sandbox, tries calls it should refuse, and prints what is in force, as JSON.
        """

    static func run(_ arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(usage)
            return 0
        }
        var options: [String: String] = [:]
        var check = false
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--check" {
                check = true
            } else if ["--memory-mib", "--open-files", "--nice", "--parent"].contains(argument), index + 1 < arguments.count {
                options[argument] = arguments[index + 1]
                index += 1
            } else {
                Console.error("run-job: unknown option \(argument)")
                return 2
            }
            index += 1
        }
        guard let policy = SandboxPolicy.parse(options) else {
            Console.error("run-job: a limit is not a valid number")
            return 2
        }
        // Before any byte of the request or of the media is read.
        let parent = options["--parent"].flatMap { pid_t($0) }
        var report = Sandbox.enter(policy, parent: parent)
        let memory = MemoryWatch(limit: policy.dataBytes)
        if check {
            // Forked processes try a job's write rule on scratch folders; then this one confines itself to no
            // file at all.
            let writes = Sandbox.tryConfinedWrites()
            report.landlockError = Sandbox.confineFiles(read: [], write: [])
            report.landlock = report.landlockError == nil
            report.tried = Sandbox.tryRefusedCalls().merging(writes) { first, _ in first }
            Console.printJSON(report)
            return 0
        }
        tc_install_terminate_handler(parent ?? getppid())
        guard let line = readLine(), let request = try? JSONDecoder().decode(JobRequest.self, from: Data(line.utf8)) else {
            send(JobMessage(error: .init(code: "bad_request", message: "The job request could not be read.")))
            return 0
        }
        // The job's own files, and nothing else, from here on: the input, and the stage the server made for its output
        // (the output folder is made beside its final place, inside the stage).
        let files = confinement(of: request)
        if let problem = Sandbox.confineFiles(read: files.read, write: files.write) {
            // Without Landlock in the kernel the other protections hold, as `--check` reports at start (once: a
            // bare line here for every job landed in the server's JSON log); with it, a ruleset that could not be
            // made is no reason to run with every file the server can reach.
            guard tc_landlock_abi() < 1 else {
                send(JobMessage(error: .init(code: "sandbox_failed",
                                             message: "The job's process could not confine itself to the job's files (\(problem)).")))
                return 0
            }
        }
        let cancellation = CancellationToken(external: { tc_terminate_requested() != 0 })
        do throws(MediaError) {
            switch request.kind {
            case .probe:
                let tracks = try MediaReader(path: request.input, cancellation: cancellation).tracks
                send(JobMessage(tracks: tracks))
            case .transcode:
                guard let output = request.output, var settings = request.settings else {
                    send(JobMessage(error: .init(code: "bad_request", message: "The job request has no output or settings.")))
                    return 0
                }
                settings.filters?.video?.watermark?.imagePath = request.watermark
                let session = TranscodeSession(inputPath: request.input, outputDirectory: output, settings: settings,
                                               cancellation: cancellation, limits: request.limits ?? MediaLimits())
                session.onFailure = { _ in memory.failed() }
                session.checkpointDirectory = request.checkpoint
                session.checkpointOwned = true // the server's folder for this job
                var result = try session.run { progress in
                    send(JobMessage(progress: progress, dataBytes: memory.sample()))
                }
                // The server lists the folder's files itself; a long ladder's list (a line per segment per rendition)
                // would pass the line limit, and the child be killed after its work was done.
                result.files = nil
                if !send(JobMessage(result: result)) {
                    send(JobMessage(error: .init(code: "output_failed", message: "The transcode's result could not be written out.")))
                }
            }
        } catch {
            let failure = memory.explain(error)
            send(JobMessage(error: .init(code: failure.code, message: failure.message)))
        }
        return 0
    }

    /// The files a job's child may touch: read its input (and watermark); write in the folder that holds its output
    /// (the stage the server made for the job: the output folder is made beside its final place, inside it) and in
    /// its checkpoint folder.
    static func confinement(of request: JobRequest) -> (read: [String], write: [String]) {
        let output = request.output.map { URL(fileURLWithPath: $0).deletingLastPathComponent().path }
        return ([request.input] + (request.watermark.map { [$0] } ?? []),
                (output.map { [$0] } ?? []) + (request.checkpoint.map { [$0] } ?? []))
    }

    /// Writes one message line on stdout; false when it cannot be encoded (a value JSON cannot hold).
    @discardableResult
    private static func send(_ message: JobMessage) -> Bool {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(message) else { return false }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
        return true
    }
}

/// Watches the child's data size against its limit, to tell a failed allocation (x264 reports one as "Generic error
/// in an external library") from any other failure: at the moment of a failure, before the encoders are freed, the
/// data size stands near the limit when an allocation was refused.
private final class MemoryWatch {
    let limit: Int
    private let size = Sandbox.DataSize()
    /// The data size at the failure (nil before one).
    private var atFailure: Int?
    private var refused = false

    init(limit: Int) { self.limit = limit }

    /// The data size now.
    func sample() -> Int { size.bytes }

    /// At a failure: what was held then, and whether the last allocation failed.
    func failed() {
        refused = errno == ENOMEM
        atFailure = size.bytes
    }

    /// Failures a refused allocation shows up as (FFmpeg's ENOMEM, and libraries' own generic errors).
    private static let allocationFailures: Set = ["out_of_memory", "encoder_failed", "encode_failed", "decode_failed",
                                                  "filter_failed", "ffmpeg_error", "unsupported_audio"]

    /// `error`, or `out_of_memory` when the failure is one an allocation refused by the limit gives: such a failure,
    /// with the data size near the limit at that moment. (ENOMEM is looked at too, but the library threads that
    /// allocate have errno values of their own.)
    func explain(_ error: MediaError) -> MediaError {
        guard Self.allocationFailures.contains(error.code) else { return error }
        // A refused allocation (errno ENOMEM) counts once a quarter of the limit was in use: a stale errno on an
        // ordinary failure of a small job does not.
        // What was held at the failure, not the most ever held: a job that used much of its limit for a while (a
        // 4K encode), then failed on a broken packet with little in use, was told to raise its limit, and not retried.
        let held = atFailure ?? size.bytes
        guard error.code == "out_of_memory" || (refused && held >= limit / 4) || held >= limit * 3 / 4 else { return error }
        let mib = limit / (1024 * 1024)
        return MediaError(code: "out_of_memory",
                          message: "The transcode needed more memory than the job limit of \(mib) MiB (\(error.message)). "
                              + "Raise --job-memory-mib (TRANSCODER_JOB_MEMORY_MIB), or ask for a smaller output.")
    }
}
