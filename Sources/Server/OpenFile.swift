import Glibc
import Locks

/// A file opened for reading by a handler (on its pool, since opening can block) and sent by the loop; owns the
/// descriptor and closes it when the response is done with it.
public final class OpenFile: Sendable {
    let descriptor: Int32
    /// Bytes, when it was opened.
    public let size: Int64
    /// Whether `deinit` closes the descriptor (not once `close(on:)` took it).
    private let owned = LockedValue(true)

    /// Opens `path` read-only; nil when it cannot be opened (gone, or not readable).
    public init?(path: String) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            Glibc.close(descriptor)
            return nil
        }
        self.descriptor = descriptor
        size = Int64(status.st_size)
    }

    /// Closes the descriptor on `pool`, off the event loop: the last close of a file deleted meanwhile (a job
    /// deleted mid-download, an output retention removed) frees its blocks, which takes a while for a large file
    /// (and on NFS is a round trip). The handle must not be used after.
    func close(on pool: BlockingPool) {
        guard owned.withLock({ owned in defer { owned = false }; return owned }) else { return }
        let descriptor = descriptor
        pool.submit { Glibc.close(descriptor) }
    }

    deinit { if owned.withLock({ $0 }) { Glibc.close(descriptor) } }
}
