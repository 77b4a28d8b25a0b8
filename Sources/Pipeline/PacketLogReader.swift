import CFFmpeg
import Glibc

/// Reads back the packets a `PacketLogWriter` wrote, in order. A file that does not follow the format (a damaged or
/// cut checkpoint) fails with `checkpoint_damaged`; callers verify the checksum before they trust a file anyway.
final class PacketLogReader {
    let path: String
    private var file: UnsafeMutablePointer<FILE>?

    init(path: String) throws(MediaError) {
        self.path = path
        guard let file = fopen(path, "rbe") else {
            throw MediaError(code: "checkpoint_damaged", message: "Opening the checkpoint file \(path) failed: \(String(cString: strerror(errno))).")
        }
        self.file = file
        var signature = [UInt8](repeating: 0, count: PacketLogWriter.signature.count)
        guard fread(&signature, 1, signature.count, file) == signature.count, signature == PacketLogWriter.signature else {
            throw damaged("it does not start with the checkpoint signature")
        }
    }

    /// Reads the next packet into `packet`; false at the end of the file.
    func next(into packet: Packet) throws(MediaError) -> Bool {
        packet.unref()
        var header = [UInt8](repeating: 0, count: PacketLogWriter.recordHeaderSize)
        let count = fread(&header, 1, header.count, file)
        if count == 0 && feof(file) != 0 { return false }
        guard count == header.count else { throw damaged("a packet header is cut short") }
        func field<T: FixedWidthInteger>(_ offset: Int, _ type: T.Type) -> T {
            header.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
        }
        let size = field(28, Int32.self)
        guard size >= 0, size < 1 << 30 else { throw damaged("a packet size is out of range") }
        try FFmpeg.check(av_new_packet(packet.pointer, size), "Reading the checkpoint file \(path)")
        if size > 0 {
            guard fread(packet.pointer.pointee.data, 1, Int(size), file) == Int(size) else { throw damaged("a packet is cut short") }
        }
        packet.pointer.pointee.pts = field(0, Int64.self)
        packet.pointer.pointee.dts = field(8, Int64.self)
        packet.pointer.pointee.duration = field(16, Int64.self)
        packet.pointer.pointee.flags = field(24, Int32.self)
        return true
    }

    private func damaged(_ what: String) -> MediaError {
        MediaError(code: "checkpoint_damaged", message: "The checkpoint file \(path) is damaged: \(what).")
    }

    deinit { if let file { fclose(file) } }
}
