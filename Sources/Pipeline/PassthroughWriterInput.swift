import CFFmpeg

/// A writer input that stores compressed packets as they are (stream copy), like `AVAssetWriterInput` with
/// nil output settings.
final class PassthroughWriterInput {
    private let container: OutputContainer
    let stream: Int
    private let sourceTimeBase: AVRational
    private let timeline: Timeline
    /// Whether the packets are ADTS-framed AAC (from MPEG-TS, or raw AAC).
    private let isAAC: Bool
    /// The sample-rate index and channel configuration of the first ADTS header (AAC from MPEG-TS or raw AAC).
    private var adtsFormat: (rate: UInt8, channels: UInt8)?

    init(copying source: UnsafeMutablePointer<AVStream>, container: OutputContainer, timeline: Timeline) throws(MediaError) {
        self.container = container
        self.timeline = timeline
        sourceTimeBase = source.pointee.time_base
        // ADTS (no AudioSpecificConfig in the stream's parameters): each frame has its own header.
        isAAC = source.pointee.codecpar.pointee.codec_id == AV_CODEC_ID_AAC && source.pointee.codecpar.pointee.extradata_size == 0
        stream = try container.addStream(copying: source)
    }

    /// Writes a source packet, its timestamps moved onto the output timeline.
    func append(_ packet: Packet) throws(MediaError) {
        let value = packet.pointer
        if value.pointee.pts != FFmpeg.noPTS {
            value.pointee.pts = timeline.convert(value.pointee.pts, from: sourceTimeBase, to: sourceTimeBase)
        }
        if value.pointee.dts != FFmpeg.noPTS {
            value.pointee.dts = timeline.convert(value.pointee.dts, from: sourceTimeBase, to: sourceTimeBase)
        }
        value.pointee.pos = -1
        if isAAC, let format = Self.adts(value.pointee) {
            // One rate and one channel count for the whole track in the output: AAC that changes either part-way
            // (a broadcast switching from 48 to 44.1 kHz, or from stereo to 5.1) was copied with the first, and
            // played at the wrong speed or not at all while the job succeeded.
            if let first = adtsFormat, first != format {
                // On the output's timeline (converted above), as the user sees it.
                let time = value.pointee.pts != FFmpeg.noPTS ? value.pointee.pts : value.pointee.dts
                let at = time == FFmpeg.noPTS ? "" : String(format: " at %.2f s", FFmpeg.seconds(time, sourceTimeBase))
                throw MediaError(code: "copy_not_supported",
                                 message: "audio: the input's AAC changes its sample rate or channels part-way\(at), which a copy cannot carry; encode the audio instead (leave out \"copy\").")
            }
            adtsFormat = format
        }
        try container.write(packet, stream: stream, timeBase: sourceTimeBase)
    }

    /// The sample-rate index and channel configuration of the ADTS header the packet starts with, if it does.
    private static func adts(_ packet: AVPacket) -> (rate: UInt8, channels: UInt8)? {
        guard packet.size >= 7, let data = packet.data, data[0] == 0xFF, data[1] & 0xF6 == 0xF0 else { return nil }
        return ((data[2] >> 2) & 0x0F, (data[2] & 0x01) << 2 | data[3] >> 6)
    }
}
