import CFFmpeg
import Foundation

/// Owns an MJPEG `AVCodecContext` for pictures of one size: each frame becomes one JPEG file (baseline, 4:2:0,
/// full-range BT.601 as JFIF wants it).
final class JPEGEncoder {
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let packet = Packet()
    private var count: Int64 = 0
    let width: Int
    let height: Int

    /// JPEG quantiser scale: 2 (best) to 31; 3 keeps text and edges sharp at a small size.
    static let quality: Int32 = 3

    init(width: Int, height: Int) throws(MediaError) {
        self.width = width
        self.height = height
        guard let codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG) else {
            throw MediaError(code: "encoder_unavailable", message: "The JPEG encoder is not available in this FFmpeg build.")
        }
        context = avcodec_alloc_context3(codec)
        guard let context else { throw MediaError(code: "out_of_memory", message: "Allocating the JPEG encoder failed.") }
        context.pointee.width = Int32(width)
        context.pointee.height = Int32(height)
        context.pointee.pix_fmt = AV_PIX_FMT_YUVJ420P
        context.pointee.color_range = AVCOL_RANGE_JPEG
        context.pointee.time_base = AVRational(num: 1, den: 25)
        context.pointee.flags |= tc_codec_flag_qscale()
        context.pointee.global_quality = Self.quality * tc_qp2lambda()
        try FFmpeg.check(avcodec_open2(context, codec, nil), "Opening the JPEG encoder", code: "encoder_failed")
    }

    /// Encodes `frame` (full-range 4:2:0 at this encoder's size) into a JPEG file at `path`.
    func write(_ frame: Frame, to path: String) throws(MediaError) {
        let format = frame.pointer.pointee.format
        // The same planes; the J format says they are full range, as the converter made them.
        frame.pointer.pointee.format = AV_PIX_FMT_YUVJ420P.rawValue
        defer { frame.pointer.pointee.format = format }
        frame.pointer.pointee.quality = Self.quality * tc_qp2lambda()
        frame.pointer.pointee.pts = count
        count += 1
        try FFmpeg.check(avcodec_send_frame(context, frame.pointer), "Encoding a JPEG picture", code: "encode_failed")
        packet.unref()
        try FFmpeg.check(avcodec_receive_packet(context, packet.pointer), "Encoding a JPEG picture", code: "encode_failed")
        let data = Data(bytes: packet.pointer.pointee.data, count: Int(packet.pointer.pointee.size))
        guard FileManager.default.createFile(atPath: path, contents: data) else {
            throw MediaError(code: "output_failed", message: "Writing the picture \(path) failed.")
        }
    }

    /// Whether the file at `path` is a whole JPEG as far as its ends tell: it starts with a start-of-image marker
    /// and ends with an end-of-image one (a file cut short or left empty by a crash does not).
    static func isWhole(atPath path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        guard let head = try? handle.read(upToCount: 2), head == Data([0xFF, 0xD8]),
              let end = try? handle.seekToEnd(), end >= 4 else { return false }
        try? handle.seek(toOffset: end - 2)
        return (try? handle.read(upToCount: 2)) == Data([0xFF, 0xD9])
    }

    deinit { avcodec_free_context(&context) }
}
