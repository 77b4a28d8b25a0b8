import Foundation
import Pipeline
import Testing
import TestSupport

/// Raw elementary outputs (H.264 Annex B, AAC ADTS) and audio-only M4A, parsed byte by byte.
@Suite(.serialized) struct RawOutputTests {
    private func transcode(_ input: String, _ json: String, name: String) throws -> String {
        let folder = try Media.scratch()
        let output = folder.appendingPathComponent(name).path
        _ = try TranscodeSession(inputPath: input, outputPath: output, settings: try TranscodeSettings.parse(Data(json.utf8))).run()
        return output
    }

    /// NAL unit types of an Annex B stream, in order.
    private func nalTypes(_ data: Data) -> [UInt8] {
        let bytes = [UInt8](data)
        var types: [UInt8] = []
        var index = 0
        while index + 3 < bytes.count {
            if bytes[index] == 0 && bytes[index + 1] == 0 && bytes[index + 2] == 1 {
                types.append(bytes[index + 3] & 0x1F)
                index += 3
            } else {
                index += 1
            }
        }
        return types
    }

    @Test func h264StreamRepeatsSPSAndPPSBeforeEveryKeyFrame() throws {
        let output = try transcode(try Media.path(.standard), #"{"container": "h264", "audio": null, "video": {"maxKeyFrameInterval": 30}}"#,
                                   name: "out.h264")
        let probe = try Shell.check("ffprobe", ["-v", "error", "-f", "h264", "-show_entries", "stream=codec_name,width,height",
                                                "-of", "csv=p=0", output])
        #expect(probe.trimmingCharacters(in: .whitespacesAndNewlines) == "h264,640,360")
        let types = nalTypes(try Data(contentsOf: URL(fileURLWithPath: output)))
        let idrs = types.indices.filter { types[$0] == 5 && ($0 == 0 || types[$0 - 1] != 5) }
        #expect(idrs.count >= 4, "an IDR at least every 30 frames of 120: \(idrs.count)")
        for position in idrs {
            let before = types[..<position].reversed().prefix { $0 != 1 && $0 != 5 }
            #expect(before.contains(7) && before.contains(8), "SPS and PPS precede the IDR at NAL \(position)")
        }
    }

    @Test func aacStreamHasAnADTSHeaderOnEveryFrame() throws {
        let output = try transcode(try Media.path(.standard), #"{"container": "aac", "video": null}"#, name: "out.aac")
        let probe = try Shell.check("ffprobe", ["-v", "error", "-f", "aac", "-show_entries", "stream=codec_name,sample_rate,channels",
                                                "-of", "csv=p=0", output])
        #expect(probe.trimmingCharacters(in: .whitespacesAndNewlines) == "aac,44100,2")
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: output)))
        var offset = 0
        var frames = 0
        while offset + 7 <= bytes.count {
            #expect(bytes[offset] == 0xFF && bytes[offset + 1] & 0xF6 == 0xF0, "sync word at \(offset)")
            let length = Int(bytes[offset + 3] & 0x03) << 11 | Int(bytes[offset + 4]) << 3 | Int(bytes[offset + 5]) >> 5
            #expect(length > 7)
            guard length > 7 else { break }
            offset += length
            frames += 1
        }
        #expect(offset == bytes.count, "frame lengths add up to the file size")
        #expect(frames > 150, "about 43 frames a second for 4 s: \(frames)")
    }

    @Test func m4aIsAudioOnlyMPEG4() throws {
        let output = try transcode(try Media.path(.audioOnly), #"{"container": "m4a"}"#, name: "out.m4a")
        let probe = try Probe.read(output)
        #expect(probe.video == nil && probe.audio?.codec_name == "aac")
        #expect(probe.format.format_name.contains("mp4"))
    }

    @Test func rawFormsRefuseTheOtherKindOfTrack() throws {
        #expect { try TranscodeSettings.parse(Data(#"{"container": "h264", "audio": {"bitRate": 96000}}"#.utf8)) } throws: {
            ($0 as? SettingsError)?.description.hasPrefix("audio: a raw h264 stream holds video only") == true
        }
        #expect { try TranscodeSettings.parse(Data(#"{"container": "aac", "video": "copy"}"#.utf8)) } throws: {
            ($0 as? SettingsError)?.key == "video"
        }
        // Left to its default, the other kind is left out, as `ffmpeg -i clip.mp4 clip.h264` does (the job failed).
        let folder = try Media.scratch()
        let raw = folder.appendingPathComponent("o.h264").path
        let settings = try TranscodeSettings.parse(Data(#"{"container": "h264"}"#.utf8))
        #expect(settings.audio == .drop)
        _ = try TranscodeSession(inputPath: try Media.path(.standard), outputPath: raw, settings: settings).run()
        #expect(try Probe.read(raw).audio == nil && (try Probe.read(raw).video) != nil)
        // Settings made otherwise that keep it are refused when the job runs, and leave nothing.
        try FileManager.default.removeItem(atPath: raw)
        let session = TranscodeSession(inputPath: try Media.path(.standard), outputPath: raw, settings: TranscodeSettings(container: .h264))
        #expect { try session.run() } throws: { error in
            let media = error as? MediaError
            return media?.code == "invalid_settings" && media?.message.hasPrefix("audio:") == true
        }
        #expect(Media.files(in: folder).isEmpty)
    }
}
