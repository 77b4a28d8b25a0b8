import CFFmpeg
import Foundation

/// Takes an encoder's video packets into checkpoint segments: a key frame in a later cell of the segment grid ends
/// the segment being written, which is then flushed to disk and recorded in the manifest before the next begins.
/// The encoder puts an IDR at each grid instant (closed GOPs), so each segment decodes on its own. Runs on the
/// video's encode thread; the flushes to disk run on a `CheckpointFlusher`'s.
final class CheckpointVideoSink: PacketSink {
    private let checkpoint: Checkpoint
    private let segmentSeconds: Double
    private var nextNumber: Int
    private var current: (number: Int, cell: Int, writer: PacketLogWriter, start: Double, end: Double, last: Int64)?
    private let flusher = CheckpointFlusher()
    /// Packets presented up to here (video time base) are the warm-up of a resumed encoder: the checkpoint has them.
    var skipThrough: Int64?

    /// A frame's length in the encoder's time base, for the last segment's end (x264's packets carry none).
    private let frameTicks: Int64

    init(checkpoint: Checkpoint, frameTicks: Int64) {
        self.checkpoint = checkpoint
        self.frameTicks = frameTicks
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
                try finishSegment(nextStart: time)
                let name = String(format: "video_%05d.pkt", nextNumber)
                current = (nextNumber, cell, try PacketLogWriter(path: checkpoint.file(name)), time, time, pts)
                nextNumber += 1
            }
        }
        guard current != nil else {
            throw MediaError(code: "encode_failed", message: "The video encoder's first packet is not a key frame.")
        }
        try current!.writer.append(packet)
        current!.end = max(current!.end, FFmpeg.seconds(pts + (value.duration > 0 ? value.duration : frameTicks), timeBase))
        current!.last = max(current!.last, pts)
    }

    /// Records the last segment once every segment is on disk, and marks the video complete.
    func finish() throws(MediaError) {
        try finishSegment(nextStart: nil)
        try flusher.drain()
        try checkpoint.update { $0.videoComplete = true }
    }

    /// Drops the segment being written; finished ones are still made durable.
    func discard() {
        current?.writer.discard()
        current = nil
        try? flusher.drain()
    }

    deinit { flusher.stop() }

    /// - Parameter nextStart: where the next segment starts (seconds): this one lasts until then.
    private func finishSegment(nextStart: Double?) throws(MediaError) {
        guard var segment = current else { return }
        if let nextStart { segment.end = nextStart }
        current = nil
        let (descriptor, digest) = try segment.writer.close()
        let path = segment.writer.path
        let record = CheckpointManifest.Segment(
            number: segment.number,
            file: .init(name: URL(fileURLWithPath: path).lastPathComponent, bytes: segment.writer.bytes, sha256: digest,
                        packets: segment.writer.packets),
            start: segment.start, end: segment.end, lastPresentation: segment.last)
        // The file first, then the manifest that lists it; in segment order.
        let checkpoint = checkpoint
        try flusher.submit {
            if let failure = PacketLogWriter.commit(descriptor: descriptor, path: path) { return failure }
            do throws(MediaError) { try checkpoint.append(.video(segment: record)) } catch { return error }
            return nil
        }
    }
}
