import Foundation
import Glibc
import Locks

/// A job's checkpoint folder: durable pieces of an interrupted transcode that a later attempt continues from.
///
/// Opening it checks what an earlier attempt left: a manifest made with other settings or input is dropped whole;
/// each listed file must have its size and SHA-256, and a segment that does not is redone with every one after it;
/// files the manifest does not list (a segment being written when the process died) are removed. Every change is
/// written to the manifest durably (temporary file, fsync, rename, fsync of the folder) after the file it lists is.
///
/// The video encode thread and the audio thread both record what they finish: the manifest is kept under a lock.
final class Checkpoint: @unchecked Sendable {
    // @unchecked: `state` is a lock; `path` and `found` are constants.
    let path: String
    /// What opening found: segments kept and dropped, and whether the audio was kept.
    let found: (segmentsKept: Int, segmentsDropped: Int, audioKept: Bool)
    private let state: LockedValue<CheckpointManifest>

    static let manifestName = "manifest.json"

    init(path: String, fingerprint: String, segmentSeconds: Double) throws(MediaError) {
        self.path = path
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw MediaError(code: "output_failed", message: "Creating the checkpoint folder \(path) failed: \(error.localizedDescription)")
        }
        var manifest = CheckpointManifest(fingerprint: fingerprint, segmentSeconds: segmentSeconds)
        var dropped = 0
        if let data = FileManager.default.contents(atPath: path + "/" + Self.manifestName),
           let stored = try? JSONDecoder().decode(CheckpointManifest.self, from: data),
           stored.version == CheckpointManifest.currentVersion, stored.fingerprint == fingerprint,
           stored.segmentSeconds == segmentSeconds {
            manifest = stored
            if let audio = manifest.audioFile, !Self.verify(audio, in: path) { manifest.audioFile = nil }
            if let bad = manifest.segments.firstIndex(where: { !Self.verify($0.file, in: path) }) {
                dropped = manifest.segments.count - bad
                manifest.segments.removeSubrange(bad...)
                manifest.videoComplete = false
            }
        }
        found = (manifest.segments.count, dropped, manifest.audioFile != nil)
        state = LockedValue(manifest)
        try removeUnlisted()
        try save(manifest)
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

    /// Forgets the video (its encoder is set up differently now): every segment is made again.
    func resetVideo() throws(MediaError) {
        try update { manifest in
            manifest.video = nil
            manifest.segments = []
            manifest.videoComplete = false
        }
        try removeUnlisted()
    }

    /// Forgets the audio: it is made again.
    func resetAudio() throws(MediaError) {
        try update { manifest in
            manifest.audio = nil
            manifest.audioFile = nil
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

    /// Removes what the manifest does not list.
    private func removeUnlisted() throws(MediaError) {
        let manifest = self.manifest
        let listed = Set(manifest.segments.map(\.file.name) + [manifest.audioFile?.name, Self.manifestName].compactMap { $0 })
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for name in names where !listed.contains(name) {
            unlink(path + "/" + name)
        }
    }

    private func save(_ manifest: CheckpointManifest) throws(MediaError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let target = path + "/" + Self.manifestName
        let temporary = target + ".tmp"
        guard let data = try? encoder.encode(manifest), FileManager.default.createFile(atPath: temporary, contents: data) else {
            throw MediaError(code: "storage_error", message: "Writing the checkpoint manifest \(target) failed.")
        }
        try FileDurability.syncFile(atPath: temporary)
        guard rename(temporary, target) == 0 else {
            throw MediaError(code: "storage_error", message: "Moving the checkpoint manifest into place failed: \(String(cString: strerror(errno))).")
        }
        try FileDurability.syncDirectory(containing: target)
    }
}
