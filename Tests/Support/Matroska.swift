import Foundation

/// Edits a Matroska file's cluster timestamps in place, to make what no muxer writes: a file whose clock goes back.
/// (FFmpeg's own muxer, and the ffmpeg CLI before it, force timestamps to increase.)
public enum Matroska {
    private static let segmentID: UInt32 = 0x1853_8067
    private static let clusterID: UInt32 = 0x1F43_B675
    private static let timestampID: UInt32 = 0xE7
    private static let crcID: UInt32 = 0xBF

    /// Moves every cluster that starts at or after `from` seconds back by `by` seconds (ahead when `by` is negative;
    /// timestamp scale 1 ms, as FFmpeg writes). Returns how many clusters moved; throws if a new value does not fit
    /// in the bytes of the old one.
    @discardableResult
    public static func shiftClusters(in path: String, from: Double, by: Double) throws -> Int {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var offset = 0
        var moved = 0
        // The EBML header, then the Segment, whose children are walked one by one.
        while offset < bytes.count {
            let (id, idLength) = try element(bytes, offset)
            let (size, sizeLength) = try vint(bytes, offset + idLength, keepMarker: false)
            let data = offset + idLength + sizeLength
            guard id == segmentID else {
                offset = data + Int(size)
                continue
            }
            var child = data
            while child < bytes.count {
                let (childID, childIDLength) = try element(bytes, child)
                let (childSize, childSizeLength) = try vint(bytes, child + childIDLength, keepMarker: false)
                let childData = child + childIDLength + childSizeLength
                if childID == clusterID {
                    // The timestamp comes first, after a CRC-32 element if the muxer wrote one (FFmpeg does; its
                    // demuxer does not check it unless asked to).
                    var first = childData
                    var (firstID, firstIDLength) = try element(bytes, first)
                    if firstID == crcID {
                        let (crcSize, crcSizeLength) = try vint(bytes, first + firstIDLength, keepMarker: false)
                        first += firstIDLength + crcSizeLength + Int(crcSize)
                        (firstID, firstIDLength) = try element(bytes, first)
                    }
                    let (valueSize, valueSizeLength) = try vint(bytes, first + firstIDLength, keepMarker: false)
                    let value = first + firstIDLength + valueSizeLength
                    guard firstID == timestampID else { throw ShellError(message: "a cluster does not start with its timestamp") }
                    let milliseconds = bytes[value..<(value + Int(valueSize))].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                    if Double(milliseconds) >= from * 1000 {
                        var shifted = UInt64(max(0, Double(milliseconds) - by * 1000))
                        guard valueSize >= 8 || shifted >> (8 * valueSize) == 0 else {
                            throw ShellError(message: "a shifted cluster timestamp does not fit in \(valueSize) bytes")
                        }
                        for index in stride(from: value + Int(valueSize) - 1, through: value, by: -1) {
                            bytes[index] = UInt8(shifted & 0xFF)
                            shifted >>= 8
                        }
                        moved += 1
                    }
                }
                child = childData + Int(childSize)
            }
            break
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return moved
    }

    /// Writes a Matroska file of one PCM track (48 kHz, mono, 16-bit: a 440 Hz tone) in clusters of one second,
    /// stamped `clusters` (milliseconds, written as eight bytes: any value a crafted file may hold) and with no
    /// declared duration, as no muxer writes.
    public static func writeTone(to path: String, clusters: [UInt64]) throws {
        func size(_ count: Int) -> [UInt8] { [0x01] + (0..<7).reversed().map { UInt8(truncatingIfNeeded: count >> (8 * $0)) } }
        func element(_ id: [UInt8], _ payload: [UInt8]) -> [UInt8] { id + size(payload.count) + payload }
        func number(_ value: UInt64) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        let header = element([0x1A, 0x45, 0xDF, 0xA3], element([0x42, 0x82], Array("matroska".utf8)) + element([0x42, 0x87], number(4))
                             + element([0x42, 0x85], number(2)))
        let info = element([0x15, 0x49, 0xA9, 0x66], element([0x2A, 0xD7, 0xB1], number(1_000_000)))
        let audio = element([0xE1], element([0xB5], number((48_000.0).bitPattern))
                            + element([0x9F], number(1)) + element([0x62, 0x64], number(16)))
        let track = element([0xAE], element([0xD7], number(1)) + element([0x73, 0xC5], number(1)) + element([0x83], number(2))
                            + element([0x86], Array("A_PCM/INT/LIT".utf8)) + audio)
        var body = info + element([0x16, 0x54, 0xAE, 0x6B], track)
        for timestamp in clusters {
            var blocks: [UInt8] = []
            for block in 0..<100 {
                var samples: [UInt8] = []
                for index in 0..<480 {
                    let value = Int16(8000 * sin(2 * Double.pi * 440 * Double(block * 480 + index) / 48_000))
                    samples += [UInt8(truncatingIfNeeded: value), UInt8(truncatingIfNeeded: value >> 8)]
                }
                // Track 1, 10 ms after the cluster's start per block, a keyframe.
                blocks += element([0xA3], [0x81, UInt8(block * 10 >> 8), UInt8(truncatingIfNeeded: block * 10), 0x80] + samples)
            }
            body += element([0x1F, 0x43, 0xB6, 0x75], element([0xE7], number(timestamp)) + blocks)
        }
        try Data(header + element([0x18, 0x53, 0x80, 0x67], body)).write(to: URL(fileURLWithPath: path))
    }

    /// An element ID (its length marker kept, as Matroska's specification writes IDs) and its length in bytes.
    private static func element(_ bytes: [UInt8], _ offset: Int) throws -> (UInt32, Int) {
        let (value, length) = try vint(bytes, offset, keepMarker: true)
        return (UInt32(value), length)
    }

    /// A variable-length integer: the value and how many bytes it takes.
    private static func vint(_ bytes: [UInt8], _ offset: Int, keepMarker: Bool) throws -> (UInt64, Int) {
        guard offset < bytes.count, bytes[offset] != 0 else { throw ShellError(message: "not a Matroska variable-length integer") }
        let length = bytes[offset].leadingZeroBitCount + 1
        guard offset + length <= bytes.count else { throw ShellError(message: "a Matroska element runs past the end") }
        var value = UInt64(keepMarker ? bytes[offset] : bytes[offset] & (0xFF >> length))
        for index in 1..<length { value = value << 8 | UInt64(bytes[offset + index]) }
        return (value, length)
    }
}
