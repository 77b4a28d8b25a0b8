import CFFmpeg

/// Takes the encoded audio into one checkpoint file, recorded in the manifest once the audio is complete. The audio
/// is encoded whole by a pass of its own (cheap next to the video), so a resumed job has no seam in it: no restarted
/// AAC encoder, no priming samples in the middle.
final class CheckpointAudioSink: PacketSink {
    static let fileName = "audio.pkt"

    private let checkpoint: Checkpoint
    private let parameters: StreamParameters
    private let writer: PacketLogWriter

    init(checkpoint: Checkpoint, parameters: StreamParameters) throws(MediaError) {
        self.checkpoint = checkpoint
        self.parameters = parameters
        writer = try PacketLogWriter(path: checkpoint.file(Self.fileName))
    }

    func write(_ packet: Packet, timeBase: AVRational) throws(MediaError) {
        try writer.append(packet)
    }

    /// Flushes the file and records it.
    func finish() throws(MediaError) {
        let digest = try writer.finish()
        let file = CheckpointManifest.File(name: Self.fileName, bytes: writer.bytes, sha256: digest, packets: writer.packets)
        let parameters = parameters
        try checkpoint.update { manifest in
            manifest.audio = parameters
            manifest.audioFile = file
        }
    }

    func discard() { writer.discard() }
}
