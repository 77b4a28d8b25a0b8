import CFFmpeg
import Locks

/// A writer input that encodes frames (like `AVAssetWriterInput` with output settings) and hands the packets to its
/// sink. Used by one thread at a time; `progress` may be read from any.
final class EncodingWriterInput {
    /// What an input has done so far, readable from other threads (the session reports it while encode threads run).
    final class Progress: Sendable {
        private let state = LockedValue((frames: 0, seconds: 0.0))

        /// Frames (packets) out of the encoder and written: with `seconds`, where the output really is.
        var frames: Int { state.withLock { $0.frames } }
        /// End of the latest packet written, in seconds on the output timeline.
        var seconds: Double { state.withLock { $0.seconds } }

        fileprivate func wrote(until seconds: Double?) {
            state.withLock { state in
                state.frames += 1
                if let seconds { state.seconds = max(state.seconds, seconds) }
            }
        }
    }

    let encoder: StreamEncoder
    private let sink: PacketSink
    private let packet = Packet()
    private(set) var isFinished = false
    let progress = Progress()

    init(encoder: StreamEncoder, sink: PacketSink) {
        self.encoder = encoder
        self.sink = sink
    }

    /// Frames encoded and written (packets, for audio).
    var framesEncoded: Int { progress.frames }

    /// Encodes one frame whose `pts` is in the encoder's time base, on the output timeline.
    func append(_ frame: Frame) throws(MediaError) {
        precondition(!isFinished, "append after markAsFinished")
        // When the encoder is full, take its packets and send the same frame again.
        while try !encoder.send(frame) {
            try writePendingPackets()
        }
        try writePendingPackets()
    }

    /// Flushes the encoder: every frame it still holds is encoded and written.
    func markAsFinished() throws(MediaError) {
        guard !isFinished else { return }
        isFinished = true
        try encoder.sendEndOfStream()
        try writePendingPackets()
        encoder.release()
    }

    private func writePendingPackets() throws(MediaError) {
        while try encoder.receive(into: packet) {
            let value = packet.pointer.pointee
            let end = value.pts == FFmpeg.noPTS ? nil : FFmpeg.seconds(value.pts + max(value.duration, 0), encoder.timeBase)
            try sink.write(packet, timeBase: encoder.timeBase)
            progress.wrote(until: end)
        }
    }
}
