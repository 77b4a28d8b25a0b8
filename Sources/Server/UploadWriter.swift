import Dispatch
import Glibc
import Locks

/// Writes an upload's bytes to its file on the caller's thread and hashes them (SHA-256) on a serial queue of its own.
///
/// Why: on a 1 GiB upload the hash was nearly half of the event loop's time, serial with reading the socket and
/// writing the file. The loop now reads into one of a few buffers (no copy: see `reserve`), writes it to the page
/// cache as nginx would, and hands the buffer to the hash queue, which returns it when done. Buffers are allocated
/// only when the hash falls behind, up to `maxBuffers`; past that the loop waits for one, the back-pressure hashing
/// on the loop gave. Memory stays at most `maxBuffers × bufferBytes` per upload.
///
/// No early writeback (`sync_file_range`): it sent every byte to the disk while the upload was still arriving, even
/// for uploads then refused and deleted, and with the disk busy it halved upload throughput. The fsync before an
/// upload is acknowledged writes what the kernel has not flushed by then.
final class UploadWriter: @unchecked Sendable {
    // Safe to share with the queue: `hasher` is only touched on `queue`, and by `finish` after draining it; `current`,
    // `filled`, `allocated` and the descriptor's writes belong to the caller's thread; `free` is behind its
    // lock. A `Buffer` belongs to one side at a time: the caller fills it, the queue owns it until it is back on `free`.
    private final class Buffer: @unchecked Sendable {
        let bytes: UnsafeMutableRawBufferPointer

        init(count: Int) { bytes = .allocate(byteCount: count, alignment: 64) }

        deinit { bytes.deallocate() }
    }

    static let maxBuffers = 8
    static let bufferBytes = 256 * 1024

    private let descriptor: Int32
    private let queue = DispatchQueue(label: "transcoderd.upload-hash")
    private let hasher = SHA256()
    private let free = LockedValue<[Buffer]>([])
    /// Signalled each time the queue puts a buffer back. It starts at zero: libdispatch refuses to free a semaphore
    /// whose count is below its initial value.
    private let returned = DispatchSemaphore(value: 0)
    private var allocated = 0
    private var current: Buffer?
    private var filled = 0
    private var isClosed = false

    /// Takes ownership of `descriptor`, an open file positioned at its start.
    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Writes `bytes` and queues them for hashing.
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

    /// Free space at the end of the current buffer, so a caller can read into it without a copy and then `commit`
    /// what it put there.
    func reserve() -> UnsafeMutableRawBufferPointer {
        while current == nil {
            if let buffer = free.withLock({ $0.popLast() }) {
                current = buffer
            } else if allocated < Self.maxBuffers {
                allocated += 1
                current = Buffer(count: Self.bufferBytes)
            } else {
                returned.wait()
            }
            filled = 0
        }
        return UnsafeMutableRawBufferPointer(rebasing: current!.bytes[filled...])
    }

    /// Writes the `count` bytes the caller put at the start of the space `reserve` returned, then queues them for
    /// hashing once their buffer is full.
    func commit(_ count: Int) throws(IOError) {
        guard let buffer = current else { return }
        precondition(filled + count <= buffer.bytes.count, "committed more than was reserved")
        try Posix.writeAll(descriptor, UnsafeRawBufferPointer(rebasing: buffer.bytes[filled..<(filled + count)]))
        filled += count
        if filled == buffer.bytes.count { submit() }
    }

    /// Waits for the hash to catch up, closes the file, and returns the SHA-256 as lowercase hex.
    func finish() -> String {
        submit()
        queue.sync {}
        close()
        return hasher.finish()
    }

    /// Closes the file without finishing the hash (idempotent). The caller removes the file.
    func discard() {
        current = nil
        close()
    }

    private func close() {
        guard !isClosed else { return }
        isClosed = true
        Glibc.close(descriptor)
    }

    /// Hands the current buffer, if it holds anything, to the hash queue.
    private func submit() {
        guard let buffer = current, filled > 0 else { return }
        current = nil
        let count = filled
        queue.async { [self] in
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer.bytes[0..<count]))
            free.withLock { $0.append(buffer) }
            returned.signal()
        }
    }

    deinit { close() }
}
