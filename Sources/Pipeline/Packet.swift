import CFFmpeg

/// Owns one `AVPacket`: compressed data with its timestamps.
public final class Packet {
    let pointer: UnsafeMutablePointer<AVPacket>

    init() {
        guard let packet = av_packet_alloc() else { fatalError("av_packet_alloc: out of memory") }
        pointer = packet
    }

    /// Index of the stream the packet belongs to, in its container.
    public var streamIndex: Int { Int(pointer.pointee.stream_index) }

    /// Whether the packet starts at a key frame.
    public var isKeyFrame: Bool { pointer.pointee.flags & AV_PKT_FLAG_KEY != 0 }

    func unref() { av_packet_unref(pointer) }

    deinit {
        var packet: UnsafeMutablePointer<AVPacket>? = pointer
        av_packet_free(&packet)
    }
}
