import CFFmpeg

/// A writer input that stores compressed packets as they are (stream copy), like `AVAssetWriterInput` with
/// nil output settings.
final class PassthroughWriterInput {
    private let container: OutputContainer
    let stream: Int
    private let sourceTimeBase: AVRational
    private let timeline: Timeline

    init(copying source: UnsafeMutablePointer<AVStream>, container: OutputContainer, timeline: Timeline) throws(MediaError) {
        self.container = container
        self.timeline = timeline
        sourceTimeBase = source.pointee.time_base
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
        try container.write(packet, stream: stream, timeBase: sourceTimeBase)
    }
}
