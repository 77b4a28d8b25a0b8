import Foundation
import Pipeline
import Testing
import TestSupport

/// Colour tags in the output (H.264 VUI and the MP4 `colr` atom) and colours that survive an SD → HD scale.
@Suite(.serialized) struct ColorTagTests {
    private func transcode(_ input: String, _ json: String) throws -> (path: String, probe: Probe) {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: try TranscodeSettings.parse(Data(json.utf8))).run()
        return (output, try Probe.read(output))
    }

    /// 640×480 with a red left half and a blue right half, H.264, tagged BT.601 or untagged.
    private func source(tagged: Bool) throws -> String {
        let path = try Media.scratch().appendingPathComponent(tagged ? "bt601.mp4" : "untagged.mp4").path
        let tags = tagged ? ["-colorspace", "smpte170m", "-color_primaries", "smpte170m", "-color_trc", "smpte170m", "-color_range", "tv"] : []
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=320x480:d=1", "-f", "lavfi", "-i", "color=blue:s=320x480:d=1",
                          "-filter_complex", "[0][1]hstack,format=yuv420p", "-c:v", "libx264", "-preset", "ultrafast"] + tags + [path])
        return path
    }

    @Test func untaggedSDGetsBT601AndHDGetsBT709() throws {
        let input = try source(tagged: false)
        let sd = try transcode(input, "{}").probe.video
        #expect(sd?.color_space == "smpte170m" && sd?.color_primaries == "smpte170m" && sd?.color_transfer == "smpte170m")
        #expect(sd?.color_range == "tv")
        let hd = try transcode(input, #"{"video": {"height": 1080}}"#)
        #expect(hd.probe.video?.color_space == "bt709" && hd.probe.video?.color_primaries == "bt709")
        let red = try Probe.meanColor(hd.path, x: 100, y: 300, width: 400, height: 400)
        #expect(red[0] > 235 && red[1] < 20 && red[2] < 20, "red stays red after the 601 → 709 conversion: \(red)")
    }

    /// A watermark changes no colour but its own: on an untagged HD source (BT.709, as the pipeline takes it) the
    /// overlay's conversion to RGBA read the untagged frames as BT.601, and the whole video came out shifted (red
    /// 253 → 230, green gained red). Red and green halves, transcoded with and without an invisible mark.
    @Test func aWatermarkKeepsTheColoursOfAnUntaggedHDSource() throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("untagged-hd.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=640x720:d=1", "-f", "lavfi", "-i", "color=lime:s=640x720:d=1",
                          "-filter_complex", "[0][1]hstack,scale=out_color_matrix=bt709,format=yuv420p", "-c:v", "libx264", "-preset", "ultrafast", input])
        try #require(try Probe.read(input).video?.color_space == nil, "the source says nothing of its colours")
        let mark = folder.appendingPathComponent("mark.png").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=white@0.0:s=40x20,format=rgba", "-frames:v", "1", mark])
        var settings = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"watermark": {"upload": "mark"}}}}"#.utf8))
        settings.filters?.video?.watermark?.imagePath = mark
        let marked = folder.appendingPathComponent("marked.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: marked, settings: settings).run()
        let plain = try transcode(input, "{}").path
        for (x, pure) in [(200, [true, false, false]), (840, [false, true, false])] {
            let expected = try Probe.meanColor(plain, x: x, y: 300, width: 200, height: 200)
            let got = try Probe.meanColor(marked, x: x, y: 300, width: 200, height: 200)
            #expect(zip(expected, got).allSatisfy { abs($0 - $1) < 4 }, "at \(x): \(got) with the mark, \(expected) without")
            #expect(zip(got, pure).allSatisfy { $1 ? $0 > 240 : $0 < 15 }, "a pure colour at \(x): \(got)")
        }
    }

    @Test func aBT601SourceScaledTo1080pKeepsItsRed() throws {
        let result = try transcode(try source(tagged: true), #"{"video": {"width": 1440, "height": 1080}}"#)
        let video = try #require(result.probe.video)
        #expect(video.color_space == "smpte170m" && video.color_primaries == "smpte170m", "the source's tags are kept")
        let red = try Probe.meanColor(result.path, x: 100, y: 300, width: 400, height: 400)
        let blue = try Probe.meanColor(result.path, x: 900, y: 300, width: 400, height: 400)
        #expect(red[0] > 235 && red[1] < 20 && red[2] < 20, "red patch \(red)")
        #expect(blue[2] > 235 && blue[0] < 20 && blue[1] < 20, "blue patch \(blue)")
    }

    /// An RGB source (a screen recording in UT Video, FFV1 or PNG) is tagged with the `gbr` matrix: the output's
    /// pictures are Y'CbCr, so it gets a Y'CbCr matrix. The tag used to be copied, and players read Y as green.
    @Test func anRGBSourceGetsAYCbCrMatrix() throws {
        let input = try Media.scratch().appendingPathComponent("rgb.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=320x480:d=1", "-f", "lavfi", "-i", "color=blue:s=320x480:d=1",
                          "-filter_complex", "[0][1]hstack,format=gbrp", "-c:v", "utvideo", input])
        #expect(try Probe.read(input).video?.color_space == "gbr")
        let result = try transcode(input, "{}")
        #expect(result.probe.video?.color_space == "smpte170m", "\(result.probe.video?.color_space ?? "none")")
        // Its `pc` range is the RGB levels', not the Y'CbCr output's, which is limited as ffmpeg makes it.
        #expect(try Probe.read(input).video?.color_range == "pc")
        #expect(result.probe.video?.color_range == "tv", "\(result.probe.video?.color_range ?? "none")")
        let red = try Probe.meanColor(result.path, x: 40, y: 100, width: 200, height: 200)
        let blue = try Probe.meanColor(result.path, x: 360, y: 100, width: 200, height: 200)
        #expect(red[0] > 235 && red[1] < 20 && red[2] < 20, "red patch \(red)")
        #expect(blue[2] > 235 && blue[0] < 20 && blue[1] < 20, "blue patch \(blue)")
    }

    /// A grey image source (a grey or 1-bit PNG) is tagged full range, as image levels are: the output was full range
    /// too, its blacks crushed by players that ignore the flag. Its levels become the limited range, as ffmpeg makes
    /// them, black still black and white still white; so for a 1-bit TIFF in Matroska, whose range no tag says (its
    /// bits are black and white: read as limited levels, they were copied as they were, 0 and 255).
    @Test(arguments: [("gray", "png", "mov"), ("monob", "png", "mov"), ("monob", "tiff", "mkv")])
    func aGreySourceBecomesLimitedRange(format: String, codec: String, container: String) throws {
        let input = try Media.scratch().appendingPathComponent("\(format).\(container)").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=black:s=320x240:d=1", "-f", "lavfi", "-i", "color=white:s=320x240:d=1",
                          "-filter_complex", "[0][1]hstack,format=\(format)" + (codec == "png" ? "" : ",setparams=range=unknown"),
                          "-c:v", codec, input])
        #expect(try Probe.read(input).video?.color_range == (codec == "png" ? "pc" : nil))
        let result = try transcode(input, "{}")
        #expect(result.probe.video?.color_range == "tv", "\(result.probe.video?.color_range ?? "none")")
        // The levels themselves, as stored: relabelled only, black would stay 0 and white 255.
        let black = try Probe.meanLuma(result.path, x: 40, y: 40, width: 200, height: 160)
        let white = try Probe.meanLuma(result.path, x: 360, y: 40, width: 200, height: 160)
        #expect(abs(black - 16) < 4 && abs(white - 235) < 4, "black \(black), white \(white)")
    }

    @Test func colorSettingsOverrideTheTagsAndTheMatrix() throws {
        let result = try transcode(try source(tagged: true),
                                   #"{"video": {"color": {"primaries": "bt709", "transfer": "bt709", "matrix": "bt709", "range": "pc"}}}"#)
        let video = try #require(result.probe.video)
        #expect(video.color_primaries == "bt709" && video.color_transfer == "bt709" && video.color_space == "bt709")
        #expect(video.color_range == "pc")
        let red = try Probe.meanColor(result.path, x: 100, y: 200, width: 200, height: 200)
        #expect(red[0] > 235 && red[1] < 20 && red[2] < 20, "converted, not just retagged: \(red)")
        #expect { try TranscodeSettings.parse(Data(#"{"video": {"color": {"matrix": "bt2020"}}}"#.utf8)) } throws: {
            ($0 as? SettingsError)?.key == "video.color.matrix"
        }
    }

    /// A picture whose range changes (a poster's JPEG is full range; a range asked) at its own size, or from more
    /// than 8 bits, is converted, not just retagged: FFmpeg's swscale converted the range of 8-bit pictures scaled to
    /// another size only, and an SD video's poster, a limited-range ProRes source's poster and a full-range output of
    /// either showed black as 16 and white as 235.
    @Test(arguments: [("prores_ks", "yuv422p10le", "mov"), ("libx264", "yuv420p", "mp4")])
    func aSourcesRangeIsConvertedAtItsOwnSizeAndDepth(codec: String, pixelFormat: String, container: String) throws {
        let folder = try Media.scratch()
        let input = folder.appendingPathComponent("black-white.\(container)").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=black:s=160x120:d=1", "-f", "lavfi", "-i", "color=white:s=160x120:d=1",
                          "-filter_complex", "[0][1]hstack", "-c:v", codec, "-pix_fmt", pixelFormat, input])
        for json in [#"{"thumbnails": {"poster": 0}}"#, #"{"video": {"color": {"range": "pc"}}}"#] {
            let out = folder.appendingPathComponent("out-\(json.count)").path
            _ = try TranscodeSession(inputPath: input, outputDirectory: out, settings: try TranscodeSettings.parse(Data(json.utf8))).run()
            let path = out + (json.contains("poster") ? "/poster.jpg" : "/output.mp4")
            let black = try Probe.meanColor(path, at: nil, x: 20, y: 20, width: 100, height: 80)
            let white = try Probe.meanColor(path, at: nil, x: 200, y: 20, width: 100, height: 80)
            #expect(black.allSatisfy { $0 < 5 } && white.allSatisfy { $0 > 250 }, "\(codec) \(json): black \(black), white \(white)")
        }
    }
}
