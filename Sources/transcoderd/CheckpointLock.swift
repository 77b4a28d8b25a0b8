import Foundation
import Glibc

/// The lock a `transcode --checkpoint DIR` run holds on DIR (`flock` on the folder) while it runs: two runs on one
/// folder wrote the same segment files, journal lines and manifest into each other's, and the next run found the
/// folder damaged. Let go when the value goes (or the process ends). A file system that does not lock folders (NFS
/// answers EBADF for a folder opened to read) runs without it, as before, with a warning.
final class CheckpointLock {
    struct Refusal: Error { let message: String }

    private let descriptor: Int32
    private let path: String
    /// Whether this run made the folder: it goes again if the run fails before putting anything in it.
    private let madeFolder: Bool

    /// Makes the folder if it is missing and takes its lock; throws when another run holds it or it cannot be made.
    init(path: String) throws(Refusal) {
        self.path = path
        madeFolder = !FileManager.default.fileExists(atPath: path)
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw Refusal(message: "Creating the checkpoint folder \(path) failed: \(error.localizedDescription)")
        }
        var descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw Refusal(message: "Opening the checkpoint folder \(path) failed: \(String(cString: strerror(errno)))")
        }
        if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            close(descriptor)
            switch code {
            case EWOULDBLOCK:
                throw Refusal(message: "The checkpoint folder \(path) is in use by another transcode; wait for it to end or give another folder.")
            case EBADF, ENOLCK, EOPNOTSUPP, EINVAL:
                Console.stderr("warning: the checkpoint folder \(path) cannot be locked here (\(String(cString: strerror(code)))); "
                               + "make sure no other transcode uses it\n")
                descriptor = -1
            default:
                throw Refusal(message: "Locking the checkpoint folder \(path) failed: \(String(cString: strerror(code)))")
            }
        }
        self.descriptor = descriptor
    }

    /// The run failed: a folder it made and left empty goes (an empty checkpoint resumes nothing).
    func failed() {
        if madeFolder { rmdir(path) }
    }

    deinit { if descriptor >= 0 { close(descriptor) } }
}
