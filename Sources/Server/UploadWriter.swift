import Crypto
import Foundation
import Glibc
import Locks

/// Writes an upload's bytes to its file and hashes them (SHA-256) on the server's file threads, in arrival order,
/// while the event loop goes on reading the socket. The loop never waits for the disk: it reads into one of a few
/// buffers (no copy: see `reserve`), hands full ones over, and when all are in flight it stops reading that
/// connection until one comes back (`whenSpace`), the back-pressure a blocking write would give.
///
/// Memory stays at `maxBuffers × bufferBytes` per upload, plus at most the bytes of one read handed to `append`;
/// and over all uploads, at one buffer each plus the server's `memory` budget: every buffer past an upload's first is
/// taken from it, and when it is spent an upload waits for one of its own to come back (a disk that does not keep up
/// with thousands of uploads held 2 MiB for each of them).
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
        /// The budget its bytes were taken from, given back when it goes; nil for an upload's first buffer (and one
        /// made past a spent budget for bytes already read).
        let budget: BodyMemory?

        init(count: Int, budget: BodyMemory?) {
            bytes = .allocate(byteCount: count, alignment: 64)
            self.budget = budget
        }

        deinit {
            bytes.deallocate()
            budget?.give(bytes.count)
        }
    }

    private struct Shared {
        var free: [Buffer] = []
        /// Buffers in existence: free, being filled, or in flight.
        var allocated = 0
        /// Of those, the ones not taken from the budget; one is kept, the others go when they come back.
        var unbudgeted = 0
        /// The first error of a file thread; every later write is skipped.
        var failure: IOError?
        /// Called once, when a buffer comes back after `whenSpace` found none.
        var waiting: (@Sendable () -> Void)?
        /// The file is closed and hashed: the SHA-256 as lowercase hex ("" when the writer does not hash).
        var digest: String?
        /// The checksum over the bytes this writer wrote, when one was asked for; set with `digest`.
        var checksum: Data?
        /// Appending: the file's size when the writer closed it (what this writer wrote is all it knows of).
        var endSize: Int64?
        /// The bytes this writer wrote were taken back (the file cut to its size before them): a checksum that did
        /// not match, a chunk past the limit, or `finish(discardingChunk:)`.
        var chunkDiscarded = false
        /// The upload was dropped: pending writes are skipped, the file removed.
        var discarded = false
    }

    static let maxBuffers = 8
    static let bufferBytes = 256 * 1024

    /// How the file is opened, on a file thread, at the first write (or at `finish`).
    enum Opening: Sendable {
        /// A new file, created exclusively.
        case create
        /// An existing file, appended to: the closure opens it and returns the descriptor and the size the file may
        /// reach (it may lock it and check its size), or throws what keeps the writer from using it. A write past
        /// the limit fails with EFBIG and the chunk is taken back.
        case append(@Sendable (String) throws(IOError) -> (descriptor: Int32, limit: Int64?))
    }

    /// What the written bytes are hashed into.
    enum Hashing {
        /// A new SHA-256, finished with the file: `complete` returns it.
        case fresh
        /// A SHA-256 of the bytes before these, continued and not finished (`handBack` is given it), so the
        /// next writer of the file can go on with it.
        case continuing(Digest)
        /// A continued SHA-256 too, asked for once the file is open (its lock held and its size checked): kept
        /// aside by the writer before (`handBack`), which may let the file go only just now.
        case resuming(@Sendable () -> Digest?)
        case none
    }

    let path: String
    private let executor: SerialExecutor
    /// Where buffers past the first come from; nil: up to `maxBuffers` each, unbudgeted.
    private let memory: BodyMemory?
    private let shared = LockedValue(Shared())
    private var descriptor: Int32 = -1
    private let opening: Opening
    private let finishesHash: Bool
    /// Made on the file thread when fresh: the first one in the process loads OpenSSL's configuration file.
    private var hasher: Digest?
    /// Appending: the hash as it was before this writer's bytes, handed back if they are taken back.
    private var hasherAtStart: Digest?
    private var needsHasher: Bool
    private var checksum: Digest?
    /// The checksum the bytes must have (a tus chunk's `Upload-Checksum`); otherwise they are taken back.
    private let expectedChecksum: Data?
    /// Appending: the file's size before this writer's bytes, and the size it may reach (file thread only).
    private var startSize: Int64 = 0
    private var written: Int64 = 0
    private var limit: Int64?
    private var current: Buffer?
    private var filled = 0
    private var isFinished = false
    /// Run on the file thread once an appended chunk is settled (kept, or taken back), before the file is closed.
    private let settled: (@Sendable () -> Void)?
    /// Given the continued SHA-256 and the size it covers when the writer ends with its bytes kept, whether the
    /// request was whole or cut short (on the file thread, the hash then no longer this writer's).
    private let handBack: (@Sendable (Digest, Int64) -> Void)?
    /// With `.resuming`: where the hash so far comes from, once the file is open.
    private let resumedHash: (@Sendable () -> Digest?)?

    /// A writer for the file at `path` (by default a new one, created exclusively by the first write), whose work
    /// runs on `pool`; `checksum` is a digest of the bytes written here alone (a tus chunk's).
    init(path: String, pool: BlockingPool, memory: BodyMemory? = nil, opening: Opening = .create, hashing: Hashing = .fresh,
         checksum: (digest: Digest, expected: Data)? = nil, settled: (@Sendable () -> Void)? = nil,
         handBack: (@Sendable (Digest, Int64) -> Void)? = nil) {
        self.path = path
        self.memory = memory
        self.settled = settled
        self.handBack = handBack
        if case .resuming(let take) = hashing { resumedHash = take } else { resumedHash = nil }
        executor = SerialExecutor(pool: pool)
        self.opening = opening
        self.checksum = checksum?.digest
        expectedChecksum = checksum?.expected
        switch hashing {
        case .fresh:
            needsHasher = true
            finishesHash = true
        case .continuing(let digest):
            hasher = digest
            needsHasher = false
            finishesHash = false
        case .resuming:
            needsHasher = false
            finishesHash = false
        case .none:
            needsHasher = false
            finishesHash = false
        }
    }

    /// Opens the file now (on a file thread) rather than at the first full buffer: for a file appended to, the
    /// checks and the lock come before the body, whatever its size.
    func openEarly() {
        executor.submit { [self] in
            guard descriptor < 0, shared.withLock({ $0.failure == nil && !$0.discarded }) else { return }
            openFile()
        }
    }

    /// Whether a whole buffer is free or may be made now, so one more read (at most `bufferBytes`) fits whatever the
    /// current buffer holds; if not, `resume` is kept and called once (on a file thread) when one comes back.
    /// With none in flight it is always yes: the next read fills the current buffer (or makes the first), which
    /// then goes to the file thread, and nothing else would ever call `resume`.
    func whenSpace(_ resume: @escaping @Sendable () -> Void) -> Bool {
        let holding = current == nil ? 0 : 1
        return shared.withLock { shared -> Bool in
            let inFlight = shared.allocated - shared.free.count - holding
            if !shared.free.isEmpty || shared.failure != nil || shared.discarded || inFlight == 0 {
                return true
            }
            if shared.allocated < Self.maxBuffers && (memory.map { $0.inUse + Self.bufferBytes <= $0.limit } ?? true) {
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
            let memory = memory
            current = shared.withLock { shared -> Buffer in
                if let buffer = shared.free.popLast() { return buffer }
                shared.allocated += 1
                if shared.unbudgeted > 0, let memory, memory.take(Self.bufferBytes) {
                    return Buffer(count: Self.bufferBytes, budget: memory)
                }
                shared.unbudgeted += 1
                return Buffer(count: Self.bufferBytes, budget: nil)
            }
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
    /// `complete` waits for that. When appending, `discardingChunk` takes this writer's bytes back (a chunk whose
    /// checksum can no longer be checked: its request was cut short), as does a checksum that does not match.
    func finish(discardingChunk: Bool = false) {
        guard !isFinished else { return }
        isFinished = true
        submit()
        executor.submit { [self] in
            let failure = shared.withLock { $0.discarded ? IOError(errnoCode: ECANCELED, reason: "discarded") : $0.failure }
            if descriptor < 0 && failure == nil { openFile() }
            let sum = checksum?.finishBytes()
            var takeBack = discardingChunk || failure?.errnoCode == EFBIG
            if let expectedChecksum, let sum, sum != expectedChecksum { takeBack = true }
            var settles = descriptor >= 0
            if case .append = opening, takeBack, descriptor >= 0 {
                if ftruncate(descriptor, off_t(startSize)) != 0 {
                    let error = IOError(errnoCode: errno, reason: "taking a chunk back")
                    shared.withLock { $0.failure = $0.failure ?? error }
                    settles = false // still to be taken back, by whoever holds the file next
                    hasherAtStart = nil
                }
            } else {
                takeBack = false
            }
            if settles { settled?() }
            let opened = descriptor >= 0
            let end: Int64? = if case .append = opening, opened { takeBack ? startSize : startSize + written } else { nil }
            // Before the file (and its lock) is let go: the next PATCH, which takes the hash once it holds the lock's
            // turn, finds it. Bytes taken back (a checksum that did not match, a chunk past the length, one cut
            // short that had a checksum) leave the hash as it was before them: dropped, the final PATCH read the
            // whole file again to hash it (20 GiB inside one request).
            if let handBack, !finishesHash, let end {
                if !takeBack, failure == nil, let hasher {
                    handBack(hasher, end)
                    self.hasher = nil
                } else if takeBack, let hasherAtStart {
                    handBack(hasherAtStart, end)
                }
            }
            hasherAtStart = nil
            closeFile()
            let digest = finishesHash ? (hasher ?? Digest()).finish() : ""
            shared.withLock { shared in
                shared.digest = digest
                shared.checksum = sum
                shared.chunkDiscarded = takeBack
                shared.endSize = end
                // No more writes come: the buffers go now, not when the handler is done with the body.
                shared.allocated -= shared.free.count
                shared.unbudgeted -= shared.free.count { $0.budget == nil }
                shared.free.removeAll()
            }
            shared.notifyAll()
        }
    }

    /// After `complete`: the checksum asked for at `init`, over the bytes this writer wrote.
    var checksumValue: Data? { shared.withLock { $0.checksum } }

    /// After `complete`: whether this writer's bytes were taken back (see `Shared.chunkDiscarded`).
    var chunkDiscarded: Bool { shared.withLock { $0.chunkDiscarded } }

    /// After `complete`, when appending: the file's size as this writer left it, under its lock.
    var endSize: Int64? { shared.withLock { $0.endSize } }

    /// Blocks until `finish`'s work is done; the SHA-256 as lowercase hex, or the error that stopped the writes.
    /// Call it from a thread that may block (a handler), never from the loop.
    func complete() throws(IOError) -> String {
        _ = shared.wait { $0.digest != nil || $0.discarded }
        let (digest, failure, discarded) = shared.withLock { ($0.digest, $0.failure, $0.discarded) }
        if let failure { throw failure }
        guard let digest, !discarded else { throw IOError(errnoCode: ECANCELED, reason: "the upload was discarded") }
        return digest
    }

    /// Drops the upload: writes not yet done are skipped, and the file is closed and (when this writer created it)
    /// removed on a file thread (unlinking a large file can take a while). Idempotent; safe after `finish`.
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
            // A file this writer appends to is not its own: what was written stays.
            if case .create = opening { unlink(path) }
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
                // A budgeted one stays only for a read waiting for it: kept on the free list, an upload whose
                // client then slowed held the budget for hours while other uploads made do with one buffer.
                if shared.allocated > Self.maxBuffers || shared.digest != nil
                    || (memory != nil && buffer.budget == nil && shared.unbudgeted > 1)
                    || (buffer.budget != nil && shared.waiting == nil) {
                    // One made past the bound or the budget, a budgeted one no read waits for, or the upload is
                    // done: let it go.
                    shared.allocated -= 1
                    if buffer.budget == nil { shared.unbudgeted -= 1 }
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
        do throws(IOError) {
            if let limit, startSize + written + Int64(bytes.count) > limit {
                throw IOError(errnoCode: EFBIG, reason: "the chunk goes past the upload's length")
            }
            try Posix.writeAll(descriptor, bytes)
            written += Int64(bytes.count)
            if needsHasher {
                hasher = Digest()
                needsHasher = false
            }
            hasher?.update(bytes)
            checksum?.update(bytes)
        } catch {
            shared.withLock { $0.failure = $0.failure ?? error }
        }
    }

    private func openFile() {
        switch opening {
        case .create:
            descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
            if descriptor < 0 {
                let error = IOError(errnoCode: errno, reason: "creating the upload file")
                shared.withLock { $0.failure = $0.failure ?? error }
            }
        case .append(let open):
            do {
                (descriptor, limit) = try open(path)
                startSize = Int64(lseek(descriptor, 0, SEEK_END))
                if let resumedHash { hasher = resumedHash() }
                hasherAtStart = handBack == nil ? nil : hasher?.copy()
            } catch {
                descriptor = -1
                shared.withLock { $0.failure = $0.failure ?? error }
            }
        }
    }

    private func closeFile() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    deinit { closeFile() }
}
