import CFFmpeg
import Foundation

/// Takes an encoder's video packets into checkpoint segments: a key frame in a later cell of the segment grid ends
/// the segment being written, which is then flushed to disk and recorded in the manifest before the next begins.
/// The encoder puts an IDR at each grid instant (closed GOPs), so each segment decodes on its own. Runs on the
/// video's encode thread.
final class CheckpointVideoSink: PacketSink {
    private let checkpoint: Checkpoint
    private let segmentSeconds: Double
    private var nextNumber: Int
    private var current: (number: Int, cell: Int, writer: PacketLogWriter, start: Double, end: Double, last: Int64)?
    /// Packets presented up to here (video time base) are the warm-up of a resumed encoder: the checkpoint has them.
    var skipThrough: Int64?

    init(checkpoint: Checkpoint) {
        self.checkpoint = checkpoint
        let manifest = checkpoint.manifest
        segmentSeconds = manifest.segmentSeconds
        nextNumber = (manifest.segments.last?.number ?? 0) + 1
    }

    func write(_ packet: Packet, timeBase: AVRational) throws(MediaError) {
        let value = packet.pointer.pointee
        let pts = value.pts != FFmpeg.noPTS ? value.pts : value.dts
        let time = FFmpeg.seconds(pts, timeBase)
        if current == nil, let skipThrough {
            // Closed GOPs: everything before the resumed segment's IDR (in decoding order) is presented before it.
            guard packet.isKeyFrame && pts > skipThrough else { return }
            self.skipThrough = nil
        }
        if packet.isKeyFrame {
            let cell = KeyFrameGrid.segment(at: time, duration: segmentSeconds)
            if current == nil || cell > current!.cell {
                try finishSegment()
                let name = String(format: "video_%05d.pkt", nextNumber)
                current = (nextNumber, cell, try PacketLogWriter(path: checkpoint.file(name)), time, time, pts)
                nextNumber += 1
            }
        }
        guard current != nil else {
            throw MediaError(code: "encode_failed", message: "The video encoder's first packet is not a key frame.")
        }
        try current!.writer.append(packet)
        current!.end = max(current!.end, FFmpeg.seconds(pts + max(value.duration, 0), timeBase))
        current!.last = max(current!.last, pts)
    }

    /// Records the last segment and marks the video complete.
    func finish() throws(MediaError) {
        try finishSegment()
        try checkpoint.update { $0.videoComplete = true }
    }

    /// Drops the segment being written (the finished ones stay).
    func discard() {
        current?.writer.discard()
        current = nil
    }

    private func finishSegment() throws(MediaError) {
        guard let segment = current else { return }
        current = nil
        let digest = try segment.writer.finish()
        let name = URL(fileURLWithPath: segment.writer.path).lastPathComponent
        let record = CheckpointManifest.Segment(
            number: segment.number,
            file: .init(name: name, bytes: segment.writer.bytes, sha256: digest, packets: segment.writer.packets),
            start: segment.start, end: segment.end, lastPresentation: segment.last)
        try checkpoint.update { $0.segments.append(record) }
    }
}
