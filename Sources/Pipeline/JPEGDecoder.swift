import CFFmpeg
import Foundation

/// Owns an MJPEG decoder `AVCodecContext`: reads back the JPEG files `JPEGEncoder` wrote (no demuxer: the file's
/// bytes are the one packet), for a resumed storyboard's tiles.
final class JPEGDecoder {
    private var context: UnsafeMutablePointer<AVCodecContext>?
    private let packet = Packet()

    init() throws(MediaError) {
        guard let codec = avcodec_find_decoder(AV_CODEC_ID_MJPEG) else {
            throw MediaError(code: "decoder_unavailable", message: "The JPEG decoder is not available in this FFmpeg build.")
        }
        context = avcodec_alloc_context3(codec)
        guard let context else { throw MediaError(code: "out_of_memory", message: "Allocating the JPEG decoder failed.") }
        try FFmpeg.check(avcodec_open2(context, codec, nil), "Opening the JPEG decoder", code: "decoder_failed")
    }

    /// The picture in the JPEG file at `path`.
    func decode(path: String) throws(MediaError) -> Frame {
        guard let data = FileManager.default.contents(atPath: path), !data.isEmpty, data.count < Int32.max else {
            throw MediaError(code: "input_failed", message: "Reading the picture \(path) failed.")
        }
        packet.unref()
        try FFmpeg.check(av_new_packet(packet.pointer, Int32(data.count)), "Reading a JPEG picture", code: "out_of_memory")
        data.withUnsafeBytes { bytes in
            packet.pointer.pointee.data.update(from: bytes.bindMemory(to: UInt8.self).baseAddress!, count: data.count)
        }
        try FFmpeg.check(avcodec_send_packet(context, packet.pointer), "Decoding the picture \(path)", code: "decode_failed")
        let frame = Frame()
        try FFmpeg.check(avcodec_receive_frame(context, frame.pointer), "Decoding the picture \(path)", code: "decode_failed")
        return frame
    }

    deinit { avcodec_free_context(&context) }
}
