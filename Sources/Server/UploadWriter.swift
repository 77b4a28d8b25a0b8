import Glibc
import Locks

/// Writes an upload's bytes to its file and hashes them (SHA-256) on the server's file threads, in arrival order,
/// while the event loop goes on reading the socket. The loop never waits for the disk: it reads into one of a few
/// buffers (no copy: see `reserve`), hands full ones over, and when all are in flight it stops reading that
/// connection until one comes back (`whenSpace`), the back-pressure a blocking write would give.
///
/// Memory stays at `maxBuffers × bufferBytes` per upload, plus at most the bytes of one read handed to `append`.
/// The file is created on a file thread too (an `open` on a network file system can block), so a failure to create
/// or write it shows up at the next `commit`, or at `complete`.
///
/// No early writeback (`sync_file_range`): it sent every byte to the disk while the upload was still arriving, even
/// for uploads then refused and deleted. The fsync before an upload is acknowledged writes what the kernel has not
/// flushed by then.
final class UploadWriter: @unchecked Sendable {
    // Safe to share: `current`, `filled` and `isFinished` belong to the loop's thread (the only caller of
    // the public methods but `complete`); `descriptor` and `hasher` are touched only by the work items of `executor`,
    // which runs one at a time; everything else is in `shared`, behind its lock. A `Buffer` belongs to one side at a
    // time: the loop fills it, the file thread owns it until it is back on `free`.
    private final class Buffer: @unchecked Sendable {
        let bytes: UnsafeMutableRawBufferPointer

        init(count: Int) { bytes = .allocate(byteCount: count, alignment: 64) }

        deinit { bytes.deallocate() }
    }

    private struct Shared {
        var free: [Buffer] = []
        /// Buffers in existence: free, being filled, or in flight.
        var allocated = 0
        /// The first error of a file thread; every later write is skipped.
        var failure: IOError?
        /// Called once, when a buffer comes back after `whenSpace` found none.
        var waiting: (@Sendable () -> Void)?
        /// The file is closed and hashed: the SHA-256 as lowercase hex.
        var digest: String?
        /// The upload was dropped: pending writes are skipped, the file removed.
        var discarded = false
    }

    static let maxBuffers = 8
    static let bufferBytes = 256 * 1024

    let path: String
    private let executor: SerialExecutor
    private let shared = LockedValue(Shared())
    private var descriptor: Int32 = -1
    /// Made on the file thread: the first one in the process loads OpenSSL's configuration file.
    private lazy var hasher = SHA256()
    private var current: Buffer?
    private var filled = 0
    private var isFinished = false

    /// A writer for a new file at `path` (created exclusively by the first write), whose work runs on `pool`.
    init(path: String, pool: BlockingPool) {
        self.path = path
        executor = SerialExecutor(pool: pool)
    }

    /// Whether a whole buffer is free or may be made now, so one more read (at most `bufferBytes`) fits whatever the
    /// current buffer holds; if not, `resume` is kept and called once (on a file thread) when one comes back.
    func whenSpace(_ resume: @escaping @Sendable () -> Void) -> Bool {
        shared.withLock { shared -> Bool in
            if shared.allocated < Self.maxBuffers || !shared.free.isEmpty || shared.failure != nil || shared.discarded {
                return true
            }
            shared.waiting = resume
            return false
        }
    }

    /// Buffers in existence now (free, being filled, in flight): at most `maxBuffers` while callers ask `whenSpace`.
    var buffersAllocated: Int { shared.withLock { $0.allocated } }

    /// Free space at the end of the current buffer, so a caller can read into it without a copy and then `commit`
    /// what it put there. Never waits: with every buffer in flight it makes one more (an `append` of bytes that were
    /// already read does; extra buffers are dropped when they come back); callers that can wait ask `whenSpace` first.
    func reserve() -> UnsafeMutableRawBufferPointer {
        if current == nil {
            let free = shared.withLock { shared -> Buffer? in
                if let buffer = shared.free.popLast() { return buffer }
                shared.allocated += 1
                return nil
            }
            current = free ?? Buffer(count: Self.bufferBytes)
            filled = 0
        }
        return UnsafeMutableRawBufferPointer(rebasing: current!.bytes[filled...])
    }

    /// Takes the `count` bytes the caller put at the start of the space `reserve` returned; a full buffer goes to
    /// the file thread. Throws the file thread's error, if it had one.
    func commit(_ count: Int) throws(IOError) {
        if let failure = shared.withLock({ $0.failure }) { throw failure }
        guard let buffer = current else { return }
        precondition(filled + count <= buffer.bytes.count, "committed more than was reserved")
        filled += count
        if filled == buffer.bytes.count { submit() }
    }

    /// Copies `bytes` into buffers and commits them.
    func append(_ bytes: UnsafeRawBufferPointer) throws(IOError) {
        var offset = 0
        while offset < bytes.count {
            let space = reserve()
            let count = min(space.count, bytes.count - offset)
            UnsafeMutableRawBufferPointer(rebasing: space[0..<count])
                .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)]))
            try commit(count)
            offset += count
        }
    }

    /// The body is complete: the rest goes to the file thread, which then closes the file and ends the hash.
    /// `complete` waits for that.
    func finish() {
        guard !isFinished else { return }
        isFinished = true
        submit()
        executor.submit { [self] in
            let failed = shared.withLock { $0.failure != nil || $0.discarded }
            if descriptor < 0 && !failed { openFile() }
            closeFile()
            let digest = hasher.finish()
            shared.withLock { shared in
                shared.digest = digest
                // No more writes come: the buffers go now, not when the handler is done with the body.
                shared.allocated -= shared.free.count
                shared.free.removeAll()
            }
            shared.notifyAll()
        }
    }

    /// Blocks until `finish`'s work is done; the SHA-256 as lowercase hex, or the error that stopped the writes.
    /// Call it from a thread that may block (a handler), never from the loop.
    func complete() throws(IOError) -> String {
        _ = shared.wait { $0.digest != nil || $0.discarded }
        let (digest, failure, discarded) = shared.withLock { ($0.digest, $0.failure, $0.discarded) }
        if let failure { throw failure }
        guard let digest, !discarded else { throw IOError(errnoCode: ECANCELED, reason: "the upload was discarded") }
        return digest
    }

    /// Drops the upload: writes not yet done are skipped, and the file is closed and removed on a file thread
    /// (unlinking a large file can take a while). Idempotent; safe after `finish`.
    func discard() {
        let first = shared.withLock { shared -> Bool in
            defer { shared.discarded = true }
            return !shared.discarded
        }
        guard first else { return }
        shared.notifyAll()
        current = nil
        isFinished = true
        executor.submit { [self] in
            closeFile()
            unlink(path)
        }
    }

    /// Hands the current buffer, if it holds anything, to the file thread.
    private func submit() {
        guard let buffer = current, filled > 0 else { return }
        current = nil
        let count = filled
        executor.submit { [self] in
            write(UnsafeRawBufferPointer(rebasing: buffer.bytes[0..<count]))
            let resume = shared.withLock { shared -> (@Sendable () -> Void)? in
                if shared.allocated > Self.maxBuffers || shared.digest != nil {
                    shared.allocated -= 1 // one made past the bound, or the upload is done: let it go
                } else {
                    shared.free.append(buffer)
                }
                defer { shared.waiting = nil }
                return shared.waiting
            }
            resume?()
        }
    }

    /// On a file thread: writes and hashes one buffer, unless an earlier write failed or the upload was dropped.
    private func write(_ bytes: UnsafeRawBufferPointer) {
        guard shared.withLock({ $0.failure == nil && !$0.discarded }) else { return }
        if descriptor < 0 { openFile() }
        guard descriptor >= 0 else { return }
        do {
            try Posix.writeAll(descriptor, bytes)
            hasher.update(bytes)
        } catch {
            shared.withLock { $0.failure = $0.failure ?? error }
        }
    }

    private func openFile() {
        descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        if descriptor < 0 {
            let error = IOError(errnoCode: errno, reason: "creating the upload file")
            shared.withLock { $0.failure = $0.failure ?? error }
        }
    }

    private func closeFile() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    deinit { closeFile() }
}
