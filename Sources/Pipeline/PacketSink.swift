import CFFmpeg

/// Where an encoder's packets go: a stream of an output file shared with other tracks (`ContainerStream`), or a
/// track's own segmented output (`SegmentedOutput`).
protocol PacketSink: AnyObject {
    /// Writes one packet whose timestamps are in `timeBase` units, on the output timeline.
    func write(_ packet: Packet, timeBase: AVRational) throws(MediaError)
}
