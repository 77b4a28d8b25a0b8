import Foundation
import Glibc

/// Removes what a job's output is: a folder with everything in it, or (from before outputs were folders) one file.
public enum OutputRemoval {
    /// Removes `path`; nil when it is gone (or was already), else why it could not be removed.
    public static func remove(_ path: String) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return errno == ENOENT ? nil : String(cString: strerror(errno)) }
        if info.st_mode & S_IFMT == S_IFDIR {
            if let problem = emptyFolder(path) { return problem }
            return rmdir(path) == 0 || errno == ENOENT ? nil : String(cString: strerror(errno))
        }
        return unlink(path) == 0 || errno == ENOENT ? nil : String(cString: strerror(errno))
    }

    /// Removes everything in the folder at `path`, each name relative to its own folder's descriptor, one folder
    /// open at a time: by full paths, a tree nested past PATH_MAX (a child taken over by a hostile file made 3,000
    /// levels with `mkdirat`) could not be removed ("The file name is invalid"), its files kept on disk for good, and
    /// depth-first recursion would take a stack frame per level. Links are removed, never followed. A folder the
    /// child left unreadable or unwritable (mode 0300, 0500: the server's own, as every file a child makes) is given
    /// back its owner's rights first: it stopped the removal, and the whole output stayed.
    static func emptyFolder(_ path: String) -> String? {
        var folder = openOwned(AT_FDCWD, path)
        guard folder >= 0 else { return String(cString: strerror(errno)) }
        /// The names of the folders gone down into, from `path`.
        var descended: [String] = []
        while true {
            // The folder's files go; the first folder in it is gone down into.
            var subfolder: String?
            guard let listing = fdopendir(dup(folder)) else {
                close(folder)
                return String(cString: strerror(errno))
            }
            while let entry = readdir(listing) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name == "." || name == ".." { continue }
                if unlinkat(folder, name, 0) == 0 || errno == ENOENT { continue }
                guard errno == EISDIR else {
                    let problem = "\(name): \(String(cString: strerror(errno)))"
                    closedir(listing)
                    close(folder)
                    return problem
                }
                subfolder = name
                break
            }
            closedir(listing)
            if let subfolder {
                let inner = openOwned(folder, subfolder)
                guard inner >= 0 else {
                    let problem = "\(subfolder): \(String(cString: strerror(errno)))"
                    close(folder)
                    return problem
                }
                close(folder)
                folder = inner
                descended.append(subfolder)
                continue
            }
            // Empty: back up, and remove it from there.
            guard let name = descended.popLast() else {
                close(folder)
                return nil
            }
            let outer = openat(folder, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(folder)
            guard outer >= 0 else { return String(cString: strerror(errno)) }
            folder = outer
            if unlinkat(folder, name, AT_REMOVEDIR) != 0 && errno != ENOENT {
                let problem = "\(name): \(String(cString: strerror(errno)))"
                close(folder)
                return problem
            }
        }
    }

    /// The folder `name` in `parent` (a descriptor, or AT_FDCWD for a path) opened to be emptied, its owner's rights
    /// given back first when it cannot be read and when it cannot be written; -1 (errno set) when it cannot be opened.
    private static func openOwned(_ parent: Int32, _ name: String) -> Int32 {
        let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        var folder = openat(parent, name, flags)
        if folder < 0, errno == EACCES, fchmodat(parent, name, 0o700, 0) == 0 { folder = openat(parent, name, flags) }
        var status = stat()
        if folder >= 0, fstat(folder, &status) == 0, status.st_mode & 0o700 != 0o700 { fchmod(folder, 0o700) }
        return folder
    }
}
