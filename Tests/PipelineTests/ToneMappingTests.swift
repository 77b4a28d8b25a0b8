import Foundation
@testable import Pipeline
import Testing
import TestSupport

/// HDR sources (PQ, HLG) tone-mapped to SDR BT.709, or kept as they are (`video.color.hdr`), for a file and a
/// ladder. The sources are white, mid-grey and red patches made HDR with SDR white at HDR's reference white, so a
/// right mapping gives them back close to their SDR values.
@Suite(.serialized) struct ToneMappingTests {
    private func transcode(_ input: String, _ json: String) throws -> (path: String, probe: Probe) {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: try TranscodeSettings.parse(Data(json.utf8))).run()
        return (output, try Probe.read(output))
    }

    /// Mean RGB of the white, grey and red patches of a picture made from `Media.hdrPatches`.
    private func patches(_ path: String, width: Int = 640, height: Int = 360, at time: Double? = 0.5) throws
        -> (white: [Double], grey: [Double], red: [Double]) {
        let columns = [0.08, 0.41, 0.74].map { Int(Double(width) * $0) }
        let size = width * 15 / 100, top = height * 30 / 100
        let colors = try columns.map { try Probe.meanColor(path, at: time, x: $0, y: top, width: size, height: size) }
        return (colors[0], colors[1], colors[2])
    }

    @Test(arguments: [Media.HDRTransfer.pq, .hlg])
    func anHDRSourceComesOutAsSDR(_ transfer: Media.HDRTransfer) throws {
        let result = try transcode(try Media.hdrPatches(transfer), "{}")
        let video = try #require(result.probe.video)
        #expect(video.color_primaries == "bt709" && video.color_transfer == "bt709" && video.color_space == "bt709",
                "tagged as what it now is: \(video)")
        #expect(video.color_range == "tv" && video.pix_fmt == "yuv420p")
        let (white, grey, red) = try patches(result.path)
        // Unmapped, these patches read about 147 (PQ) or 190 (HLG) for white and (141, 87, 59) for red.
        #expect(white.allSatisfy { (215...245).contains($0) }, "reference white near SDR white: \(white)")
        #expect(grey.allSatisfy { (116...140).contains($0) }, "mid-grey keeps its level: \(grey)")
        #expect(red[0] > 215 && red[1] < 35 && red[2] < 35, "red stays saturated red: \(red)")
    }

    /// Pictures too small for the filters the service adds itself (no filter asked for): an HDR one with a side of
    /// one pixel (cropped to even: nothing) and one said to be interlaced under 3 lines (which bwdif refuses) come out
    /// as the same pictures in SDR or progressive do. Both failed with `filter_failed`.
    @Test func picturesTooSmallForTheServicesOwnFiltersStillComeOut() throws {
        let folder = try Media.scratch()
        let hdr = folder.appendingPathComponent("hdr.mkv").path
        try Shell.check("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-vf", "scale=3:1",
                                   "-pix_fmt", "yuv444p10le", "-color_trc", "smpte2084", "-color_primaries", "bt2020",
                                   "-colorspace", "bt2020nc", "-c:v", "ffv1", hdr])
        #expect(try Shell.check("ffprobe", ["-v", "error", "-show_entries", "stream=color_transfer", "-of", "csv=p=0", hdr])
            .contains("smpte2084"), "the source is HDR (PQ)")
        let interlaced = folder.appendingPathComponent("interlaced.mkv").path
        try Shell.check("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-vf", "scale=320:2",
                                   "-field_order", "tt", "-c:v", "ffv1", interlaced])
        #expect(try Shell.check("ffprobe", ["-v", "error", "-show_entries", "stream=field_order", "-of", "csv=p=0", interlaced])
            .contains("tt"), "the container says it is interlaced")
        // Their twins in SDR and progressive, which always came out.
        let sdr = folder.appendingPathComponent("sdr.mkv").path
        try Shell.check("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-vf", "scale=3:1", "-c:v", "ffv1", sdr])
        let progressive = folder.appendingPathComponent("progressive.mkv").path
        try Shell.check("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x64:r=10:d=1", "-vf", "scale=320:2", "-c:v", "ffv1", progressive])
        for (input, twin) in [(hdr, sdr), (interlaced, progressive)] {
            let settings = #"{"video": {"preset": "ultrafast"}}"#
            let video = try #require(try transcode(input, settings).probe.video, "\(input)")
            let expected = try #require(try transcode(twin, settings).probe.video)
            #expect(video.width == expected.width && video.height == expected.height && video.nb_frames == "10",
                    "\(input): \(String(describing: video.width))x\(String(describing: video.height)), \(video.nb_frames ?? "?") frames")
            #expect(video.color_transfer == (input == hdr ? "bt709" : expected.color_transfer), "tone-mapped as ever: \(video)")
        }
    }

    @Test func theStatedPeakSetsTheRollOff() throws {
        // Nothing above reference white: no roll-off, white is SDR's full white. With 1000 cd/m² above it (the
        // peak assumed when none is stated, so this also shows the stated one is read), white gives way.
        let (dimWhite, dimGrey, _) = try patches(try transcode(try Media.hdrPatches(.pq, maxCLL: 203), "{}").path)
        let (usualWhite, usualGrey, _) = try patches(try transcode(try Media.hdrPatches(.pq, maxCLL: 1000), "{}").path)
        #expect(dimWhite[1] > 248, "MaxCLL 203: \(dimWhite)")
        #expect(usualWhite[1] < dimWhite[1] - 15, "MaxCLL 1000: \(usualWhite) against \(dimWhite)")
        #expect(abs(dimGrey[1] - usualGrey[1]) < 4, "mid-grey keeps its level whatever the peak: \(dimGrey), \(usualGrey)")
    }

    /// The peak is the file's first picture's, wherever the decode starts: a transcode resumed from its checkpoint
    /// past the pictures that state it maps the rest as the attempt before did. (It used the first picture it decoded
    /// itself, stated nothing, and took 1000 cd/m²: white dimmed at the seam.)
    @Test func aResumedTranscodeMapsWithThePeakOfTheFilesFirstPicture() throws {
        let input = try Media.hdrPatchesStatingTheirPeakAtFirstOnly()
        // What the source is said to be: a light level on the first second's pictures only, none in the container.
        let frames = try Shell.check("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries",
                                                 "frame=best_effort_timestamp_time:frame_side_data=side_data_type", "-of", "csv=p=0", input])
        let stating = frames.split(separator: "\n").filter { $0.contains("Content light level") }
        #expect(stating.count == 30 && stating.allSatisfy { (Double($0.prefix { $0 != "," }) ?? 9) < 1 }, "\(stating.count) pictures state it")
        #expect(try !Shell.check("ffprobe", ["-v", "error", "-show_streams", input]).contains("Content light level"))
        let settings = try TranscodeSettings.parse(Data(#"{"video": {"preset": "ultrafast"}}"#.utf8))
        // Past 4 s, so the resumed reader starts at a key frame after the first second (2 s of warm-up before it).
        let second = try Interrupted.transcode(input, settings: settings, in: try Media.scratch()) { $0.presentationTime > 4.3 }
        let result = try second.run()
        let resumedFrom = try #require(result.resumedFrom, "the second attempt continued from the checkpoint")
        #expect(resumedFrom > 3.9 && resumedFrom < 6.1, "\(resumedFrom)")
        // MaxCLL 203: nothing above reference white, which comes out as SDR's full white on both sides of the seam.
        for time in [0.5, resumedFrom + 1] {
            let (white, grey, _) = try patches(result.path, at: time)
            #expect(white[1] > 248 && (116...140).contains(grey[1]), "at \(time) s: white \(white), grey \(grey)")
        }
    }

    /// Pictures every output scales down are mapped at the size the largest one needs, in the source's aspect.
    @Test func theMappingSizeIsTheLargestOutputsNeed() {
        let size = ToneMapping.prescaledSize
        #expect(size((3840, 2160), [(1920, 1080), (1280, 720)]) ?? (0, 0) == (1920, 1080))
        // Both directions are covered: an output narrower than the source's aspect takes its height from it.
        #expect(size((3840, 2160), [(1080, 1080)]) ?? (0, 0) == (1920, 1080))
        // Anamorphic (1440×1080 shown 16:9): its width decides. Odd: the even part (what is mapped) is scaled.
        #expect(size((1440, 1080), [(960, 540)]) ?? (0, 0) == (960, 720))
        #expect(size((1441, 1081), [(480, 270)]) ?? (0, 0) == (480, 360))
        #expect(size((1001, 1001), [(301, 301)]) ?? (0, 0) == (302, 302))
        // Outputs near the source's size, or larger, map at the source's own.
        #expect(size((1920, 1080), [(1760, 990)]) == nil)
        #expect(size((640, 360), [(1280, 720), (320, 180)]) == nil)
    }

    /// Which transcodes map at a smaller size: those whose outputs all scale the whole picture, and need less.
    @Test func onlyWholePicturesScaledDownAreMappedSmaller() throws {
        let reader = try MediaReader(path: try Media.hdrPatches(.pq))
        let track = try #require(reader.mainVideoTrack)
        func size(_ json: String, thumbnailWidth: Int? = nil) throws -> (width: Int, height: Int)? {
            let settings = try TranscodeSettings.parse(Data(json.utf8))
            guard case .encode(let video) = settings.video else { return (-1, -1) }
            var pictures = [try VideoEncoding.resolve(track: track, stream: reader.stream(track.index), settings: video, filters: settings.filters,
                                                      toneMapped: true)]
            if let thumbnailWidth {
                pictures.append(try VideoEncoding.resolve(track: track, stream: reader.stream(track.index),
                                                          settings: VideoSettings(width: thumbnailWidth, allowUpscaling: true),
                                                          filters: settings.filters, toneMapped: true))
            }
            return ToneMapping.prescale(source: (640, 360), pictures: pictures, filters: settings.filters)
        }
        #expect(try size(#"{"video": {"height": 180}}"#) ?? (0, 0) == (320, 180))
        #expect(try size(#"{"video": {"height": 180}}"#, thumbnailWidth: 160) ?? (0, 0) == (320, 180))
        // A thumbnail wider than the output needs the source's size.
        #expect(try size(#"{"video": {"height": 180}}"#, thumbnailWidth: 640) == nil)
        // A fill mode's crop and the user's are in source pixels.
        #expect(try size(#"{"video": {"width": 180, "height": 180, "scalingMode": "fill"}}"#) == nil)
        #expect(try size(#"{"video": {"height": 90}, "filters": {"video": {"crop": {"x": 0, "y": 0, "width": 320, "height": 180}}}}"#) == nil)
        #expect(try size("{}") == nil)
    }

    /// A smaller output than the source is mapped at its own size (`prescaledSize`), with the same colours.
    @Test func aSmallerOutputIsMappedAtItsSize() throws {
        let result = try transcode(try Media.hdrPatches(.pq), #"{"video": {"height": 180}}"#)
        let video = try #require(result.probe.video)
        #expect(video.width == 320 && video.height == 180 && video.color_transfer == "bt709", "\(video)")
        let (white, grey, red) = try patches(result.path, width: 320, height: 180)
        #expect(white.allSatisfy { (215...245).contains($0) } && grey.allSatisfy { (116...140).contains($0) }, "\(white) \(grey)")
        #expect(red[0] > 215 && red[1] < 35 && red[2] < 35, "\(red)")
        // The patches' edges stay where they were: the mapping's scaling keeps the whole picture.
        let edge = try Probe.meanColor(result.path, at: 0.5, x: 103, y: 60, width: 4, height: 60)
        #expect(edge.allSatisfy { $0 > 200 }, "white reaches column 106 of 320: \(edge)")
    }

    /// A fill mode crops in source pixels, so its pictures are mapped at the source's size: the square output
    /// shows the middle of the 640×360 picture, columns 140 to 499 (white to 213, grey, red from 426).
    @Test func aFilledOutputIsMappedWhole() throws {
        let result = try transcode(try Media.hdrPatches(.pq), #"{"video": {"width": 180, "height": 180, "scalingMode": "fill"}}"#)
        let video = try #require(result.probe.video)
        #expect(video.width == 180 && video.height == 180, "\(video)")
        let white = try Probe.meanColor(result.path, at: 0.5, x: 4, y: 60, width: 24, height: 60)
        let grey = try Probe.meanColor(result.path, at: 0.5, x: 60, y: 60, width: 60, height: 60)
        let red = try Probe.meanColor(result.path, at: 0.5, x: 152, y: 60, width: 24, height: 60)
        #expect(white.allSatisfy { $0 > 215 } && grey.allSatisfy { (116...140).contains($0) }, "\(white) \(grey)")
        #expect(red[0] > 215 && red[1] < 35 && red[2] < 35, "\(red)")
    }

    /// An RGB HDR master (FFV1 in GBR, full range) mapped with a picture adjustment or grayscale comes out as it
    /// does without: the conversion of RGB pictures to Y'CbCr that such filters need came after the mapping, whose
    /// output is Y'CbCr already, and converted it again into the source's matrix and range; black fell under 16,
    /// every patch darkened (white from 228 to about 200) and colours shifted.
    @Test func anRGBSourceWithAPictureAdjustmentIsMappedOnce() throws {
        let input = try Media.scratch().appendingPathComponent("rgb.mkv").path
        try Shell.check("ffmpeg", ["-v", "error", "-i", try Media.hdrPatches(.pq), "-t", "1", "-vf", "format=gbrp10le", "-c:v", "ffv1",
                                   "-color_trc", "smpte2084", "-color_primaries", "bt2020", "-colorspace", "rgb", "-color_range", "pc", input])
        let plain = try patches(try transcode(input, "{}").path)
        let adjusted = try patches(try transcode(input, #"{"filters": {"video": {"brightness": 0.0001}}}"#).path)
        for (name, before, after) in [("white", plain.white, adjusted.white), ("grey", plain.grey, adjusted.grey), ("red", plain.red, adjusted.red)] {
            #expect(zip(before, after).allSatisfy { abs($0 - $1) < 4 }, "\(name): \(before) without, \(after) with the adjustment")
        }
        let grey = try patches(try transcode(input, #"{"filters": {"video": {"grayscale": true}}}"#).path)
        #expect(zip(plain.grey, grey.grey).allSatisfy { abs($0 - $1) < 4 } && grey.white.allSatisfy { $0 > 215 },
                "grey stays grey, white white: \(grey)")
    }

    @Test func anHDRSourceTaggedWithItsTransferOnlyIsTakenForBT2020() throws {
        let input = try Media.hdrPatches(.pq, transferOnly: true)
        let source = try #require(try Probe.read(input).video)
        #expect(source.color_transfer == "smpte2084" && source.color_space == nil && source.color_primaries == nil, "\(source)")
        let (white, grey, red) = try patches(try transcode(input, "{}").path)
        // Taken for BT.601 (the SD default), its red came out (211, 94, 51).
        #expect(red[0] > 215 && red[1] < 35 && red[2] < 35, "\(red)")
        #expect(abs(grey[0] - grey[1]) < 6 && abs(grey[1] - grey[2]) < 6 && white.allSatisfy { $0 > 215 }, "\(grey) \(white)")
    }

    @Test func anOddCropIsMapped() throws {
        // zimg takes no odd-sized 4:2:0 picture, and misreads the colours of one cropped at an odd offset: the
        // picture is mapped first, then cropped.
        let result = try transcode(try Media.hdrPatches(.pq), #"""
            {"filters": {"video": {"crop": {"x": 1, "y": 1, "width": 601, "height": 199}}}}
            """#)
        let video = try #require(result.probe.video)
        #expect(video.color_transfer == "bt709" && (598...602).contains(video.width ?? 0) && (196...200).contains(video.height ?? 0),
                "\(video)")
        let white = try Probe.meanColor(result.path, x: 40, y: 60, width: 100, height: 80)
        let grey = try Probe.meanColor(result.path, x: 240, y: 60, width: 60, height: 80)
        let red = try Probe.meanColor(result.path, x: 460, y: 60, width: 100, height: 80)
        #expect(white.allSatisfy { (215...245).contains($0) } && grey.allSatisfy { (116...140).contains($0) }, "\(white) \(grey)")
        #expect(red[0] > 215 && red[1] < 35 && red[2] < 35, "\(red)")
    }

    /// An odd-sized source is made even before the mapping. With a user's crop reaching its last column and line,
    /// that is done by adding a column and a line (left out by the crop), not by dropping the last ones: FFmpeg's
    /// crop moved the rectangle a pixel left and up to fit, and the source's black first column and line showed.
    @Test func aCropTakingTheLastColumnOfAnOddSizedSourceKeepsItsPlace() throws {
        let input = try Media.scratch().appendingPathComponent("odd.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=white:s=642x362:r=30:d=1",
                          "-vf", "format=yuv444p,crop=641:361:0:0,drawbox=x=0:y=0:w=1:h=ih:c=black:t=fill,drawbox=x=0:y=0:w=iw:h=1:c=black:t=fill,format=yuv420p10le",
                          "-c:v", "ffv1", "-color_trc", "smpte2084", "-color_primaries", "bt2020", "-colorspace", "bt2020nc", input])
        let source = try #require(try Probe.read(input).video)
        #expect(source.width == 641 && source.height == 361 && source.color_transfer == "smpte2084", "\(source)")
        let result = try transcode(input, #"""
            {"video": {"preset": "ultrafast", "averageBitRate": 4000000},
             "filters": {"video": {"crop": {"x": 1, "y": 1, "width": 640, "height": 360}}}}
            """#)
        let video = try #require(result.probe.video)
        #expect(video.width == 640 && video.height == 360, "\(video)")
        // Two columns and lines (a 4:2:0 crop takes no single one): one of them black reads about half white.
        let left = try Probe.meanColor(result.path, x: 0, y: 100, width: 2, height: 100)
        let top = try Probe.meanColor(result.path, x: 100, y: 0, width: 100, height: 2)
        #expect(left.allSatisfy { $0 > 200 } && top.allSatisfy { $0 > 200 }, "the black edges are cropped away: \(left) \(top)")
        // And no added black column or line at the other edges.
        let right = try Probe.meanColor(result.path, x: 638, y: 100, width: 2, height: 100)
        let bottom = try Probe.meanColor(result.path, x: 100, y: 358, width: 100, height: 2)
        #expect(right.allSatisfy { $0 > 200 } && bottom.allSatisfy { $0 > 200 }, "\(right) \(bottom)")
    }

    @Test func keepPassesHDRThrough() throws {
        let result = try transcode(try Media.hdrPatches(.pq), #"{"video": {"color": {"hdr": "keep"}}}"#)
        let video = try #require(result.probe.video)
        #expect(video.color_primaries == "bt2020" && video.color_transfer == "smpte2084" && video.color_space == "bt2020nc")
        let (white, _, _) = try patches(result.path)
        #expect(white.allSatisfy { (130...165).contains($0) }, "PQ's code values for 203 cd/m², read as if SDR: \(white)")
    }

    /// HDR kept carries the source's HDR10 metadata (MaxCLL, the mastering display) into the file, a checkpointed
    /// one's and a ladder's init segments: a copy kept it, an encode dropped it, and players guessed the peak (a film
    /// mastered at 4,000 cd/m² clipped). Tone-mapped to SDR, none is stated.
    @Test func keptHDRCarriesItsLightLevels() throws {
        let source = try Media.scratch().appendingPathComponent("hdr10.mp4").path
        try MP4Boxes.adding([MP4Boxes.contentLightLevel(maxCLL: 700, maxFALL: 300), MP4Boxes.masteringDisplay(maxLuminance: 1000)],
                            toVideoSampleEntryOf: try Media.hdrPatches(.pq), into: source)
        func stated(_ video: Probe.Stream) -> Bool {
            let sideData = video.side_data_list ?? []
            return sideData.contains { $0.max_content == 700 } && sideData.contains { $0.max_luminance == "10000000/10000" }
        }
        let keep = try TranscodeSettings.parse(Data(#"{"video": {"color": {"hdr": "keep"}}}"#.utf8))
        let kept = try #require(try transcode(source, #"{"video": {"color": {"hdr": "keep"}}}"#).probe.video)
        #expect(stated(kept), "\(kept.side_data_list ?? [])")
        let mapped = try #require(try transcode(source, "{}").probe.video)
        #expect(mapped.side_data_list?.isEmpty ?? true, "\(mapped.side_data_list ?? [])")
        // From a checkpoint, the file is put together from the manifest's parameters.
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent("out.mp4").path
        let session = TranscodeSession(inputPath: source, outputPath: output, settings: keep)
        session.checkpointDirectory = folder.appendingPathComponent("checkpoint").path
        _ = try session.run()
        let checkpointed = try #require(try Probe.read(output).video)
        #expect(stated(checkpointed), "\(checkpointed.side_data_list ?? [])")
        let ladder = try Media.scratch().appendingPathComponent("ladder").path
        let settings = try TranscodeSettings.parse(Data("""
            {"container": "hls", "video": {"color": {"hdr": "keep"}}, "renditions": [{"video": {"height": 180}}]}
            """.utf8))
        _ = try TranscodeSession(inputPath: source, outputDirectory: ladder, settings: settings).run()
        let rung = try #require(try Probe.read(ladder + "/180p/init.mp4").video)
        #expect(stated(rung), "\(rung.side_data_list ?? [])")
    }

    @Test func aLadderAndItsPictures() throws {
        let source = try Media.hdrPatches(.pq)
        func ladder(_ color: String) throws -> String {
            let folder = try Media.scratch().appendingPathComponent("out").path
            let settings = try TranscodeSettings.parse(Data("""
                {"container": "hls", "segmentDuration": 2, "video": {"color": \(color)},
                 "renditions": [{"video": {"height": 360}}, {"video": {"height": 180, "averageBitRate": 200000}}],
                 "thumbnails": {"interval": 1, "width": 160, "poster": 0.5}}
                """.utf8))
            _ = try TranscodeSession(inputPath: source, outputDirectory: folder, settings: settings).run()
            _ = try Ladder.check(folder)
            return folder
        }
        let mapped = try ladder("{}")
        let master = try String(contentsOfFile: mapped + "/master.m3u8", encoding: .utf8)
        #expect(!master.contains("VIDEO-RANGE"), "SDR is said by leaving it out: \(master)")
        let rung = try #require(try Probe.read(mapped + "/180p/init.mp4").video)
        #expect(rung.color_transfer == "bt709" && rung.color_primaries == "bt709")
        let (posterWhite, _, posterRed) = try patches(mapped + "/poster.jpg", at: nil)
        #expect(posterWhite.allSatisfy { $0 > 215 } && posterRed[0] > 215 && posterRed[1] < 40, "\(posterWhite) \(posterRed)")
        let (thumbWhite, _, _) = try patches(mapped + "/thumbnails/00001.jpg", width: 160, height: 90, at: nil)
        #expect(thumbWhite.allSatisfy { $0 > 215 }, "\(thumbWhite)")

        let kept = try ladder(#"{"hdr": "keep"}"#)
        let keptMaster = try String(contentsOfFile: kept + "/master.m3u8", encoding: .utf8)
        let variants = keptMaster.split(separator: "\n").filter { $0.hasPrefix("#EXT-X-STREAM-INF") || $0.hasPrefix("#EXT-X-I-FRAME-STREAM-INF") }
        #expect(variants.count == 4 && variants.allSatisfy { $0.contains(",VIDEO-RANGE=PQ") }, "\(keptMaster)")
        let manifest = try String(contentsOfFile: kept + "/manifest.mpd", encoding: .utf8)
        #expect(manifest.contains(#"<EssentialProperty schemeIdUri="urn:mpeg:mpegB:cicp:TransferCharacteristics" value="16"/>"#))
        #expect(!(try String(contentsOfFile: mapped + "/manifest.mpd", encoding: .utf8)).contains("TransferCharacteristics"))
        // The video keeps HDR, its pictures cannot (JPEG has none): they are mapped as the mapped ladder's are. As
        // they were, PQ's values shown as SDR, white came out about 150 of 255.
        for (path, width, height) in [(kept + "/poster.jpg", 640, 360), (kept + "/thumbnails/00001.jpg", 160, 90),
                                      (kept + "/thumbnails/00002.jpg", 160, 90)] {
            let (white, grey, red) = try patches(path, width: width, height: height, at: nil)
            #expect(white.allSatisfy { $0 > 215 } && red[0] > 215 && red[1] < 40 && red[2] < 40, "\(path): \(white) \(red)")
            #expect(grey.allSatisfy { (116...140).contains($0) }, "\(path): \(grey)")
        }
    }

    @Test func settingsAreChecked() throws {
        #expect { try TranscodeSettings.parse(Data(#"{"video": {"color": {"hdr": "sdr"}}}"#.utf8)) } throws: {
            ($0 as? SettingsError)?.key == "video.color.hdr"
        }
        let mixed = #"""
            {"container": "hls", "video": {"color": {"hdr": "keep"}},
             "renditions": [{"video": {"height": 360, "color": {"hdr": "keep"}}}, {"video": {"height": 180, "color": {"hdr": "tonemap"}}}]}
            """#
        #expect { try TranscodeSettings.parse(Data(mixed.utf8)) } throws: {
            ($0 as? SettingsError)?.key == "renditions[1].video.color.hdr"
        }
        // A rendition's own colours without `hdr` follow the document's.
        _ = try TranscodeSettings.parse(Data(#"""
            {"container": "hls", "video": {"color": {"hdr": "keep"}},
             "renditions": [{"video": {"height": 360, "color": {"matrix": "bt601"}}}]}
            """#.utf8))
    }
}
