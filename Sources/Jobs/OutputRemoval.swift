import Foundation

/// Removes what a job's output is: a folder with everything in it, or (from before outputs were folders) one file.
public enum OutputRemoval {
    /// Removes `path`; nil when it is gone (or was already), else why it could not be removed.
    public static func remove(_ path: String) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return errno == ENOENT ? nil : String(cString: strerror(errno)) }
        if info.st_mode & S_IFMT == S_IFDIR {
            do {
                try FileManager.default.removeItem(atPath: path)
            } catch {
                return error.localizedDescription
            }
            return nil
        }
        return unlink(path) == 0 || errno == ENOENT ? nil : String(cString: strerror(errno))
    }
}
