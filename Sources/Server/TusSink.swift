import Crypto
import Foundation
import Glibc
import Jobs
import Locks
import Pipeline

/// The body of a tus PATCH (or of a creation's first chunk), appended to the upload's `.bin` file through an
/// `UploadWriter` on the server's file threads. Opening the file there also checks what only the file can tell:
/// the upload exists and has not expired, no other PATCH holds it (an exclusive `flock`), and the request's offset
/// is its size. A body cut short keeps what arrived (the bytes are the client's, in order), unless it carries a
/// checksum that can then no longer be checked.
final class TusSink: BodySink {
    /// What the request does to the upload.
    enum Mode {
        /// Creates it (`POST /v1/tus`, the body its first chunk).
        case create(TusUpload)
        /// Appends at `offset` (`PATCH /v1/tus/{id}`); `length` sets a deferred length.
        case append(id: String, offset: Int64, length: Int64?)
    }

    let writer: UploadWriter
    let id: String
    private let mode: Mode
    private var size: Int64 = 0
    /// The upload's length as the file was opened (a deferred one nil), once it was.
    private let openedLength = LockedValue<Int64??>(nil)
    private let hasChecksum: Bool
    /// This request's hold on the upload, registered in `holders` once its lock is taken.
    private let holder = TusLockHolders.Holder()
    private let holders: TusLockHolders

    init(mode: Mode, uploads: TusUploads, digests: TusDigests, holders: TusLockHolders, maxBytes: Int64,
         checksum: (Digest, Data)?, pool: BlockingPool, memory: BodyMemory? = nil) {
        let id: String
        let offset: Int64
        switch mode {
        case .create(let upload):
            id = upload.id
            offset = 0
        case .append(let upload, let at, _):
            id = upload
            offset = at
        }
        self.id = id
        self.mode = mode
        self.holders = holders
        hasChecksum = checksum != nil
        // The hash so far is taken once the file is held: the PATCH before may hand it back only as it lets go
        // (a client that resends after a dropped connection waits for that), and taken at the head it was lost.
        let hashing: UploadWriter.Hashing = offset == 0 ? .continuing(Digest()) : .resuming({ digests.take(id, at: offset) })
        let checked = checksum != nil
        let holder = holder, openedLength = openedLength
        let opening = UploadWriter.Opening.append({ path throws(IOError) in
            do throws(IOError) {
                let opened = try Self.open(path, mode: mode, uploads: uploads, maxBytes: maxBytes, noteChunk: checked)
                holders.hold(id, by: holder)
                openedLength.withLock { $0 = .some(opened.length) }
                return (opened.descriptor, opened.length ?? maxBytes)
            } catch where error.errnoCode == EWOULDBLOCK {
                // Told, the holder here lets go within seconds if its client went quiet: EBUSY says to ask again soon.
                guard holders.want(id) else { throw error }
                throw IOError(errnoCode: EBUSY, reason: error.reason)
            }
        })
        var settled: (@Sendable () -> Void)?
        if checked {
            let upload = id
            settled = { @Sendable in uploads.clearChunk(upload) }
        }
        // The running hash goes back for the next PATCH whenever the bytes stay, a request cut short included: kept
        // only by a whole one, it was lost at the first dropped connection, and the completion read the whole file
        // again (minutes for a large upload, inside the final PATCH).
        writer = UploadWriter(path: uploads.dataPath(id), pool: pool, memory: memory, opening: opening, hashing: hashing,
                              checksum: checksum.map { (digest: $0.0, expected: $0.1) }, settled: settled,
                              handBack: { digest, end in digests.put(id, digest, offset: end) })
        writer.openEarly()
    }

    /// On a file thread: the checks, then the locked descriptor and the size the file may reach. Refusals come back
    /// as errno values `TusEndpoint.answer` turns into responses.
    /// With `noteChunk` (the chunk carries a checksum) its start is noted once the upload is held
    /// (`TusUploads.markChunk`), so a crash before the check takes its bytes back.
    private static func open(_ path: String, mode: Mode, uploads: TusUploads, maxBytes: Int64,
                             noteChunk: Bool) throws(IOError) -> (descriptor: Int32, length: Int64?) {
        var upload: TusUpload
        var offset: Int64 = 0
        switch mode {
        case .create(let new):
            do {
                try uploads.create(new)
            } catch {
                throw IOError(errnoCode: EIO, reason: error.message)
            }
            upload = new
        case .append(let id, let at, _):
            let read: TusUpload?
            do throws(MediaError) {
                read = try uploads.readUpload(id)
            } catch {
                throw TusEndpoint.unreadable(error) // not a 404, which has a client start the whole upload again
            }
            guard let found = read, !uploads.isExpired(found, at: Date().timeIntervalSince1970) else {
                throw IOError(errnoCode: ENOENT, reason: "No upload has the id \(id).")
            }
            upload = found
            offset = at
            uploads.recoverCompletion(of: upload)
            if upload.completedAt != nil {
                throw IOError(errnoCode: ESPIPE, reason: "Upload-Offset: the upload is complete at \(uploads.offset(of: upload)) bytes.")
            }
        }
        /// Why the bytes are not at `path`: moved on by a completion (under way, or cut short), every one there (not
        /// a 404, which has a client start over; a HEAD tells the offset and completes what a crash left), or gone.
        func missing() -> IOError {
            if let length = upload.length, uploads.upload(upload.id) != nil,
               let moved = uploads.bytesLocation(of: upload), moved.path != uploads.dataPath(upload.id) {
                return IOError(errnoCode: ESPIPE, reason: "Upload-Offset: all \(length) bytes are there and the upload is being completed; HEAD tells when.")
            }
            return IOError(errnoCode: ENOENT, reason: "No upload has the id \(upload.id).")
        }
        let descriptor = Glibc.open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { throw missing() }
            throw IOError(errnoCode: code, reason: "Opening the upload failed")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(descriptor)
            throw IOError(errnoCode: code == EWOULDBLOCK ? EWOULDBLOCK : code,
                          reason: "Another PATCH of this upload is still running; try again once it ends.")
        }
        // A DELETE (or the sweep of expired uploads) that took the lock between the open and the flock removed the
        // files: the lock is on bytes no one can reach, and a deferred length saved now made a description of an
        // upload without bytes, which HEAD answered as complete. (Or a completion moved them on meanwhile.)
        var opened = stat(), named = stat()
        guard fstat(descriptor, &opened) == 0, stat(path, &named) == 0, opened.st_dev == named.st_dev,
              opened.st_ino == named.st_ino else {
            close(descriptor)
            throw missing()
        }
        // A chunk whose request died with its process before its checksum was checked does not count.
        guard uploads.takeBackUncheckedChunk(upload.id, descriptor: descriptor) else {
            close(descriptor)
            throw IOError(errnoCode: EIO, reason: "Taking back an unchecked chunk of the upload failed.")
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int64(status.st_size) == offset else {
            close(descriptor)
            throw IOError(errnoCode: ESPIPE, reason: "Upload-Offset: the upload is at \(Int64(status.st_size)) bytes, not \(offset).")
        }
        // A deferred length is set once the upload is held and its size known: a refused request changes nothing.
        if case .append(_, _, let length?) = mode {
            do throws(IOError) {
                guard upload.length == nil || upload.length == length else {
                    throw IOError(errnoCode: EINVAL, reason: "Upload-Length: the upload's length is already \(upload.length ?? 0).")
                }
                guard length >= offset else {
                    throw IOError(errnoCode: EINVAL, reason: "Upload-Length: expected at least the \(offset) bytes received.")
                }
                guard length <= maxBytes else {
                    throw IOError(errnoCode: EFBIG, reason: "Upload-Length: uploads may be at most \(maxBytes) bytes.")
                }
                if upload.length == nil {
                    upload.length = length
                    do {
                        try uploads.save(upload)
                    } catch {
                        throw IOError(errnoCode: EIO, reason: error.message)
                    }
                }
            } catch {
                close(descriptor)
                throw error
            }
        }
        if noteChunk {
            do {
                try uploads.markChunk(upload.id, at: offset)
            } catch {
                close(descriptor)
                throw IOError(errnoCode: EIO, reason: error.message)
            }
        }
        return (descriptor, upload.length)
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        do {
            try writer.append(bytes)
        } catch {
            throw failure(error)
        }
        size += Int64(bytes.count)
    }

    func whenReady(_ resume: @escaping @Sendable () -> Void) -> Bool { writer.whenSpace(resume) }

    func directBuffer() throws(HTTPError) -> UnsafeMutableRawBufferPointer? { writer.reserve() }

    func commitDirect(_ count: Int) throws(HTTPError) {
        do {
            try writer.commit(count)
        } catch {
            throw failure(error)
        }
        size += Int64(count)
    }

    func finish() throws(HTTPError) -> Request.Body {
        writer.finish()
        return .file(UploadBody(writer: writer, size: size, filename: nil, contentType: nil))
    }

    /// The request failed or the client left: what arrived stays (flushed, the lock let go), unless a checksum came
    /// with it, which can no longer be checked.
    func abort() { writer.finish(discardingChunk: hasChecksum) }

    /// Whether this chunk may make the upload whole, so that its handler completes it (hashes, probes): only then
    /// does the request wait for a probe thread. A chunk ending short of the length is answered by a handler thread,
    /// never queued behind completions and probes.
    var mayProbe: Bool? {
        switch mode {
        case .create(let upload): return upload.length == size
        case .append(_, let offset, let length?): return offset + size == length
        case .append(_, let offset, nil):
            // The upload's length is read as the file is opened, on a file thread: a small body may be whole first.
            guard case .some(let length) = openedLength.withLock({ $0 }) else { return nil }
            return length == offset + size
        }
    }

    func mayProbeOnceWritten() -> Bool {
        _ = try? writer.complete()
        // Not opened (refused: the handler answers why) needs no probe either.
        return mayProbe ?? false
    }

    /// Whether another request waits for the upload this body holds (`TusLockHolders`).
    var isWanted: Bool { holder.isWanted }

    deinit { holders.release(id, by: holder) }

    private func failure(_ error: IOError) -> HTTPError {
        abort()
        var answer = TusEndpoint.answer(error)
        answer.closeConnection = true
        if case .create = mode, openedLength.withLock({ $0 }) != nil {
            // Refused as its first chunk arrived (past the length, a full disk), the upload was created when the
            // file opened: its client learns where, as when the refusal comes at the body's end, and sends the bytes
            // there rather than make another and leave this one to expire.
            answer.headers.set("Location", "/v1/tus/\(id)")
        }
        return answer
    }
}
