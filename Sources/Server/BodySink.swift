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
    /// Where the next body bytes may be read to directly, skipping `write`'s copy; nil if this sink must see them
    /// through `write`. Bytes read there are handed over with `commitDirect`.
    func directBuffer() throws(HTTPError) -> UnsafeMutableRawBufferPointer?
    /// Takes `count` body bytes that were read to the start of `directBuffer()`.
    func commitDirect(_ count: Int) throws(HTTPError)
}

extension BodySink {
    func directBuffer() throws(HTTPError) -> UnsafeMutableRawBufferPointer? { nil }
    func commitDirect(_ count: Int) throws(HTTPError) {
        preconditionFailure("\(Self.self) gives no direct buffer")
    }
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

/// Streams a body to a temporary file in `directory`, hashing it on the way (off the event loop, through an
/// `UploadWriter`); the file is deleted on abort.
final class FileSink: BodySink {
    let path: String
    private var writer: UploadWriter?
    private(set) var size: Int64 = 0
    private let limit: Int64
    var filename: String?
    var contentType: String?

    private static let prefix = ".upload-", suffix = ".partial"

    /// Deletes the temporary files a previous process left in `directory` when it died mid-upload (a live one
    /// deletes its own); returns how many. Call before serving: the data directory's lock makes this process the
    /// only one writing there.
    static func removeLeftovers(in directory: URL) -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        var removed = 0
        for name in names where name.hasPrefix(prefix) && name.hasSuffix(suffix) {
            if unlink(directory.appendingPathComponent(name).path) == 0 { removed += 1 }
        }
        return removed
    }

    init(directory: URL, limit: Int64) throws(HTTPError) {
        path = directory.appendingPathComponent(Self.prefix + UUID().uuidString.lowercased() + Self.suffix).path
        self.limit = limit
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            throw HTTPError(errno == ENOSPC ? .insufficientStorage : .internalServerError,
                            errno == ENOSPC ? "no_space" : "storage_error",
                            "Cannot store the upload: \(String(cString: strerror(errno))).", closeConnection: true)
        }
        writer = UploadWriter(descriptor: descriptor)
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        guard size + Int64(bytes.count) <= limit else {
            abort()
            throw HTTPError(.contentTooLarge, "upload_too_large", "Uploads may be at most \(limit) bytes.", closeConnection: true)
        }
        guard let writer else { throw Self.discarded }
        do {
            try writer.append(bytes)
        } catch {
            throw failure(error)
        }
        size += Int64(bytes.count)
    }

    func directBuffer() throws(HTTPError) -> UnsafeMutableRawBufferPointer? {
        guard let writer, size < limit else { return nil }
        let space = writer.reserve()
        return UnsafeMutableRawBufferPointer(rebasing: space[0..<Int(min(Int64(space.count), limit - size))])
    }

    func commitDirect(_ count: Int) throws(HTTPError) {
        guard let writer else { throw Self.discarded }
        do {
            try writer.commit(count)
        } catch {
            throw failure(error)
        }
        size += Int64(count)
    }

    func finish() throws(HTTPError) -> Request.Body { .file(try finishFile()) }

    /// Waits for the file to be written, closes it, and describes it.
    func finishFile() throws(HTTPError) -> UploadedFile {
        guard let writer else { throw Self.discarded }
        self.writer = nil
        return UploadedFile(path: path, size: size, sha256: writer.finish(), filename: filename, contentType: contentType)
    }

    func abort() {
        writer?.discard()
        writer = nil
        unlink(path)
    }

    private static let discarded = HTTPError(.internalServerError, "storage_error", "The upload was already discarded.")

    /// Discards the upload and turns a write error into the response: 507 for a full disk.
    private func failure(_ error: IOError) -> HTTPError {
        abort()
        if error.errnoCode == ENOSPC || error.errnoCode == EDQUOT {
            return HTTPError(.insufficientStorage, "no_space", "The server's disk is full; the upload was discarded.", closeConnection: true)
        }
        return HTTPError(.internalServerError, "storage_error", "Writing the upload failed: \(error).", closeConnection: true)
    }

    deinit {
        if let writer {
            writer.discard()
            unlink(path)
        }
    }
}
