import Foundation
import Testing
@testable import Pipeline

/// Settings judged against probed tracks at intake: refused only when the job would refuse them with every video
/// track it could pick.
@Suite struct InputFitTests {
    private func video(_ width: Int, _ height: Int, rate: Double = 30, duration: Double = 10, coverArt: Bool? = nil) -> Track {
        Track(index: 0, mediaType: .video, codec: "h264", width: width, height: height, frameRate: rate, duration: duration, coverArt: coverArt)
    }

    private func audio(duration: Double) -> Track {
        Track(index: 1, mediaType: .audio, codec: "aac", duration: duration, sampleRate: 48_000, channels: 2)
    }

    /// The message of what `settings` are refused with against `tracks`, or nil when they pass.
    private func refusal(_ settings: String, _ tracks: [Track]) throws -> String? {
        let settings = try TranscodeSettings.parse(Data(settings.utf8))
        do throws(MediaError) {
            try InputFit.check(settings, tracks: tracks)
            return nil
        } catch {
            #expect(["invalid_settings", "output_too_large"].contains(error.code), "\(error.code)")
            return error.message
        }
    }

    /// A level holds a bit rate too (H.264 Table A-1): 12.5 Mb/s at level 3 in High, 10 in Main and Baseline, and
    /// in High asked with the `ultrafast` preset, whose stream is Constrained Baseline. Refused where the job is
    /// asked for, not with the settings: stored jobs from before must stay readable.
    @Test func aBitRateOverItsLevelIsRefused() throws {
        let source = [video(720, 576, rate: 25)]
        #expect(try refusal(#"{"video": {"level": "3", "averageBitRate": 40000000}}"#, source)?
            .hasPrefix("video.averageBitRate: level 3 carries at most 12500000 bits per second here (high profile, veryfast preset)") == true)
        #expect(try refusal(#"{"video": {"level": "3", "averageBitRate": 12500000}}"#, source) == nil)
        #expect(try refusal(#"{"video": {"level": "3", "averageBitRate": 12500001}}"#, source) != nil)
        #expect(try refusal(#"{"video": {"level": "3", "profile": "main", "averageBitRate": 11000000}}"#, source)?
            .hasPrefix("video.averageBitRate: level 3 carries at most 10000000") == true)
        #expect(try refusal(#"{"video": {"level": "3", "preset": "ultrafast", "averageBitRate": 11000000}}"#, source)?
            .hasPrefix("video.averageBitRate: level 3 carries at most 10000000 bits per second here (high profile, ultrafast preset)") == true)
        #expect(try refusal(#"{"video": {"averageBitRate": 40000000}}"#, source) == nil, "no level, no bound")
        #expect(try refusal(#"{"container": "hls", "renditions": [{"video": {"height": 288, "level": "2.1", "averageBitRate": 6000000}}]}"#, source)?
            .hasPrefix("renditions[0].video.averageBitRate: level 2.1 carries at most 5000000") == true)
    }

    @Test func aCropOutsideThePictureIsRefused() throws {
        let crop = #"{"filters": {"video": {"crop": {"x": 600, "y": 0, "width": 100, "height": 100}}}}"#
        #expect(try refusal(crop, [video(640, 360)])?.hasPrefix("filters.video.crop: the rectangle is outside the 640×360 picture") == true)
        #expect(try refusal(crop, [video(1280, 720)]) == nil)
        // Refused only when no video track the job could pick holds it; a cover picture is never picked.
        #expect(try refusal(crop, [video(640, 360), video(1280, 720)]) == nil)
        #expect(try refusal(crop, [video(640, 360), video(1280, 720, coverArt: true)]) != nil)
        // A ladder whose rungs come from the source crops the same picture.
        #expect(try refusal(#"{"container": "hls", "renditions": "auto", "filters": {"video": {"crop": {"x": 600, "y": 0, "width": 100, "height": 100}}}}"#,
                            [video(640, 360)]) != nil)
        // Copied or dropped video is not cropped (and a crop of it is refused by the settings alone).
        #expect(try refusal(#"{"video": null}"#, [video(640, 360)]) == nil)
    }

    @Test func aSizeTheLevelCannotHoldIsRefusedWithTheRenditionsKey() throws {
        // A width alone: the height comes from the source's shape, 1920×1080, more than level 3 holds.
        #expect(try refusal(#"{"video": {"width": 1920, "level": "3"}}"#, [video(640, 360)])?
            .hasPrefix("video.level: level 3 holds pictures of at most 1620 macroblocks") == true)
        // A box that fits keeps a 1080p source inside level 3.
        #expect(try refusal(#"{"video": {"width": 720, "height": 480, "level": "3"}}"#, [video(1920, 1080)]) == nil)
        let ladder = #"{"container": "hls", "renditions": [{"video": {"height": 360}}, {"video": {"height": 1080, "level": "3.1"}}]}"#
        #expect(try refusal(ladder, [video(1920, 1080)])?.hasPrefix("renditions[1].video.level: level 3.1") == true)
        // A source wider than the largest output (2× anamorphic, 9216 wide on screen) is refused only for a size
        // that keeps it so, named by its key.
        let wide = Track(index: 0, mediaType: .video, codec: "h264", width: 4608, height: 256, sampleAspectRatio: "2:1", frameRate: 25, duration: 2)
        #expect(try refusal(#"{"video": {"width": 1280}}"#, [wide]) == nil)
        #expect(try refusal(#"{"video": {"width": 1280}, "filters": {"video": {"crop": {"x": 0, "y": 0, "width": 4000, "height": 256}}}}"#, [wide]) == nil)
        #expect(try refusal(#"{"video": {}}"#, [wide])?.hasPrefix("video: The output would be 9216×256") == true)
        // A picture larger than an input may be (8192 by default) is the job's to refuse, as too large an input.
        #expect(try refusal(#"{"video": {}}"#, [video(8200, 16)]) == nil)
        // No level holds 8192×8192: the size the source leads to is refused as a given one is.
        #expect(try refusal(#"{"video": {}}"#, [video(8192, 8192)])?.hasPrefix("video: H.264 holds pictures of at most") == true)
    }

    @Test func aRateIsJudgedOnlyWhenTheEncoderWouldGetIt() throws {
        // 1280×720 at level 3.1 holds 30 fps, not 59: 59 asked of a 60 fps source is what the encoder gets (an ask
        // within 1 % of the source's rate is not judged: the stream's own rate may be what it gets).
        #expect(try refusal(#"{"video": {"frameRate": 59, "level": "3.1"}}"#, [video(1280, 720, rate: 60)])?
            .contains("macroblocks a second") == true)
        // 60 asked of a 30 fps source keeps the source's 30 (pictures are never repeated): passes.
        #expect(try refusal(#"{"video": {"frameRate": 60, "level": "3.1"}}"#, [video(1280, 720, rate: 30)]) == nil)
    }

    /// Thumbnails of a tall, narrow picture at a wide thumbnail width would be taller than any output may be: the
    /// refusal names `thumbnails.width` (it was accepted, and the job failed telling to set the video's size).
    @Test func thumbnailsLargerThanAnyOutputAreRefusedWithTheirKey() throws {
        let tall = [video(64, 2048)]
        #expect(try refusal(#"{"container": "hls", "thumbnails": {"interval": 1, "width": 1920}}"#, tall)?
            .hasPrefix("thumbnails.width: at 1920 px wide the thumbnails of this picture would be larger than the largest allowed") == true)
        #expect(try refusal(#"{"thumbnails": {"interval": 1, "width": 256}}"#, tall) == nil, "256×8192 fits")
        #expect(try refusal(#"{"thumbnails": {"interval": 1, "width": 258}}"#, tall) != nil)
        #expect(try refusal(#"{"thumbnails": {"interval": 1}}"#, tall) == nil, "the default 160 px")
    }

    @Test func thumbnailsTooManyForTheShortestLengthAreRefused() throws {
        let settings = #"{"thumbnails": {"interval": 0.5}}"#
        // 10,000 at most: 6,000 s every half second is 12,001.
        #expect(try refusal(settings, [video(640, 360, duration: 6_000)])?.hasPrefix("thumbnails.interval: 12001 thumbnails over 6000 s") == true)
        #expect(try refusal(settings, [video(640, 360, duration: 4_000)]) == nil)
        // The job's length is its tracks' together: long sound beside a short picture counts, when it is kept.
        #expect(try refusal(settings, [video(640, 360, duration: 60), audio(duration: 6_000)]) != nil)
        #expect(try refusal(#"{"audio": null, "thumbnails": {"interval": 0.5}}"#, [video(640, 360, duration: 60), audio(duration: 6_000)]) == nil)
        // A tempo of 2 halves the output's length.
        #expect(try refusal(#"{"thumbnails": {"interval": 0.5}, "filters": {"audio": {"tempo": 2}}}"#, [video(640, 360, duration: 6_000)]) == nil)
        // A count is spread over whatever length there is.
        #expect(try refusal(#"{"thumbnails": {"count": 10}}"#, [video(640, 360, duration: 6_000)]) == nil)
    }
}
