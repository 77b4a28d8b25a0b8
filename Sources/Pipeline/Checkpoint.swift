import Foundation
import Glibc
import Locks

/// A job's checkpoint folder: durable pieces of an interrupted transcode that a later attempt continues from.
///
/// Opening it checks what an earlier attempt left: a manifest made with other settings or input is dropped whole;
/// each listed file must have its size and SHA-256, and a segment that does not is redone with every one after it;
/// files the manifest does not list (a segment being written when the process died) are removed.
///
/// A finished segment is recorded by appending one line to the journal (`journal.jsonl`, then `fdatasync`), after
/// the segment's file is durable: the cost stays the same all along a long film. Other changes (few: set-up, a
/// track complete, the pictures) write the whole manifest durably (temporary file, fsync, rename, fsync of the
/// folder) with the journal folded in, then empty the journal. Opening folds in the journal's complete lines
/// that follow what the manifest includes, up to the first torn or out-of-order one.
///
/// The encode threads and the audio thread all record what they finish: the manifest is kept under a lock.
final class Checkpoint: @unchecked Sendable {
    // @unchecked: `state` is a lock (the journal is written under it); `path` is a constant.
    let path: String
    private let state: LockedValue<CheckpointManifest>

    static let manifestName = "manifest.json"
    static let journalName = "journal.jsonl"
    /// A ladder's files, in its own layout (`720p/segment_00001.m4s`, ...).
    static let ladderFolder = "ladder"
    /// Folders of the checkpoint's own, removed whole with it.
    static let ownFolders: Set<String> = [ladderFolder, CheckpointStills.folder]

    /// Opens (or makes) the checkpoint at `path`; `step` is called after each file an earlier attempt left is
    /// checked (which reads it whole). `owned`: the folder is the caller's own (a server's, for one job), so what is
    /// in it that is no checkpoint is cleared rather than refused.
    init(path: String, fingerprint: String, segmentSeconds: Double, owned: Bool = false, step: () -> Void = {}) throws(MediaError) {
        self.path = path
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw MediaError(code: "output_failed", message: "Creating the checkpoint folder \(path) failed: \(error.localizedDescription)")
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        if !names.isEmpty && !Self.isOwnFolder(path, names: names) {
            // Someone's folder, not a checkpoint (a web project's `manifest.json` is not ours): nothing in it is
            // ours to overwrite or remove.
            guard owned else {
                throw MediaError(code: "invalid_checkpoint", message: "The checkpoint folder \(path) holds other files; give an empty or new folder.")
            }
            // A server's folder for this job: a manifest a crash or a disk left unreadable, or a file a process
            // since gone left (NFS's `.nfs…`). The job starts over; refused, it failed for good, telling a server's
            // user to give another folder.
            for name in names { try? FileManager.default.removeItem(atPath: path + "/" + name) }
        }
        var manifest = CheckpointManifest(fingerprint: fingerprint, segmentSeconds: segmentSeconds)
        var adopted = false
        if let data = FileManager.default.contents(atPath: path + "/" + Self.manifestName),
           let stored = try? JSONDecoder().decode(CheckpointManifest.self, from: data), stored.isIntact,
           stored.version == CheckpointManifest.currentVersion, stored.fingerprint == fingerprint,
           stored.segmentSeconds == segmentSeconds {
            manifest = stored
            manifest.checksum = nil // made again with each save
            adopted = true
            Self.foldJournal(at: path + "/" + Self.journalName, into: &manifest)
            if let audio = manifest.audioFile {
                if !Self.verify(audio, in: path) { manifest.audioFile = nil }
                step()
            }
            if let bad = manifest.segments.firstIndex(where: { segment in
                defer { step() }
                return !Self.verify(segment.file, in: path)
            }) {
                manifest.segments.removeSubrange(bad...)
                manifest.videoComplete = false
                manifest.stills = nil
            }
        }
        if !adopted {
            // Files of another job or settings: none of them may be taken for this one's.
            for folder in Self.ownFolders { try? FileManager.default.removeItem(atPath: path + "/" + folder) }
        }
        state = LockedValue(manifest)
        try removeUnlisted()
        // The journal exists from here on, its name made durable by the manifest's save, which folds its lines in.
        // Another job's is emptied first: its lines must never follow this job's manifest.
        try Self.writing("the checkpoint journal", at: path + "/" + Self.journalName, flags: O_CREAT | (adopted ? 0 : O_TRUNC)) { journal in
            adopted || Self.retrying { fsync(journal) } == 0
        }
        try save(manifest)
    }

    /// Reads the journal's complete lines in order and applies those the manifest does not include yet.
    private static func foldJournal(at path: String, into manifest: inout CheckpointManifest) {
        guard let data = FileManager.default.contents(atPath: path) else { return }
        let decoder = JSONDecoder()
        var lineStart = data.startIndex
        while let end = data[lineStart...].firstIndex(of: UInt8(ascii: "\n")) {
            defer { lineStart = data.index(after: end) }
            // A line cut short by a crash has no newline and is never read; one that does not decode, or skips a
            // number, ends the journal (nothing after it can be trusted to follow on).
            guard let line = try? decoder.decode(CheckpointManifest.JournalLine.self, from: data[lineStart..<end]), line.isIntact else { return }
            let last = manifest.journalSequence ?? 0
            if line.sequence <= last { continue }
            guard line.sequence == last + 1 else { return }
            manifest.apply(line.entry)
            manifest.journalSequence = line.sequence
        }
    }

    /// The manifest as it stands.
    var manifest: CheckpointManifest { state.withLock { $0 } }

    /// Changes the manifest and writes it durably; the files it newly lists must be on disk already.
    func update(_ change: (inout CheckpointManifest) -> Void) throws(MediaError) {
        try state.withLock { manifest throws(MediaError) in
            change(&manifest)
            try save(manifest)
        }
    }

    /// Records a finished piece (its file durable already) with one durable line in the journal.
    func append(_ entry: CheckpointManifest.Entry) throws(MediaError) {
        try state.withLock { manifest throws(MediaError) in
            guard let line = CheckpointManifest.JournalLine(sequence: (manifest.journalSequence ?? 0) + 1, entry: entry).sealed(),
                  var data = try? JSONEncoder().encode(line) else {
                throw MediaError(code: "storage_error", message: "Encoding a checkpoint journal line failed.")
            }
            data.append(UInt8(ascii: "\n"))
            // Opened by its path each time: once another node has taken the folder over (renamed it to its own
            // claim), this one's records fail, as its manifest writes and segment files do.
            try Self.writing("the checkpoint journal", at: path + "/" + Self.journalName, flags: O_APPEND) { journal in
                Self.writeAll(data, to: journal) && Self.retrying { fdatasync(journal) } == 0
            }
            manifest.apply(entry)
            manifest.journalSequence = line.sequence
        }
    }

    /// Forgets the video (its encoder is set up differently now): every segment is made again.
    func resetVideo() throws(MediaError) {
        try update { manifest in
            manifest.video = nil
            manifest.segments = []
            manifest.videoComplete = false
            manifest.stills = nil
        }
        try removeUnlisted()
    }

    /// Absolute path of a file in the folder.
    func file(_ name: String) -> String { path + "/" + name }

    private static func verify(_ file: CheckpointManifest.File, in folder: String) -> Bool {
        let path = folder + "/" + file.name
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int, size == file.bytes else { return false }
        return SHA256Hasher.file(atPath: path) == file.sha256
    }

    /// Whether a file name is one a checkpoint writes: `manifest.json`, `video_NNNNN.pkt`, `audio.pkt`, and those
    /// names with `.tmp` while they are written; its folders `ladder` and `stills`.
    static func isOwn(_ name: String) -> Bool {
        let base = name.hasSuffix(".tmp") ? String(name.dropLast(4)) : name
        if base == manifestName || base == journalName || base == CheckpointAudioSink.fileName || ownFolders.contains(name) { return true }
        return base.hasPrefix("video_") && base.hasSuffix(".pkt") && base.dropFirst(6).dropLast(4).allSatisfy(\.isNumber)
    }

    /// Whether the folder (whose entries are `names`) is a checkpoint's: with a checkpoint's manifest, or holding
    /// only files a checkpoint writes and no manifest (one killed before it first saved its manifest). Not its
    /// folders then: a checkpoint makes them only after that save, and `stills/` alone is someone's pictures.
    static func isOwnFolder(_ folder: String, names: [String]) -> Bool {
        isCheckpoint(folder)
            || (!names.contains(manifestName) && names.allSatisfy { isOwn($0) && !ownFolders.contains($0) })
    }

    /// Whether `folder` holds a checkpoint's manifest (of this format or an earlier one: any with its version and
    /// fingerprint), not merely a file of that name.
    static func isCheckpoint(_ folder: String) -> Bool {
        guard let data = FileManager.default.contents(atPath: folder + "/" + manifestName),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return false }
        return object["version"] is NSNumber && object["fingerprint"] is String
    }

    /// Removes a checkpoint folder that has served: its own files, then the folder if nothing else is in it. A
    /// folder without a checkpoint's manifest is left alone (a run that used none, given someone's folder).
    static func remove(path: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        guard isOwnFolder(path, names: names) else { return }
        // The manifest last: a run killed while a large `ladder/` goes leaves a folder still known as a checkpoint
        // (without its manifest, its own folders make it someone's, refused by the next run).
        for name in names.sorted(by: { ($0 == manifestName ? 1 : 0) < ($1 == manifestName ? 1 : 0) }) where isOwn(name) {
            if ownFolders.contains(name) { try? FileManager.default.removeItem(atPath: path + "/" + name) } else { unlink(path + "/" + name) }
        }
        rmdir(path)
    }

    /// Removes the checkpoint's own files that the manifest does not list (nothing else).
    private func removeUnlisted() throws(MediaError) {
        let manifest = self.manifest
        let listed = Set(manifest.segments.map(\.file.name) + [manifest.audioFile?.name, Self.manifestName, Self.journalName].compactMap { $0 })
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for name in names where Self.isOwn(name) && !listed.contains(name) && !Self.ownFolders.contains(name) {
            unlink(path + "/" + name)
        }
    }

    private func save(_ manifest: CheckpointManifest) throws(MediaError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let target = path + "/" + Self.manifestName
        let temporary = target + ".tmp"
        guard let sealed = manifest.sealed(), let data = try? encoder.encode(sealed) else {
            throw MediaError(code: "storage_error", message: "Encoding the checkpoint manifest \(target) failed.")
        }
        // Written by hand, not with Foundation's atomic write: that leaves a temporary file of its own naming
        // behind when the process is killed, which the next attempt would take for someone else's file.
        try Self.writing("the checkpoint manifest", at: temporary, flags: O_CREAT | O_TRUNC) { file in
            Self.writeAll(data, to: file) && Self.retrying { fsync(file) } == 0
        }
        guard rename(temporary, target) == 0 else {
            throw MediaError(code: "storage_error", message: "Moving the checkpoint manifest into place failed: \(String(cString: strerror(errno))).")
        }
        try FileDurability.syncDirectory(containing: target)
        // The manifest on disk includes every journal line now: empty the journal (should the process stop
        // first, the lines it still has are skipped by their numbers).
        try Self.writing("the checkpoint journal", at: path + "/" + Self.journalName, flags: O_TRUNC) { journal in
            Self.retrying { fsync(journal) } == 0
        }
    }

    /// Opens `path` for writing with `flags` (never kept open: a folder another node took over fails here), runs
    /// `body`, closes; throws with the system's reason when opening fails or `body` says it failed.
    private static func writing(_ what: String, at path: String, flags: Int32, _ body: (Int32) -> Bool) throws(MediaError) {
        let descriptor = open(path, O_WRONLY | O_CLOEXEC | flags, 0o644)
        let done = descriptor >= 0 && body(descriptor)
        let failure = errno
        if descriptor >= 0 { close(descriptor) }
        guard done else {
            throw MediaError(code: failure == ENOSPC ? "no_space" : "storage_error",
                             message: "Writing \(what) \(path) failed: \(String(cString: strerror(failure))).")
        }
    }

    /// Writes all of `data` at the descriptor's position.
    private static func writeAll(_ data: Data, to descriptor: Int32) -> Bool {
        data.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let count = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { return false }
                offset += count
            }
            return true
        }
    }

    /// A system call's result, called again while a signal interrupts it.
    private static func retrying(_ call: () -> Int32) -> Int32 {
        var result = call()
        while result != 0 && errno == EINTR { result = call() }
        return result
    }

}
