import Foundation
import Glibc

/// Makes a file and its name survive a power cut: `fsync` of its data before it is renamed into place, then of the
/// directory that holds the new name. Without the second, a crash can leave a database row (committed with
/// `synchronous=FULL`) pointing at a file whose directory entry never reached the disk.
public enum FileDurability {
    /// Flushes the data of the file at `path` to the device. Throws with the system's reason if that fails: the
    /// bytes may then not be on disk, and the caller must not report them stored.
    public static func syncFile(atPath path: String) throws(MediaError) {
        try sync(path, flags: O_RDONLY, what: "the file")
    }

    /// Flushes the directory that holds `path`, so that a file created or renamed into it keeps its name.
    public static func syncDirectory(containing path: String) throws(MediaError) {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        try sync(directory, flags: O_RDONLY | O_DIRECTORY, what: "the folder")
    }

    /// Flushes every file and folder under `root` (and `root` itself) to the device; `step` after each file (a
    /// ladder's thousands of files take a while on slow storage: progress for a watchdog).
    public static func syncTree(atPath root: String, step: () -> Void = {}) throws(MediaError) {
        var folders = [root]
        if let walker = FileManager.default.enumerator(at: URL(fileURLWithPath: root, isDirectory: true),
                                                       includingPropertiesForKeys: [.isDirectoryKey]) {
            for case let url as URL in walker {
                if (try? url.resourceValues(forKeys: [.isDirectoryKey]))?.isDirectory == true {
                    folders.append(url.path)
                } else {
                    try syncFile(atPath: url.path)
                    step()
                }
            }
        }
        for folder in folders { try syncFile(atPath: folder) }
    }

    /// Creates `path` holding `text` unless something is there already: written whole and flushed under a name of
    /// its own, then linked into place and the folder flushed, so that processes starting at once on a shared
    /// folder all keep the one that got there first, and a crash never leaves an empty file. Whether this call made it.
    @discardableResult
    public static func createOnce(at path: String, text: String, mode: mode_t) throws(MediaError) -> Bool {
        let temporary = path + ".\(UInt32.random(in: 0...UInt32.max)).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else {
            throw MediaError(code: "storage_error", message: "Creating \(temporary) failed: \(String(cString: strerror(errno))).")
        }
        defer { unlink(temporary) }
        let bytes = Array(text.utf8)
        let written = write(descriptor, bytes, bytes.count)
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written == bytes.count, synced else {
            throw MediaError(code: "storage_error", message: "Writing \(temporary) failed: \(String(cString: strerror(errno))).")
        }
        let made = link(temporary, path) == 0
        guard made || errno == EEXIST else {
            throw MediaError(code: "storage_error", message: "Creating \(path) failed: \(String(cString: strerror(errno))).")
        }
        if made { try syncDirectory(containing: path) }
        return made
    }

    private static func sync(_ path: String, flags: Int32, what: String) throws(MediaError) {
        let descriptor = open(path, flags | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure(what, path) }
        defer { close(descriptor) }
        while fsync(descriptor) != 0 {
            guard errno == EINTR else { throw failure(what, path) }
        }
    }

    private static func failure(_ what: String, _ path: String) -> MediaError {
        MediaError(code: "storage_error", message: "Flushing \(what) \(path) to disk failed: \(String(cString: strerror(errno))).")
    }
}
