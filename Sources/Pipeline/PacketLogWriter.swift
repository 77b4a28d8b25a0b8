import CFFmpeg
import Glibc

/// Writes compressed packets into a checkpoint file, in order, with their timestamps: an 8-byte signature, then per
/// packet pts, dts, duration (Int64), flags and size (Int32), little-endian, and the bytes. The SHA-256 of the file
/// is computed on the way; `finish()` flushes the file to disk before the caller records it anywhere.
///
/// The file is written under `<path>.tmp` and renamed into place by `finish()`: a name without `.tmp` is always
/// whole. Used by one thread at a time.
final class PacketLogWriter {
    static let signature: [UInt8] = Array("TCPKTLG1".utf8)
    static let recordHeaderSize = 32

    let path: String
    private var file: UnsafeMutablePointer<FILE>?
    private let hasher = SHA256Hasher()
    private(set) var bytes = 0
    private(set) var packets = 0

    init(path: String) throws(MediaError) {
        self.path = path
        guard let file = fopen(path + ".tmp", "wbe") else {
            throw MediaError(code: "output_failed", message: "Creating the checkpoint file \(path).tmp failed: \(String(cString: strerror(errno))).")
        }
        self.file = file
        try put(Self.signature)
    }

    /// Appends one packet whose timestamps are in the stream's time base.
    func append(_ packet: Packet) throws(MediaError) {
        let value = packet.pointer.pointee
        var header = [UInt8]()
        header.reserveCapacity(Self.recordHeaderSize)
        for field in [value.pts, value.dts, value.duration] { withUnsafeBytes(of: field.littleEndian) { header.append(contentsOf: $0) } }
        for field in [value.flags, value.size] { withUnsafeBytes(of: field.littleEndian) { header.append(contentsOf: $0) } }
        try put(header)
        if value.size > 0, let data = value.data {
            try put(UnsafeRawBufferPointer(start: data, count: Int(value.size)))
        }
        packets += 1
    }

    /// Flushes the file to disk, renames it into place and returns its SHA-256 (hex).
    func finish() throws(MediaError) -> String {
        let (descriptor, digest) = try close()
        if let failure = Self.commit(descriptor: descriptor, path: path) { throw failure }
        return digest
    }

    /// Ends the writing: the buffered bytes go to the file, which stays open as the returned descriptor for
    /// `commit` (on another thread, if the caller likes). Returns the descriptor and the SHA-256 (hex).
    func close() throws(MediaError) -> (descriptor: Int32, digest: String) {
        guard let file else { throw MediaError(code: "output_failed", message: "The checkpoint file \(path) was already closed.") }
        self.file = nil
        let descriptor = fflush(file) == 0 ? dup(fileno(file)) : -1
        let failure = errno
        fclose(file)
        guard descriptor >= 0 else {
            unlink(path + ".tmp")
            throw MediaError(code: failure == ENOSPC ? "no_space" : "output_failed",
                             message: "Writing the checkpoint file \(path) failed: \(String(cString: strerror(failure))).")
        }
        return (descriptor, hasher.finish())
    }

    /// Flushes a closed file to disk (closing `descriptor`) and renames it from `<path>.tmp` into place; the failure,
    /// if any.
    static func commit(descriptor: Int32, path: String) -> MediaError? {
        var synced = fsync(descriptor) == 0
        while !synced && errno == EINTR { synced = fsync(descriptor) == 0 }
        let failure = errno
        Glibc.close(descriptor)
        guard synced else {
            return MediaError(code: failure == ENOSPC ? "no_space" : "storage_error",
                              message: "Flushing the checkpoint file \(path) failed: \(String(cString: strerror(failure))).")
        }
        guard rename(path + ".tmp", path) == 0 else {
            return MediaError(code: "storage_error", message: "Moving the checkpoint file \(path) into place failed: \(String(cString: strerror(errno))).")
        }
        return nil
    }

    /// Closes and removes an unfinished file.
    func discard() {
        guard let file else { return }
        self.file = nil
        fclose(file)
        unlink(path + ".tmp")
    }

    private func put(_ values: [UInt8]) throws(MediaError) {
        let failure: MediaError? = values.withUnsafeBytes { buffer in
            do throws(MediaError) { try put(buffer) } catch { return error }
            return nil
        }
        if let failure { throw failure }
    }

    private func put(_ buffer: UnsafeRawBufferPointer) throws(MediaError) {
        guard buffer.count > 0 else { return }
        hasher.update(buffer)
        guard fwrite(buffer.baseAddress, 1, buffer.count, file) == buffer.count else {
            let code = errno == ENOSPC ? "no_space" : "output_failed"
            throw MediaError(code: code, message: "Writing the checkpoint file \(path) failed: \(String(cString: strerror(errno))).")
        }
        bytes += buffer.count
    }

    deinit { discard() }
}
