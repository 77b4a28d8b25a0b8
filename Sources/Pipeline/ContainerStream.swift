import CFFmpeg

/// One stream of an `OutputContainer`, as the destination of one encoder's packets.
final class ContainerStream: PacketSink {
    private let container: OutputContainer
    let index: Int

    init(container: OutputContainer, index: Int) {
        self.container = container
        self.index = index
    }

    func write(_ packet: Packet, timeBase: AVRational) throws(MediaError) {
        try container.write(packet, stream: index, timeBase: timeBase)
    }
}
