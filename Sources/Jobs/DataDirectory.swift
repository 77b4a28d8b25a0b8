import Foundation
import Pipeline

/// The data directory's layout: `transcoderd.sqlite`, `uploads/`, `outputs/`, `tus/`, `checkpoints/`, `store-id`
/// (the job store whose files these are), and a lock file that keeps a second process from using the same directory.
public struct DataDirectory: Sendable {
    public let root: URL

    public init(path: String) {
        root = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
    }

    public var databasePath: String { root.appendingPathComponent("transcoderd.sqlite").path }
    public var uploads: URL { root.appendingPathComponent("uploads", isDirectory: true) }
    public var outputs: URL { root.appendingPathComponent("outputs", isDirectory: true) }
    /// Checkpoints of interrupted transcodes: `<job id>.<lease token>/` per claim (see `adoptCheckpoint`).
    public var checkpoints: URL { root.appendingPathComponent("checkpoints", isDirectory: true) }
    /// Resumable (tus) uploads not complete yet: `<id>.bin` (the bytes so far) and `<id>.json` (what the upload is).
    public var tus: URL { root.appendingPathComponent("tus", isDirectory: true) }

    /// The folder a job's output is written into: `outputs/<job id>` for the first claim of the job, then
    /// `outputs/<job id>.<lease token>`, so two workers that both believe they hold the job (one paused past its
    /// lease, one that took it over) never write, commit or remove each other's folder. Inside: its main file
    /// (`output.mp4`, ..., `master.m3u8`), a ladder's segments, thumbnails.
    public func outputDirectory(for job: Job) -> String {
        outputs.appendingPathComponent(job.leaseToken > 1 ? "\(job.id).\(job.leaseToken)" : job.id, isDirectory: true).path
    }

    /// Where a job's main output file is, inside its folder.
    public func outputPath(for job: Job) -> String {
        outputDirectory(for: job) + "/" + job.settings.container.mainFileName
    }

    /// Temporary folders (and, from older versions, files) this attempt of `job` left while it wrote its output
    /// (`<folder>.<random>.partial`, `<job id>.mp4.<random>.partial`): what a process that was killed leaves behind.
    /// Not another attempt's: `<job id>.2.<random>.partial` is not the first attempt's.
    public func partialOutputs(for job: Job) -> [String] {
        let folder = URL(fileURLWithPath: outputDirectory(for: job)).lastPathComponent
        let names = (try? FileManager.default.contentsOfDirectory(atPath: outputs.path)) ?? []
        return names.filter { name in
            guard name.hasSuffix(".partial") else { return false }
            if name.hasPrefix(job.id + ".mp4.") { return true }
            guard name.hasPrefix(folder + ".") else { return false }
            return !name.dropFirst(folder.count + 1).dropLast(".partial".count).contains(".")
        }.map { outputs.appendingPathComponent($0).path }
    }

    /// What earlier claims of a job being claimed left in `outputs/`: folders and partial folders of attempts with a
    /// lower lease token than the job's (workers that died, or lost their lease). Never a later attempt's: a worker
    /// paused before it got here must not remove the result of the one that took the job over meanwhile.
    public func leftovers(of job: Job) -> [String] {
        guard job.leaseToken > 1 else { return [] } // the first claim: there is no earlier one
        let names = (try? FileManager.default.contentsOfDirectory(atPath: outputs.path)) ?? []
        return names.filter { name in
            guard let attempt = Self.attempt(of: name, job: job.id) else { return false }
            return attempt < job.leaseToken
        }.map { outputs.appendingPathComponent($0).path }
    }

    /// The claim (lease token) an entry of `outputs/` belongs to: `<id>` and `<id>.<hex>.partial` are the first's,
    /// `<id>.<n>` and `<id>.<n>.<hex>.partial` the n-th's; nil for anything else (another job's, a file from before
    /// outputs were folders).
    static func attempt(of name: String, job id: String) -> Int? {
        if name == id { return 1 }
        guard name.hasPrefix(id + ".") else { return nil }
        var parts = name.dropFirst(id.count + 1).split(separator: ".", omittingEmptySubsequences: false)
        if parts.last == "partial" {
            parts.removeLast()
            guard let random = parts.popLast(), !random.isEmpty, random.allSatisfy(\.isHexDigit) else { return nil }
        }
        switch parts.count {
        case 0: return 1
        case 1: return Int(parts[0]).flatMap { $0 > 1 ? $0 : nil }
        default: return nil
        }
    }

    /// The checkpoint folder of this claim of `job`: `checkpoints/<job id>.<lease token>`.
    public func checkpointDirectory(for job: Job) -> String {
        checkpoints.appendingPathComponent("\(job.id).\(job.leaseToken)", isDirectory: true).path
    }

    /// Takes over what earlier claims of `job` checkpointed: the latest earlier claim's folder is renamed to this
    /// claim's (a worker that lost its lease finds its folder gone: its next segment or manifest cannot be
    /// recorded), and older ones are removed. Later claims' folders are never touched. Returns this claim's folder
    /// (created empty when there was none: the transcode then starts from the beginning); nil when it cannot be
    /// created (the job then runs without checkpoints: its sandbox may only be given folders that exist).
    public func adoptCheckpoint(for job: Job) -> String? {
        let target = checkpointDirectory(for: job)
        let earlier = checkpointFolders(of: job.id)
            .filter { $0.token < job.leaseToken }
            .sorted { $0.token > $1.token }
        if let latest = earlier.first, !FileManager.default.fileExists(atPath: target) {
            _ = rename(latest.path, target)
        }
        for folder in earlier.dropFirst() { _ = OutputRemoval.remove(folder.path) }
        do {
            try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        } catch {
            return nil
        }
        return target
    }

    /// Every checkpoint folder of job `id`, with the claim it belongs to.
    public func checkpointFolders(of id: String) -> [(path: String, token: Int)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: checkpoints.path)) ?? []
        return names.compactMap { name in
            guard name.hasPrefix(id + "."), let token = Int(name.dropFirst(id.count + 1)) else { return nil }
            return (checkpoints.appendingPathComponent(name).path, token)
        }
    }

    /// Where an upload's content goes.
    public func uploadPath(id: String) -> String { uploads.appendingPathComponent(id).path }

    /// Files in `uploads/` nobody writes any more, last written more than `age` seconds before `now`: request bodies
    /// and fetched inputs of a process that died (`.upload-….partial`), and input files (`uploadID(ofFile:)`),
    /// which may be ones nobody recorded. The latter with the upload's id, for the caller to check that the upload
    /// points at them (and that a bare `<id>` is not a resumable upload's).
    public func staleUploadFiles(olderThan age: Double, now: Double)
        -> (partial: [String], unrecorded: [(path: String, upload: String)]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: uploads.path)) ?? []
        var unrecorded: [(String, String)] = []
        for name in names {
            let path = uploads.appendingPathComponent(name).path
            guard let id = Self.uploadID(ofFile: name), Self.written(path, before: now - age) else { continue }
            unrecorded.append((path, id))
        }
        return (Self.partialUploads(named: names, in: uploads, olderThan: age, now: now), unrecorded)
    }

    /// The upload an input file in `uploads/` is of: `<id>` (an upload's bytes, a resumable upload's, or a job's
    /// first attempt's fetched input) or `<id>.<lease token>` (a later attempt's); nil for any other name.
    public static func uploadID(ofFile name: String) -> String? {
        let id = String(name.prefix { $0 != "." })
        guard UUID(uuidString: id) != nil, id == name || Int(name.dropFirst(id.count + 1)) != nil else { return nil }
        return id
    }

    /// Seconds after its last write when a partial upload or fetched input on storage nodes share counts as a dead
    /// node's: uploads and fetches in progress write far more often (idle connections are closed sooner).
    public static let abandonedUploadAge: Double = 3600

    /// The name of a temporary file in `uploads/` for a request body being received or an input being fetched,
    /// told apart by `name`: `.upload-<name>.partial`. Hidden, and found again by `partialUploads` (at start, and by
    /// the stray sweep) if its writer dies.
    public static func partialUploadName(_ name: String) -> String { partialPrefix + name + partialSuffix }

    private static let partialPrefix = ".upload-", partialSuffix = ".partial"

    /// The temporary files in `folder` (an `uploads/`) of request bodies being received and inputs being fetched
    /// (`partialUploadName`), those last written more than `age` seconds before `now` (all of them for 0).
    public static func partialUploads(in folder: URL, olderThan age: Double, now: Double) -> [String] {
        partialUploads(named: (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [], in: folder,
                       olderThan: age, now: now)
    }

    /// Deletes `partialUploads(in: folder, olderThan: age)`; returns how many went.
    public static func removePartialUploads(in folder: URL, olderThan age: Double) -> Int {
        partialUploads(in: folder, olderThan: age, now: Date().timeIntervalSince1970).filter { unlink($0) == 0 }.count
    }

    /// `partialUploads` among `names`, the files of `folder` already listed.
    private static func partialUploads(named names: [String], in folder: URL, olderThan age: Double, now: Double) -> [String] {
        names.filter { $0.hasPrefix(partialPrefix) && $0.hasSuffix(partialSuffix) }
            .map { folder.appendingPathComponent($0).path }
            .filter { age <= 0 || written($0, before: now - age) }
    }

    /// Whether `path` exists and was last written before `time` (seconds since 1970).
    private static func written(_ path: String, before time: Double) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && Double(info.st_mtim.tv_sec) < time
    }

    /// Creates the folders if missing and checks that they are writable; the error says which one is not.
    public func prepare() throws(StoreError) {
        for folder in [root, uploads, outputs, tus, checkpoints] {
            do {
                // A new data folder is not for every local user to read (uploads, outputs, the store's URLs); a
                // group may read it (a web server's, say). One that exists keeps its mode.
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true,
                                                        attributes: folder == root ? [.posixPermissions: 0o750] : nil)
            } catch {
                throw StoreError(code: "data_directory_unusable", message: "Cannot create \(folder.path): \(error.localizedDescription)")
            }
            guard access(folder.path, W_OK) == 0 else {
                throw StoreError(code: "data_directory_unusable", message: "The data directory \(folder.path) is not writable.")
            }
        }
    }

    /// The folder and the SQLite database when every local user may read them (a folder made before new ones were
    /// 0750, a database before 0600: they keep their modes), for a warning at start: the database holds input and
    /// webhook URLs with their signatures, which the API itself hides.
    public func readableByOthers() -> [(path: String, mode: mode_t)] {
        [root.path, databasePath].compactMap { path in
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IROTH != 0 else { return nil }
            return (path, info.st_mode & 0o7777)
        }
    }

    /// The identity of the job store whose files the directory holds (`claim`).
    public var storeIdentityPath: String { root.appendingPathComponent("store-id").path }

    /// Marks the directory as the job store `identity`'s, or checks that it is. A store finding another's mark (a
    /// node started without the cluster's `--store`, making a SQLite file in the shared folder; a lost or replaced
    /// database) refuses to start: its start-up sweep would remove every output the other store lists as a stray.
    /// A folder without a mark (from before marks) is adopted, unless the store has no job (`jobCount`) while
    /// outputs are there: whose they are cannot be told; or, for a store `shared` by nodes, the folder holds nothing
    /// while the store has jobs: it is not the folder the other nodes share (a volume of its own, a mount that
    /// failed), and a worker there failed every job it claimed for a missing input.
    public func claim(by identity: String, shared: Bool, jobCount: () throws(StoreError) -> Int) throws(StoreError) {
        let path = storeIdentityPath
        let handOver = "give this store a --data folder of its own, run the store the folder belongs to (--store), or write "
            + "\(identity) into \(path) to hand the folder over (what this store does not list, outputs included, is then removed)"
        for _ in 0..<2 {
            if FileManager.default.fileExists(atPath: path) {
                guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                    throw StoreError(code: "data_directory_unusable", message: "Cannot read \(path).")
                }
                let found = text.trimmingCharacters(in: .whitespacesAndNewlines)
                if found == identity { return }
                throw StoreError(code: "data_directory_foreign", message: "The data directory \(root.path) belongs to another job store "
                                 + "(store-id \(found.prefix(64)); this store's is \(identity)): \(handOver).")
            }
            let outputNames = (try? FileManager.default.contentsOfDirectory(atPath: outputs.path)) ?? []
            if !outputNames.isEmpty, try jobCount() == 0 {
                throw StoreError(code: "data_directory_foreign", message: "The data directory \(root.path) holds outputs but no store-id, "
                                 + "and this job store has no job: they may be another store's; \(handOver).")
            }
            let uploadNames = (try? FileManager.default.contentsOfDirectory(atPath: uploads.path)) ?? []
            if shared, outputNames.isEmpty, uploadNames.isEmpty, case let jobs = try jobCount(), jobs > 0 {
                throw StoreError(code: "data_directory_not_shared", message: "The data directory \(root.path) is empty and has no "
                                 + "store-id, but the shared job store lists \(jobs) job\(jobs == 1 ? "" : "s"): every node needs the cluster's shared folder "
                                 + "(is it mounted here, and is every other node on it?). To start this store's files afresh in this folder, write "
                                 + "\(identity) into \(path).")
            }
            // Nodes starting at once keep the first mark; a crash never leaves an empty one.
            do throws(MediaError) {
                if try FileDurability.createOnce(at: path, text: identity + "\n", mode: 0o644) { return }
            } catch {
                throw StoreError(code: "data_directory_unusable", message: error.message)
            }
        }
        throw StoreError(code: "data_directory_unusable", message: "\(path) cannot be read.")
    }

    /// Takes the directory's exclusive lock for this process; fails if another process holds it.
    public func lock() throws(StoreError) -> DirectoryLock {
        try DirectoryLock(path: root.appendingPathComponent("transcoderd.lock").path)
    }
}

/// Owns the file descriptor of an `flock`ed lock file; the lock goes with the process or with `deinit`.
public final class DirectoryLock: Sendable {
    private let descriptor: Int32

    init(path: String) throws(StoreError) {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw StoreError(code: "data_directory_unusable", message: "Cannot open \(path): \(String(cString: strerror(errno))).")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(descriptor)
            throw StoreError(code: "data_directory_locked",
                             message: "Another transcoderd process is using \(URL(fileURLWithPath: path).deletingLastPathComponent().path).")
        }
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }
}
