import CFFmpeg

/// Owns a libavutil SHA-256 context: the checksum of a checkpoint file, computed as its bytes are written or read
/// (Pipeline takes its hashing from FFmpeg, the C library it already owns).
final class SHA256Hasher {
    private var context: OpaquePointer?

    init() {
        guard av_hash_alloc(&context, "SHA256") >= 0, context != nil else { fatalError("av_hash_alloc: out of memory") }
        av_hash_init(context)
    }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        av_hash_update(context, base.assumingMemoryBound(to: UInt8.self), bytes.count)
    }

    /// The digest in lowercase hex; the context is spent.
    func finish() -> String {
        var text = [UInt8](repeating: 0, count: 65)
        text.withUnsafeMutableBufferPointer { buffer in av_hash_final_hex(context, buffer.baseAddress!, 65) }
        return String(decoding: text.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// SHA-256 of a whole file, or nil when it cannot be read.
    static func file(atPath path: String) -> String? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        let hasher = SHA256Hasher()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = buffer.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
            if count > 0 { buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<count])) } }
            if count < buffer.count { break }
        }
        guard ferror(file) == 0 else { return nil }
        return hasher.finish()
    }

    deinit { av_hash_freep(&context) }
}
