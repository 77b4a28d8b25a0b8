import Foundation

/// Reads where the fragments of a CMAF media segment are, from its boxes: for each `moof` (with the `styp`/`sidx`
/// before it, if any), its offset, its track's decode time, and where its first sample ends. That first sample of a
/// ladder's video fragment is its key frame, so `offset ..< firstSampleEnd` is what an I-frame playlist points at.
enum FragmentIndex {
    struct Fragment: Equatable {
        /// Byte offset of the fragment's first box.
        var offset: Int
        /// Byte offset just past the fragment's first sample.
        var firstSampleEnd: Int
        /// The `tfdt` base media decode time, in the track's timescale.
        var decodeTime: Int64
    }

    static func read(path: String) throws(MediaError) -> [Fragment] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw MediaError(code: "output_failed", message: "Reading back the segment \(path) failed.")
        }
        do {
            return try parse([UInt8](data))
        } catch {
            throw MediaError(code: "output_failed", message: "The segment \(path) is not a valid CMAF segment: \(error.reason).")
        }
    }

    struct ParseError: Error {
        var reason: String
    }

    static func parse(_ bytes: [UInt8]) throws(ParseError) -> [Fragment] {
        var fragments: [Fragment] = []
        var pendingStart: Int?
        var offset = 0
        while offset < bytes.count {
            let (type, size, header) = try box(bytes, at: offset, end: bytes.count)
            switch type {
            case "styp", "sidx", "prft", "emsg":
                pendingStart = pendingStart ?? offset
            case "moof":
                let fragment = try moof(bytes, at: offset, size: size, header: header)
                fragments.append(Fragment(offset: pendingStart ?? offset, firstSampleEnd: fragment.firstSampleEnd,
                                          decodeTime: fragment.decodeTime))
                pendingStart = nil
            default:
                break
            }
            offset += size
        }
        return fragments
    }

    /// The box at `offset`: its type, whole size, and header size.
    private static func box(_ bytes: [UInt8], at offset: Int, end: Int) throws(ParseError) -> (String, Int, Int) {
        guard offset + 8 <= end else { throw ParseError(reason: "a box header is cut at byte \(offset)") }
        var size = Int(uint32(bytes, offset))
        let type = String(decoding: bytes[offset + 4 ..< offset + 8], as: UTF8.self)
        var header = 8
        if size == 1 {
            guard offset + 16 <= end else { throw ParseError(reason: "a large box header is cut at byte \(offset)") }
            size = Int(uint32(bytes, offset + 8)) << 32 | Int(uint32(bytes, offset + 12))
            header = 16
        } else if size == 0 {
            size = end - offset
        }
        guard size >= header, offset + size <= end else { throw ParseError(reason: "the \(type) box at byte \(offset) overruns its parent") }
        return (type, size, header)
    }

    private static func moof(_ bytes: [UInt8], at start: Int, size: Int, header: Int) throws(ParseError) -> (firstSampleEnd: Int, decodeTime: Int64) {
        var offset = start + header
        while offset < start + size {
            let (type, boxSize, boxHeader) = try box(bytes, at: offset, end: start + size)
            if type == "traf" { return try traf(bytes, moofStart: start, moofSize: size, at: offset + boxHeader, end: offset + boxSize) }
            offset += boxSize
        }
        throw ParseError(reason: "a moof without a traf")
    }

    private static func traf(_ bytes: [UInt8], moofStart: Int, moofSize: Int, at begin: Int, end: Int) throws(ParseError)
        -> (firstSampleEnd: Int, decodeTime: Int64) {
        var defaultSize: Int?
        var decodeTime: Int64 = 0
        var firstSize: Int?
        var dataOffset: Int?
        var offset = begin
        while offset < end {
            let (type, size, header) = try box(bytes, at: offset, end: end)
            let body = offset + header
            switch type {
            case "tfhd":
                let flags = uint32(bytes, body) & 0xFFFFFF
                var field = body + 8 // version and flags, track id
                if flags & 0x1 != 0 { field += 8 }
                if flags & 0x2 != 0 { field += 4 }
                if flags & 0x8 != 0 { field += 4 }
                if flags & 0x10 != 0 { defaultSize = Int(uint32(bytes, field)) }
            case "tfdt":
                let version = bytes[body]
                decodeTime = version == 1
                    ? Int64(uint32(bytes, body + 4)) << 32 | Int64(uint32(bytes, body + 8))
                    : Int64(uint32(bytes, body + 4))
            case "trun":
                let flags = uint32(bytes, body) & 0xFFFFFF
                var field = body + 8 // version and flags, sample count
                if flags & 0x1 != 0 {
                    dataOffset = Int(Int32(bitPattern: uint32(bytes, field)))
                    field += 4
                }
                if flags & 0x4 != 0 { field += 4 }
                if flags & 0x100 != 0 { field += 4 }
                if flags & 0x200 != 0 { firstSize = Int(uint32(bytes, field)) }
            default:
                break
            }
            offset += size
        }
        guard let size = firstSize ?? defaultSize else { throw ParseError(reason: "a fragment without sample sizes") }
        // Without a data offset the samples start right after the moof, in the mdat's payload.
        let dataStart = moofStart + (dataOffset ?? (moofSize + 8))
        return (dataStart + size, decodeTime)
    }

    private static func uint32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        guard offset + 4 <= bytes.count else { return 0 }
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }
}
