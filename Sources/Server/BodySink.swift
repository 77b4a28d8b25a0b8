import Foundation
import Glibc
import Jobs

/// Where a request body goes while it arrives, in bounded pieces: memory for small JSON, a file for uploads.
///
/// Sinks live on the loop's thread and never block it: a sink that cannot take more bytes yet (its file writes are
/// behind) says so through `whenReady`, and the connection stops reading until it is called back.
protocol BodySink: AnyObject {
    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError)
    /// The body is complete; what the handler gets.
    func finish() throws(HTTPError) -> Request.Body
    /// The request failed or the client left: drop what was written (idempotent, never blocks).
    func abort()
    /// Where the next body bytes may be read to directly, skipping `write`'s copy; nil if this sink must see them
    /// through `write`. Bytes read there are handed over with `commitDirect`.
    func directBuffer() throws(HTTPError) -> UnsafeMutableRawBufferPointer?
    /// Takes `count` body bytes that were read to the start of `directBuffer()`.
    func commitDirect(_ count: Int) throws(HTTPError)
    /// Whether more body bytes may be read now; if not, `resume` is called once (from any thread) when they may.
    func whenReady(_ resume: @escaping @Sendable () -> Void) -> Bool
    /// Whether another request waits for what this body holds (a tus upload's lock): its client then has
    /// `Timeouts.contended`, not the whole transfer timeout, to send its next bytes.
    var isWanted: Bool { get }
    /// Whether the handler may probe the file this body became (an upload made whole): such requests wait for a
    /// probe thread, the rest for a handler thread, never behind the probes. nil: not known until the body is
    /// written (`mayProbeOnceWritten`).
    var mayProbe: Bool? { get }
    /// `mayProbe` once the body's writes are done, waiting for them (on a pool thread, never the loop).
    func mayProbeOnceWritten() -> Bool
}

extension BodySink {
    func directBuffer() throws(HTTPError) -> UnsafeMutableRawBufferPointer? { nil }
    func commitDirect(_ count: Int) throws(HTTPError) {
        preconditionFailure("\(Self.self) gives no direct buffer")
    }
    func whenReady(_ resume: @escaping @Sendable () -> Void) -> Bool { true }
    var isWanted: Bool { false }
    var mayProbe: Bool? { true }
    func mayProbeOnceWritten() -> Bool { mayProbe ?? true }
}

/// Collects a small body in memory, refusing more than `limit` bytes, within the server's `BodyMemory`.
final class DataSink: BodySink {
    private var data = Data()
    private let limit: Int
    private let reservation: BodyMemory.Reservation

    init(limit: Int, memory: BodyMemory) {
        self.limit = limit
        reservation = BodyMemory.Reservation(memory)
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        guard data.count + bytes.count <= limit else {
            throw HTTPError(.contentTooLarge, "body_too_large", "This request's body may be at most \(limit) bytes.", closeConnection: true)
        }
        try reservation.grow(by: bytes.count)
        data.append(contentsOf: bytes)
    }

    var collected: Data { data }

    func finish() throws(HTTPError) -> Request.Body { .data(data) }

    func abort() {
        data = Data()
        reservation.releaseAll()
    }
}

/// Reads and drops a body a route does not use, up to `limit` bytes.
final class DiscardSink: BodySink {
    private var count = 0
    private let limit: Int

    init(limit: Int) { self.limit = limit }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        count += bytes.count
        guard count <= limit else {
            throw HTTPError(.contentTooLarge, "body_too_large", "This request's body may be at most \(limit) bytes.", closeConnection: true)
        }
    }

    func finish() throws(HTTPError) -> Request.Body { .none }

    func abort() {}
}

/// Streams a body to a temporary file in `directory`, written and hashed on the server's file threads through an
/// `UploadWriter`; the file is deleted on abort.
final class FileSink: BodySink {
    let path: String
    private var writer: UploadWriter?
    private(set) var size: Int64 = 0
    private let limit: Int64
    var filename: String?
    var contentType: String?

    /// Deletes the temporary files a previous process left in `directory` when it died mid-upload (a live one
    /// deletes its own), and the inputs a worker was fetching (named alike); returns how many. Call before serving.
    /// With `age` 0 all of them go (the data directory's lock makes this process the only one writing there);
    /// else only those last written more than `age` seconds ago: on shared storage, the rest are other nodes'
    /// uploads and fetches in progress.
    static func removeLeftovers(in directory: URL, olderThan age: Double = 0) -> Int {
        DataDirectory.removePartialUploads(in: directory, olderThan: age)
    }

    /// A sink for a new file in `directory` (created by the first write, on `pool`).
    init(directory: URL, limit: Int64, pool: BlockingPool, memory: BodyMemory? = nil) {
        // A random name from getrandom(2): Foundation's UUID() opens /dev/urandom, file work the loop must not do.
        var generator = SystemRandomNumberGenerator()
        let name = (0..<2).map { _ in String(generator.next() as UInt64, radix: 16) }.joined(separator: "-")
        path = directory.appendingPathComponent(DataDirectory.partialUploadName(name)).path
        self.limit = limit
        writer = UploadWriter(path: path, pool: pool, memory: memory)
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

    func whenReady(_ resume: @escaping @Sendable () -> Void) -> Bool {
        writer?.whenSpace(resume) ?? true
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

    /// Hands the rest to the file thread; the handler waits for the file with `UploadBody.complete()`.
    func finishFile() throws(HTTPError) -> UploadBody {
        guard let writer else { throw Self.discarded }
        self.writer = nil
        writer.finish()
        return UploadBody(writer: writer, size: size, filename: filename, contentType: contentType)
    }

    func abort() {
        writer?.discard()
        writer = nil
    }

    private static let discarded = HTTPError(.internalServerError, "storage_error", "The upload was already discarded.")

    /// Discards the upload and turns a write error into the response.
    private func failure(_ error: IOError) -> HTTPError {
        abort()
        var answer = Self.httpError(error)
        answer.closeConnection = true
        return answer
    }

    /// The response for a failed upload write: 507 for a full disk, 503 with Retry-After for a server out of file
    /// descriptors (a moment's load: it was a 500 `storage_error`), 500 otherwise.
    static func httpError(_ error: IOError) -> HTTPError {
        if error.errnoCode == ENOSPC || error.errnoCode == EDQUOT {
            return HTTPError(.insufficientStorage, "no_space", "The server's disk is full; the upload was discarded.")
        }
        if error.errnoCode == EMFILE || error.errnoCode == ENFILE {
            return HTTPError(.serviceUnavailable, "server_busy", "The server has too many files open to take the upload now; try again shortly.",
                             headers: HTTPHeaders([("Retry-After", "2")]))
        }
        return HTTPError(.internalServerError, "storage_error", "Writing the upload failed: \(error).")
    }

    deinit { writer?.discard() }
}
