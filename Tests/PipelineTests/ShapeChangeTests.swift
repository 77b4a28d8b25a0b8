import CFFmpeg
import Foundation
@testable import Pipeline
import Testing
import TestSupport

/// Pictures that change shape mid-stream keep their aspect in the output the encoder was opened with.
@Suite struct ShapeChangeTests {
    /// An encoding made for a `source`-sized first picture shown at `aspect` (its size's ratio by default).
    private func encoding(box: (Int, Int), source: (Int, Int), aspect: Double? = nil, sampleAspect: Double = 1,
                          mode: VideoSettings.ScalingMode, crop: (Int, Int) = (0, 0)) -> VideoEncoding {
        VideoEncoding(width: box.0, height: box.1, scaledWidth: box.0, scaledHeight: box.1, cropX: (source.0 - crop.0) / 2,
                      cropY: (source.1 - crop.1) / 2, cropWidth: crop.0, cropHeight: crop.1, rotation: 0,
                      sourceWidth: source.0, sourceHeight: source.1, sourceAspect: aspect ?? Double(source.0) / Double(source.1),
                      codecSampleAspect: sampleAspect, scalingMode: mode, averageBitRate: 1, maxKeyFrameInterval: 60, profile: "high", level: 40, preset: "ultrafast",
                      frameRate: AVRational(num: 30, den: 1), timeBase: AVRational(num: 1, den: 30), colors: .bt709)
    }

    @Test func aPictureOfTheStreamsShapeIsLaidOutAsTheGeometrySays() {
        let fit = encoding(box: (640, 360), source: (1280, 720), mode: .fit)
        #expect(PictureLayout(width: 1280, height: 720, sampleAspect: 1, encoding: fit) == PictureLayout())
        // Pictures that state no sample aspect have the stream's.
        let dvb = encoding(box: (1024, 576), source: (720, 576), aspect: 16.0 / 9, sampleAspect: 64.0 / 45, mode: .fit)
        #expect(PictureLayout(width: 720, height: 576, sampleAspect: nil, encoding: dvb) == PictureLayout())
        // A container's sample aspect over the codec's (an MP4's pasp on square-pixel H.264): the pictures carry the
        // codec's, which is the stream's shape.
        let container = encoding(box: (1920, 1080), source: (1440, 1080), aspect: 16.0 / 9, sampleAspect: 1, mode: .fit)
        #expect(PictureLayout(width: 1440, height: 1080, sampleAspect: 1, encoding: container) == PictureLayout())
        // A fill mode's crop, exactly the geometry's (odd offset included), and at another resolution scaled.
        let fill = encoding(box: (406, 720), source: (1280, 720), mode: .fill, crop: (406, 720))
        #expect(PictureLayout(width: 1280, height: 720, sampleAspect: 1, encoding: fill).crop == .init(x: 437, y: 0, width: 406, height: 720))
        let square = encoding(box: (360, 360), source: (1280, 720), mode: .fill, crop: (720, 720))
        #expect(PictureLayout(width: 640, height: 360, sampleAspect: 1, encoding: square).crop == .init(x: 140, y: 0, width: 360, height: 360))
    }

    @Test func anotherShapeKeepsItsAspect() {
        // 4:3 in a 16:9 box: pillarboxed; 2.39:1 letterboxed.
        let fit = encoding(box: (640, 360), source: (640, 360), mode: .fit)
        #expect(PictureLayout(width: 480, height: 360, sampleAspect: 1, encoding: fit).destination
                == .init(x: 80, y: 0, width: 480, height: 360))
        #expect(PictureLayout(width: 640, height: 268, sampleAspect: 1, encoding: fit).destination
                == .init(x: 0, y: 46, width: 640, height: 268))
        // The same size with the other sample aspect (DVB's 720×576 at 16:9, then at 4:3).
        let dvb = encoding(box: (1024, 576), source: (720, 576), aspect: 16.0 / 9, sampleAspect: 64.0 / 45, mode: .fit)
        #expect(PictureLayout(width: 720, height: 576, sampleAspect: 16.0 / 15, encoding: dvb).destination
                == .init(x: 128, y: 0, width: 768, height: 576))
        // Fill crops the new shape to the box; stretch stretches it.
        let fill = encoding(box: (640, 360), source: (640, 360), mode: .fill)
        let filled = PictureLayout(width: 480, height: 360, sampleAspect: 1, encoding: fill)
        #expect(filled.crop == .init(x: 0, y: 44, width: 480, height: 270) && filled.destination == nil)
        let stretch = encoding(box: (640, 360), source: (640, 360), mode: .stretch)
        #expect(PictureLayout(width: 480, height: 360, sampleAspect: 1, encoding: stretch) == PictureLayout())
    }

    /// The broadcast's 4:3 part comes out pillarboxed in the 16:9 output, its bands where they were.
    @Test func aBroadcastThatTurns4By3IsPillarboxed() throws {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: try Media.shapeChange(), outputPath: output, settings: TranscodeSettings()).run()
        let video = try #require(try Probe.read(output).video)
        #expect(video.width == 640 && video.height == 360, "\(video)")
        #expect(try Probe.meanColor(output, at: 1, x: 0, y: 0, width: 640, height: 360).allSatisfy { $0 > 240 }, "white first")
        let bars = [try Probe.meanColor(output, at: 3, x: 0, y: 0, width: 76, height: 360),
                    try Probe.meanColor(output, at: 3, x: 564, y: 0, width: 76, height: 360)]
        #expect(bars.allSatisfy { $0.allSatisfy { $0 < 20 } }, "black bars at the sides: \(bars)")
        let middle = try Probe.meanColor(output, at: 3, x: 100, y: 60, width: 440, height: 240)
        #expect(middle[0] > 200 && middle[1] < 50 && middle[2] < 50, "red in the middle: \(middle)")
        let band = try Probe.meanColor(output, at: 3, x: 100, y: 4, width: 440, height: 30)
        #expect(band[2] > 200 && band[0] < 50, "the blue band at the top: \(band)")
    }

    /// An HDR broadcast whose pictures state no sample aspect and turn 4:3 is pillarboxed too, tone-mapped: the
    /// tone mapping's fixed-size prescale stretched the 4:3 part to 16:9, and a picture with no aspect said nothing
    /// of it, so it came out stretched.
    @Test func anHDRBroadcastThatTurns4By3WithoutAspectIsPillarboxed() throws {
        let folder = try Media.scratch()
        var joined = Data()
        for (name, color, width, offset) in [("wide", "white", 1280, "0"), ("narrow", "red", 960, "1")] {
            let part = folder.appendingPathComponent("\(name).ts").path
            try Media.ffmpeg(["-f", "lavfi", "-i", "color=\(color):s=\(width)x720:r=30:d=1", "-vf", "setsar=0", "-c:v", "libx265",
                              "-preset", "ultrafast", "-x265-params", "log-level=none", "-pix_fmt", "yuv420p10le", "-color_primaries", "bt2020",
                              "-color_trc", "smpte2084", "-colorspace", "bt2020nc", "-an", "-output_ts_offset", offset, part])
            joined.append(try Data(contentsOf: URL(fileURLWithPath: part)))
        }
        let input = folder.appendingPathComponent("joined.ts")
        try joined.write(to: input)
        #expect(try Probe.read(input.path).video?.sample_aspect_ratio == nil, "the pictures state no aspect")
        let output = folder.appendingPathComponent("out.mp4").path
        let settings = try TranscodeSettings.parse(Data(#"{"video": {"width": 640}}"#.utf8))
        _ = try TranscodeSession(inputPath: input.path, outputPath: output, settings: settings).run()
        let video = try #require(try Probe.read(output).video)
        #expect(video.width == 640 && video.height == 360 && video.color_transfer == "bt709", "\(video)")
        let bars = [try Probe.meanColor(output, at: 1.5, x: 0, y: 0, width: 76, height: 360),
                    try Probe.meanColor(output, at: 1.5, x: 564, y: 0, width: 76, height: 360)]
        #expect(bars.allSatisfy { $0.allSatisfy { $0 < 20 } }, "black bars at the sides: \(bars)")
        let middle = try Probe.meanColor(output, at: 1.5, x: 100, y: 60, width: 440, height: 240)
        #expect(middle[0] > 150 && middle[1] < 50 && middle[2] < 50, "red in the middle: \(middle)")
    }

    /// A crop keeps the same share of a picture that changes size: its rectangle, in pixels of the stream's first
    /// size (560×300 at 40, 30 of 640×360), was wider than the 480×360 part, and the job failed ("Configuring the
    /// filters failed"). The 4:3 part's share is 420×300 at 30, 30: ten lines of each blue band, pillarboxed at
    /// 70 pixels.
    @Test func aCropKeepsItsShareOfAPictureThatChangesSize() throws {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        let settings = try TranscodeSettings.parse(Data(#"{"filters": {"video": {"crop": {"x": 40, "y": 30, "width": 560, "height": 300}}}}"#.utf8))
        let result = try TranscodeSession(inputPath: try Media.shapeChange(), outputPath: output, settings: settings).run()
        let video = try #require(try Probe.read(output).video)
        #expect(video.width == 560 && video.height == 300 && result.framesEncoded == 120, "\(video), \(result.framesEncoded) frames")
        #expect(try Probe.meanColor(output, at: 1, x: 0, y: 0, width: 560, height: 300).allSatisfy { $0 > 240 }, "white first")
        func color(_ x: Int, _ y: Int, _ width: Int, _ height: Int) throws -> [Double] {
            try Probe.meanColor(output, at: 3, x: x, y: y, width: width, height: height)
        }
        let red = [try color(100, 16, 360, 10), try color(100, 60, 360, 180), try color(100, 274, 360, 10), try color(72, 100, 6, 100)]
        #expect(red.allSatisfy { $0[0] > 200 && $0[2] < 50 }, "red under ten lines of band, and from 70 pixels in: \(red)")
        let bands = [try color(100, 1, 360, 6), try color(100, 293, 360, 6)]
        #expect(bands.allSatisfy { $0[2] > 200 && $0[0] < 50 }, "the bands' ten lines: \(bands)")
        #expect(try color(0, 100, 60, 100).allSatisfy { $0 < 20 }, "black at the side")
    }

    /// In fill mode the 4:3 part is cropped to 16:9: its bands, in the lines cropped, are gone.
    @Test func fillModeCropsTheNewShape() throws {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        let settings = try TranscodeSettings.parse(Data(#"{"video": {"width": 640, "height": 360, "scalingMode": "fill"}}"#.utf8))
        _ = try TranscodeSession(inputPath: try Media.shapeChange(), outputPath: output, settings: settings).run()
        let top = try Probe.meanColor(output, at: 3, x: 0, y: 0, width: 640, height: 20)
        let sides = try Probe.meanColor(output, at: 3, x: 0, y: 40, width: 40, height: 280)
        #expect(top[0] > 200 && top[2] < 50 && sides[0] > 200 && sides[2] < 50, "red to the edges: \(top) \(sides)")
    }
}
