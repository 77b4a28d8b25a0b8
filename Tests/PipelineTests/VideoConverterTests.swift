import CFFmpeg
@testable import Pipeline
import Testing

/// The converter's own frames carry what the encoder needs and nothing of the pictures before.
@Suite struct VideoConverterTests {
    /// An 8×4 4:2:0 picture with its buffers.
    private static func picture() throws -> Frame {
        let picture = Frame()
        picture.pointer.pointee.width = 8
        picture.pointer.pointee.height = 4
        picture.pointer.pointee.format = AV_PIX_FMT_YUV420P.rawValue
        try #require(av_frame_get_buffer(picture.pointer, 0) == 0)
        return picture
    }

    /// A picture that already fits is turned upright into the converter's frame: it was given every source
    /// picture's side data on top of what it held (`av_frame_copy_props` adds, never clears), so a portrait HDR
    /// phone video's light levels (and a Dolby Vision RPU, 5 KB) piled up a copy a frame, every reference of the
    /// frame copying them all.
    @Test func aTurnedPictureKeepsNoSideDataOfThePicturesBefore() throws {
        let encoding = VideoEncoding(width: 4, height: 8, scaledWidth: 8, scaledHeight: 4, cropX: 0, cropY: 0, cropWidth: 0, cropHeight: 0,
                                     rotation: 90, sourceWidth: 8, sourceHeight: 4, sourceAspect: 2, averageBitRate: 1,
                                     maxKeyFrameInterval: 60, profile: "high", level: 40, preset: "ultrafast",
                                     frameRate: AVRational(num: 30, den: 1), timeBase: AVRational(num: 1, den: 30), colors: .bt709)
        let converter = VideoConverter(encoding: encoding, sourceColors: .bt709)
        var sideData: [Int32] = []
        for index in 0..<50 {
            let picture = try Self.picture()
            #expect(av_frame_make_writable(picture.pointer) == 0)
            let light = try #require(av_content_light_metadata_create_side_data(picture.pointer))
            light.pointee.MaxCLL = UInt32(100 + index)
            let turned = try converter.convert(picture)
            #expect(turned.width == 4 && turned.height == 8)
            sideData.append(turned.pointer.pointee.nb_side_data)
        }
        #expect(sideData.allSatisfy { $0 <= 1 }, "side data entries of the turned picture: \(sideData.suffix(5))")
    }
}
