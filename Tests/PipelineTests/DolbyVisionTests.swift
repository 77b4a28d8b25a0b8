import Foundation
@testable import Pipeline
import Testing
import TestSupport

/// Dolby Vision sources (HDR10 patches whose MP4 states a Dolby Vision configuration): transcoded from a base
/// layer other players show (profile 8 over HDR10), refused when there is none (profile 5, whose decoded colours
/// are wrong without Dolby's reshaping), and copied with their configuration and light levels.
@Suite struct DolbyVisionTests {
    private func source(_ boxes: [Data]) throws -> String {
        let path = try Media.scratch().appendingPathComponent("dolby-vision.mp4").path
        try MP4Boxes.adding(boxes, toVideoSampleEntryOf: try Media.hdrPatches(.pq), into: path)
        return path
    }

    private func run(_ input: String, _ json: String) throws -> String {
        let output = try Media.scratch().appendingPathComponent("out.mp4").path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: try TranscodeSettings.parse(Data(json.utf8))).run()
        return output
    }

    @Test func profileFiveIsRefusedWithItsReasonAndCopiedWhole() throws {
        let input = try source([MP4Boxes.dolbyVision(profile: 5, compatibility: 0)])
        #expect(try TranscodeSession.probe(path: input).first?.dolbyVisionProfile == 5)
        // Decoded, its pictures would be encoded in colours nobody meant (they were green and purple).
        #expect { try self.run(input, "{}") } throws: { error in
            guard let error = error as? MediaError else { return false }
            return error.code == "unsupported_video" && error.message.contains("Dolby Vision profile 5")
        }
        let ladder = try TranscodeSettings.parse(Data(#"{"container": "hls", "renditions": [{"video": {"height": 180}}]}"#.utf8))
        let folder = try Media.scratch().appendingPathComponent("ladder").path
        #expect { try TranscodeSession(inputPath: input, outputDirectory: folder, settings: ladder).run() } throws: {
            ($0 as? MediaError)?.code == "unsupported_video" && ($0 as? MediaError)?.message.contains("Dolby Vision profile 5") == true
        }
        // Copied, the configuration goes with it: a Dolby Vision player still shows it right.
        let copy = try #require(try Probe.read(try run(input, #"{"video": "copy"}"#)).video)
        let vision = try #require(copy.side_data_list?.first { $0.dv_profile != nil }, "\(copy)")
        #expect(vision.dv_profile == 5 && vision.dv_bl_signal_compatibility_id == 0)
        // Into a file that cannot carry the configuration (MOV: FFmpeg writes it in MP4 alone), refused: the copy
        // succeeded, and every player showed it in the wrong colours.
        let mov = try Media.scratch().appendingPathComponent("out.mov").path
        let settings = try TranscodeSettings.parse(Data(#"{"container": "mov", "video": "copy"}"#.utf8))
        #expect { try TranscodeSession(inputPath: input, outputPath: mov, settings: settings).run() } throws: {
            ($0 as? MediaError)?.code == "copy_not_supported" && ($0 as? MediaError)?.message.contains("MP4 only") == true
        }
        #expect(!FileManager.default.fileExists(atPath: mov))
    }

    @Test func profileEightIsTranscodedFromItsHDR10BaseAndCopiedWithItsLightLevels() throws {
        let input = try source([MP4Boxes.dolbyVision(profile: 8, compatibility: 1), MP4Boxes.contentLightLevel(maxCLL: 700, maxFALL: 300),
                                MP4Boxes.masteringDisplay(maxLuminance: 1000)])
        let track = try #require(try TranscodeSession.probe(path: input).first)
        #expect(track.dolbyVisionProfile == 8 && track.hdr == "PQ")
        let mapped = try #require(try Probe.read(try run(input, "{}")).video)
        #expect(mapped.color_transfer == "bt709", "tone-mapped from its HDR10 base layer: \(mapped)")
        let copy = try #require(try Probe.read(try run(input, #"{"video": "copy"}"#)).video)
        let sideData = copy.side_data_list ?? []
        #expect(sideData.contains { $0.dv_profile == 8 && $0.dv_bl_signal_compatibility_id == 1 }, "\(sideData)")
        #expect(sideData.contains { $0.max_content == 700 }, "\(sideData)")
        #expect(sideData.contains { $0.max_luminance == "10000000/10000" }, "\(sideData)")
    }
}
