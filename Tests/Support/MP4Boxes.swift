import Foundation

/// Boxes added to an MP4's video sample entry, for sources whose container states what FFmpeg's muxer will not
/// write from the command line: a Dolby Vision configuration (`dvcC`), a content light level (`clli`), a mastering
/// display (`mdcv`).
public enum MP4Boxes {
    /// A `dvcC` box: Dolby Vision version 1.0, `profile` at level 4, an RPU and a base layer, no enhancement layer,
    /// and the base layer's `compatibility` id (0 none, 1 HDR10, 2 SDR, 4 HLG).
    public static func dolbyVision(profile: Int, compatibility: Int) -> Data {
        let bits = UInt16(profile) << 9 | 4 << 3 | 1 << 2 | 1
        return box("dvcC", [1, 0, UInt8(bits >> 8), UInt8(bits & 0xFF), UInt8(compatibility << 4)] + [UInt8](repeating: 0, count: 19))
    }

    /// A `clli` box: MaxCLL and MaxFALL in cd/m².
    public static func contentLightLevel(maxCLL: Int, maxFALL: Int) -> Data {
        box("clli", [UInt8(maxCLL >> 8), UInt8(maxCLL & 0xFF), UInt8(maxFALL >> 8), UInt8(maxFALL & 0xFF)])
    }

    /// An `mdcv` box: a mastering display with BT.2020's primaries, D65 white, and `maxLuminance` (cd/m²) down to
    /// 0.005 cd/m².
    public static func masteringDisplay(maxLuminance: Int) -> Data {
        // Primaries and white in 0.00002 units (G, B, R as the box orders them), luminance in 0.0001 cd/m².
        let chromaticities: [UInt16] = [8500, 39850, 6550, 2300, 35400, 14600, 15635, 16450]
        var payload = chromaticities.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }
        for luminance in [UInt32(maxLuminance * 10_000), 50] {
            payload += [UInt8(luminance >> 24), UInt8(luminance >> 16 & 0xFF), UInt8(luminance >> 8 & 0xFF), UInt8(luminance & 0xFF)]
        }
        return box("mdcv", payload)
    }

    /// `source` with `boxes` appended to its first track's `hvc1` sample entry, written to `destination`. The
    /// source's index must follow its media (FFmpeg's default): the chunk offsets then stay right.
    public static func adding(_ boxes: [Data], toVideoSampleEntryOf source: String, into destination: String) throws {
        var data = try Data(contentsOf: URL(fileURLWithPath: source))
        let added = boxes.reduce(0) { $0 + $1.count }
        func size(at offset: Int) -> Int { data[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) } }
        func type(at offset: Int) -> String { String(decoding: data[offset + 4..<offset + 8], as: UTF8.self) }
        /// The offsets of the boxes along `path`, looked for from `start` to `end`.
        func chain(_ path: [String], from start: Int, to end: Int) -> [Int]? {
            var offset = start
            while offset + 8 <= end, size(at: offset) >= 8 {
                if type(at: offset) == path[0] {
                    if path.count == 1 { return [offset] }
                    // Children follow a sample description's entry count, and a visual sample entry's 78 bytes.
                    let header = path[0] == "stsd" ? 16 : path[0] == "hvc1" ? 86 : 8
                    if let rest = chain(Array(path.dropFirst()), from: offset + header, to: offset + size(at: offset)) { return [offset] + rest }
                }
                offset += size(at: offset)
            }
            return nil
        }
        guard let parents = chain(["moov", "trak", "mdia", "minf", "stbl", "stsd", "hvc1"], from: 0, to: data.count),
              let media = chain(["mdat"], from: 0, to: data.count)?.first, media < parents[0] else {
            throw ShellError(message: "\(source): no hvc1 sample entry in an index after the media")
        }
        let entry = parents[parents.count - 1]
        data.insert(contentsOf: boxes.reduce(Data(), +), at: entry + size(at: entry))
        for offset in parents {
            let grown = UInt32(size(at: offset) + added)
            data.replaceSubrange(offset..<offset + 4, with: [UInt8(grown >> 24), UInt8(grown >> 16 & 0xFF), UInt8(grown >> 8 & 0xFF), UInt8(grown & 0xFF)])
        }
        try data.write(to: URL(fileURLWithPath: destination))
    }

    private static func box(_ type: String, _ payload: [UInt8]) -> Data {
        let size = UInt32(8 + payload.count)
        return Data([UInt8(size >> 24), UInt8(size >> 16 & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size & 0xFF)] + Array(type.utf8) + payload)
    }
}
