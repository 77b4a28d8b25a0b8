import Glibc

/// A file opened for reading by a handler (on its pool, since opening can block) and sent by the loop; owns the
/// descriptor and closes it when the response is done with it.
public final class OpenFile: Sendable {
    let descriptor: Int32
    /// Bytes, when it was opened.
    public let size: Int64

    /// Opens `path` read-only; nil when it cannot be opened (gone, or not readable).
    public init?(path: String) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            close(descriptor)
            return nil
        }
        self.descriptor = descriptor
        size = Int64(status.st_size)
    }

    deinit { close(descriptor) }
}
