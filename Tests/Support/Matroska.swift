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
