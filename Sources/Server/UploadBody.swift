import Crypto
import Foundation

/// A request body the server writes to a temporary file as it arrives. The handler calls `complete()`, which waits
/// for the last write and the hash; the file is removed when the request is done unless the handler moved it.
public final class UploadBody: Sendable {
    private let writer: UploadWriter
    /// Temporary path inside the data directory.
    public var path: String { writer.path }
    /// Bytes.
    public let size: Int64
    /// Filename the client gave (multipart `filename=`), not sanitised: never use it as a path.
    public let filename: String?
    /// Content type the client declared for the part.
    public let contentType: String?

    init(writer: UploadWriter, size: Int64, filename: String?, contentType: String?) {
        self.writer = writer
        self.size = size
        self.filename = filename
        self.contentType = contentType
    }

    /// Waits until every byte is written and hashed; blocks, so handlers call it on their pool, never on a loop.
    /// A failed write is the error (507 for a full disk).
    public func complete() throws(HTTPError) -> UploadedFile {
        do {
            let digest = try writer.complete()
            return UploadedFile(path: path, size: size, sha256: digest, filename: filename, contentType: contentType)
        } catch {
            throw FileSink.httpError(error)
        }
    }

    /// Waits like `complete()`, turning a failed write into an answer with `answer` (for files a route appends to,
    /// whose refusals mean something of their own). Returns the SHA-256 ("" when not hashed).
    func complete(answering answer: (IOError) -> HTTPError) throws(HTTPError) -> String {
        do {
            return try writer.complete()
        } catch {
            throw answer(error)
        }
    }

    /// After `complete`: the chunk checksum asked for, whether the chunk was taken back, the size left.
    var checksum: Data? { writer.checksumValue }
    var chunkDiscarded: Bool { writer.chunkDiscarded }
    var endSize: Int64? { writer.endSize }
    /// Drops the file unless it was moved away (idempotent; the removal runs on a file thread).
    func discard() { writer.discard() }

    deinit { writer.discard() }
}
