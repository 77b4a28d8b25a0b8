import CFFmpeg

/// A writer input that encodes frames (like `AVAssetWriterInput` with output settings) and hands the packets to
/// the container.
final class EncodingWriterInput {
    let encoder: StreamEncoder
    private let container: OutputContainer
    let stream: Int
    private let packet = Packet()
    private(set) var isFinished = false
    /// Frames handed to the encoder.
    private(set) var framesAppended = 0

    init(encoder: StreamEncoder, container: OutputContainer) throws(MediaError) {
        self.encoder = encoder
        self.container = container
        stream = try container.addStream(encoder: encoder)
    }

    /// Encodes one frame whose `pts` is in the encoder's time base, on the output timeline.
    func append(_ frame: Frame) throws(MediaError) {
        precondition(!isFinished, "append after markAsFinished")
        // When the encoder is full, take its packets and send the same frame again.
        while try !encoder.send(frame) {
            try writePendingPackets()
        }
        framesAppended += 1
        try writePendingPackets()
    }

    /// Flushes the encoder: every frame it still holds is encoded and written.
    func markAsFinished() throws(MediaError) {
        guard !isFinished else { return }
        isFinished = true
        try encoder.sendEndOfStream()
        try writePendingPackets()
    }

    private func writePendingPackets() throws(MediaError) {
        while try encoder.receive(into: packet) {
            try container.write(packet, stream: stream, timeBase: encoder.timeBase)
        }
    }
}
