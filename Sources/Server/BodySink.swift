import CSystem
import Foundation
import Glibc

/// Where a request body goes while it arrives, in bounded pieces: memory for small JSON, a file for uploads.
protocol BodySink: AnyObject {
    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError)
    /// The body is complete; what the handler gets.
    func finish() throws(HTTPError) -> Request.Body
    /// The request failed or the client left: drop what was written (idempotent).
    func abort()
}

/// Collects a small body in memory, refusing more than `limit` bytes.
final class DataSink: BodySink {
    private var data = Data()
    private let limit: Int

    init(limit: Int) { self.limit = limit }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        guard data.count + bytes.count <= limit else {
            throw HTTPError(.contentTooLarge, "body_too_large", "This request's body may be at most \(limit) bytes.", closeConnection: true)
        }
        data.append(contentsOf: bytes)
    }

    var collected: Data { data }

    func finish() throws(HTTPError) -> Request.Body { .data(data) }

    func abort() { data = Data() }
}

/// Streams a body to a temporary file in `directory`, hashing it on the way; the file is deleted on abort.
final class FileSink: BodySink {
    let path: String
    private var descriptor: Int32
    private let hasher = SHA256()
    private(set) var size: Int64 = 0
    private let limit: Int64
    var filename: String?
    var contentType: String?

    init(directory: URL, limit: Int64) throws(HTTPError) {
        path = directory.appendingPathComponent(".upload-\(UUID().uuidString.lowercased()).partial").path
        self.limit = limit
        descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            throw HTTPError(errno == ENOSPC ? .insufficientStorage : .internalServerError,
                            errno == ENOSPC ? "no_space" : "storage_error",
                            "Cannot store the upload: \(String(cString: strerror(errno))).", closeConnection: true)
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        guard size + Int64(bytes.count) <= limit else {
            abort()
            throw HTTPError(.contentTooLarge, "upload_too_large", "Uploads may be at most \(limit) bytes.", closeConnection: true)
        }
        do {
            try Posix.writeAll(descriptor, bytes)
        } catch {
            abort()
            if error.errnoCode == ENOSPC || error.errnoCode == EDQUOT {
                throw HTTPError(.insufficientStorage, "no_space", "The server's disk is full; the upload was discarded.", closeConnection: true)
            }
            throw HTTPError(.internalServerError, "storage_error", "Writing the upload failed: \(error).", closeConnection: true)
        }
        hasher.update(bytes)
        let before = size
        size += Int64(bytes.count)
        // Start disk writeback every 8 MiB, so that making the upload durable at the end is quick.
        let step: Int64 = 8 * 1024 * 1024
        if before / step != size / step {
            let end = size / step * step
            _ = tc_start_writeback(descriptor, end - step, step)
        }
    }

    func finish() throws(HTTPError) -> Request.Body { .file(try finishFile()) }

    /// Closes the file and describes it.
    func finishFile() throws(HTTPError) -> UploadedFile {
        guard descriptor >= 0 else { throw HTTPError(.internalServerError, "storage_error", "The upload was already discarded.") }
        close(descriptor)
        descriptor = -1
        return UploadedFile(path: path, size: size, sha256: hasher.finish(), filename: filename, contentType: contentType)
    }

    func abort() {
        if descriptor >= 0 {
            close(descriptor)
            descriptor = -1
        }
        unlink(path)
    }

    deinit {
        if descriptor >= 0 {
            close(descriptor)
            unlink(path)
        }
    }
}
