import Foundation
import Glibc

/// A job's output folder, written under a temporary name beside its final one (`<final>.<random>.partial`) and
/// renamed into place whole once every file in it is on disk; cancelled, failed or abandoned, it is removed.
public final class OutputDirectory {
    let finalPath: String
    let temporaryPath: String
    private var committed = false

    init(path: String) throws(MediaError) {
        finalPath = path
        temporaryPath = Self.temporaryPath(for: path)
        guard mkdir(temporaryPath, 0o755) == 0 else {
            throw MediaError(code: "output_failed",
                             message: "Creating the output folder \(temporaryPath) failed: \(String(cString: strerror(errno))).")
        }
    }

    /// A new temporary name beside `path`: `<path>.<random hex>.partial`, the shape the data directory's sweeps
    /// know as a partial output.
    public static func temporaryPath(for path: String) -> String {
        path + ".\(String(UInt32.random(in: 0...UInt32.max), radix: 16)).partial"
    }

    /// Absolute path of a file in the folder, by its relative path.
    func path(_ relative: String) -> String { temporaryPath + "/" + relative }

    /// Puts the file at `source` into the folder as `relative`: a hard link, which costs nothing, or a copy when
    /// `source` is on another file system (a checkpoint folder elsewhere).
    func adopt(file source: String, as relative: String) throws(MediaError) {
        let target = path(relative)
        let folder = URL(fileURLWithPath: target).deletingLastPathComponent().path
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        guard link(source, target) == 0 || (errno == EXDEV && Self.copy(source, to: target)) else {
            throw MediaError(code: "output_failed", message: "Linking \(relative) into the output failed: \(String(cString: strerror(errno))).")
        }
    }

    /// Copies the file at `source` to a new file `target`, bytes only (a job's child may change no file's mode or
    /// owner, which a library's copy sets); whether it did, errno saying why not.
    private static func copy(_ source: String, to target: String) -> Bool {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { return false }
        defer { close(input) }
        let output = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var copied = true
        while copied {
            let count = read(input, &buffer, buffer.count)
            if count == 0 { break }
            if count < 0 {
                if errno == EINTR { continue }
                copied = false
                break
            }
            var offset = 0
            while offset < count {
                let written = buffer.withUnsafeBytes { write(output, $0.baseAddress! + offset, count - offset) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else {
                    copied = false
                    break
                }
                offset += written
            }
        }
        let error = errno
        close(output)
        if !copied { unlink(target) }
        errno = error
        return copied
    }

    /// Flushes every file and folder to disk, renames the folder into place and flushes its parent: once this
    /// returns, a crash cannot leave a partial output under `finalPath`. `step` after each file flushed.
    func commit(step: () -> Void = {}) throws(MediaError) {
        try FileDurability.syncTree(atPath: temporaryPath, step: step)
        guard rename(temporaryPath, finalPath) == 0 else {
            throw MediaError(code: "output_failed",
                             message: "Moving the output into place at \(finalPath) failed: \(String(cString: strerror(errno))).")
        }
        committed = true
        try FileDurability.syncDirectory(containing: finalPath)
    }

    /// Removes the temporary folder and everything in it (nothing once committed).
    func discard() {
        guard !committed else { return }
        try? FileManager.default.removeItem(atPath: temporaryPath)
    }

    deinit { discard() }
}
