import Testing
@testable import Pipeline

@Suite struct OutputGeometryTests {
    private func resolve(_ width: Int, _ height: Int, sar: Double = 1, rotation: Int = 0,
                         _ settings: VideoSettings = VideoSettings()) throws -> OutputGeometry {
        try OutputGeometry.resolve(sourceWidth: width, sourceHeight: height, sampleAspect: sar, rotation: rotation, settings: settings)
    }

    @Test func noSizeKeepsTheDisplaySize() throws {
        let geometry = try resolve(1920, 1080)
        #expect(geometry.width == 1920 && geometry.height == 1080 && geometry.cropWidth == 0)
    }

    @Test func anamorphicSourcesComeOutWithSquarePixels() throws {
        let pal = try resolve(720, 576, sar: 16.0 / 15.0)
        #expect(pal.width == 768 && pal.height == 576)
        let wide = try resolve(720, 480, sar: 32.0 / 27.0)
        #expect(wide.width == 854 && wide.height == 480)
    }

    @Test func quarterTurnsSwapTheAxes() throws {
        let portrait = try resolve(1920, 1080, rotation: 90)
        #expect(portrait.width == 1080 && portrait.height == 1920)
        #expect(portrait.scaledWidth == 1920 && portrait.scaledHeight == 1080)
        let upsideDown = try resolve(1920, 1080, rotation: 180)
        #expect(upsideDown.width == 1920 && upsideDown.height == 1080)
    }

    @Test func oneSideGivesTheOtherFromTheAspectRatio() throws {
        let byWidth = try resolve(1920, 1080, VideoSettings(width: 1280))
        #expect(byWidth.width == 1280 && byWidth.height == 720)
        let byHeight = try resolve(1920, 1080, rotation: 270, VideoSettings(height: 640))
        #expect(byHeight.width == 360 && byHeight.height == 640)
        let odd = try resolve(1000, 333, VideoSettings(width: 500))
        #expect(odd.height % 2 == 0 && odd.height == 166)
    }

    @Test func fitShrinksTheBoxToThePicture() throws {
        let geometry = try resolve(1920, 1080, VideoSettings(width: 1000, height: 1000, scalingMode: .fit))
        #expect(geometry.width == 1000 && geometry.height == 562)
        let tall = try resolve(1080, 1920, VideoSettings(width: 1280, height: 720))
        #expect(tall.width == 406 && tall.height == 720)
    }

    @Test func fillCropsTheOverflowEvenly() throws {
        let geometry = try resolve(1920, 1080, VideoSettings(width: 1000, height: 1000, scalingMode: .fill))
        #expect(geometry.width == 1000 && geometry.height == 1000)
        #expect(geometry.cropWidth == 1080 && geometry.cropHeight == 1080 && geometry.cropX == 420 && geometry.cropY == 0)
        let rotated = try resolve(1920, 1080, rotation: 90, VideoSettings(width: 1080, height: 1080, scalingMode: .fill))
        #expect(rotated.cropWidth == 1080 && rotated.cropHeight == 1080)
    }

    @Test func stretchTakesTheBox() throws {
        let geometry = try resolve(1920, 1080, VideoSettings(width: 640, height: 640, scalingMode: .stretch))
        #expect(geometry.width == 640 && geometry.height == 640 && geometry.cropWidth == 0)
    }

    @Test func upscalingCanBeRefused() throws {
        let small = try resolve(640, 360, VideoSettings(width: 1920, height: 1080, allowUpscaling: false))
        #expect(small.width == 640 && small.height == 360)
        let fill = try resolve(640, 360, VideoSettings(width: 1000, height: 1000, scalingMode: .fill, allowUpscaling: false))
        #expect(fill.width == 360 && fill.height == 360)
        let allowed = try resolve(640, 360, VideoSettings(width: 1920, height: 1080))
        #expect(allowed.width == 1920)
    }

    @Test func tooLargeOutputsAreRefused() {
        #expect(throws: MediaError.self) { try resolve(8192, 4096, sar: 2) }
    }
}
