import CFFmpeg
import Foundation
@testable import Pipeline
import Testing
import TestSupport

/// Closed captions carried in the video (CEA-608/708 in ATSC A/53 user data, as broadcast recordings and many
/// camera files have them) come out with every picture, whatever the output's size: they survived only when a
/// picture went to the encoder untouched, so a ladder's rungs had them or not by their size.
@Suite struct CaptionTests {
    /// A 320×240 H.264 transport stream of 50 pictures at 25 fps, each with a caption pair in its A/53 user data.
    /// The ffmpeg CLI cannot make one (no caption encoder): written here through the library, as a broadcast
    /// encoder writes them.
    private func captionedSource(captionedUpTo captioned: Int = 50) throws -> String {
        let path = try Media.scratch().appendingPathComponent("captioned.ts").path
        let codec = try #require(avcodec_find_encoder_by_name("libx264"))
        var encoder = avcodec_alloc_context3(codec)
        defer { avcodec_free_context(&encoder) }
        let context = try #require(encoder)
        context.pointee.width = 320
        context.pointee.height = 240
        context.pointee.pix_fmt = AV_PIX_FMT_YUV420P
        context.pointee.time_base = AVRational(num: 1, den: 25)
        context.pointee.framerate = AVRational(num: 25, den: 1)
        av_opt_set(context.pointee.priv_data, "preset", "ultrafast", 0)
        var format: UnsafeMutablePointer<AVFormatContext>?
        #expect(avformat_alloc_output_context2(&format, nil, "mpegts", path) >= 0)
        let output = try #require(format)
        defer { avformat_free_context(output) }
        let stream = try #require(avformat_new_stream(output, nil))
        #expect(avcodec_open2(context, codec, nil) == 0)
        #expect(avcodec_parameters_from_context(stream.pointee.codecpar, context) >= 0)
        stream.pointee.time_base = context.pointee.time_base
        #expect(avio_open(&output.pointee.pb, path, AVIO_FLAG_WRITE) >= 0)
        #expect(avformat_write_header(output, nil) >= 0)
        var packet = av_packet_alloc()
        defer { av_packet_free(&packet) }
        for index in 0...50 {
            var frame: UnsafeMutablePointer<AVFrame>?
            if index < 50 {
                frame = av_frame_alloc()
                let picture = try #require(frame)
                picture.pointee.width = 320
                picture.pointee.height = 240
                picture.pointee.format = AV_PIX_FMT_YUV420P.rawValue
                #expect(av_frame_get_buffer(picture, 0) == 0)
                for plane in 0..<3 {
                    let value: Int32 = plane == 0 ? Int32(index * 5 % 256) : 128
                    memset(tc_frame_data(picture, Int32(plane)), value, Int(tc_frame_linesize(picture, Int32(plane))) * (plane == 0 ? 240 : 120))
                }
                picture.pointee.pts = Int64(index)
                // Four triplets, each a cc_valid/type byte and a byte pair: a CEA-608 field-1 and field-2 pair and a
                // CEA-708 one of this picture's own (its index in them), then padding (not valid).
                let triplets: [UInt8] = [0xFC, UInt8(index), 0x80, 0xFD, 0x40, UInt8(index), 0xFF, 0x20, UInt8(index), 0xFA, 0x00, 0x00]
                if index < captioned {
                    let captions = try #require(av_frame_new_side_data(picture, AV_FRAME_DATA_A53_CC, triplets.count))
                    triplets.withUnsafeBufferPointer { captions.pointee.data.update(from: $0.baseAddress!, count: triplets.count) }
                }
            }
            #expect(avcodec_send_frame(context, frame) >= 0)
            av_frame_free(&frame)
            while avcodec_receive_packet(context, packet) == 0 {
                av_packet_rescale_ts(packet, context.pointee.time_base, stream.pointee.time_base)
                packet?.pointee.stream_index = 0
                #expect(av_interleaved_write_frame(output, packet) >= 0)
            }
        }
        #expect(av_write_trailer(output) >= 0)
        avio_closep(&output.pointee.pb)
        return path
    }

    /// How many video pictures of `path` carry captions, as ffprobe decodes them.
    private func captionedPictures(_ path: String) throws -> Int {
        let listed = try Shell.run("ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "frame_side_data=side_data_type",
                                               "-of", "csv=p=0", path]).stdout
        return listed.split(separator: "\n").filter { $0.contains("Closed Captions") }.count
    }

    /// The valid caption triplets of each of `path`'s pictures that has any, in order, as FFmpeg's caption reader
    /// takes them out of the pictures (padding left out).
    private func captionTriplets(_ path: String) throws -> [[[UInt8]]] {
        let stream = try Media.scratch().appendingPathComponent("captions.bin").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "movie=\(path)[out0+subcc]", "-map", "0:1", "-c", "copy", "-f", "data", stream])
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: stream)))
        let sizes = try Shell.check("ffprobe", ["-v", "error", "-f", "lavfi", "-i", "movie=\(path)[out0+subcc]", "-select_streams", "s",
                                                "-show_entries", "packet=size", "-of", "csv=p=0"])
        var pictures: [[[UInt8]]] = [], offset = 0
        for size in sizes.split(separator: "\n").compactMap({ Int($0.trimmingCharacters(in: .whitespaces)) }) {
            let picture = stride(from: offset, to: offset + size - 2, by: 3).map { Array(bytes[$0..<$0 + 3]) }
            pictures.append(picture.filter { $0[0] & 0x04 != 0 })
            offset += size
        }
        #expect(offset == bytes.count, "the packets hold the stream")
        return pictures
    }

    /// Whether `kept` appears in `sent` in the same order (some left out).
    private func inOrder(_ kept: [[UInt8]], of sent: [[UInt8]]) -> Bool {
        var next = sent.makeIterator()
        return kept.allSatisfy { triplet in
            while let candidate = next.next() { if candidate == triplet { return true } }
            return false
        }
    }

    /// At a lower frame rate the captions of the pictures left out go with the next picture kept, as FFmpeg's
    /// `ccrepack` puts them: CEA-608's pairs first, then CEA-708's, each in the order sent. They went with their
    /// pictures, and a halved rate lost every other picture's captions (garbled). At a much lower rate a picture
    /// carries at most 31 triplets (`cc_count` has 5 bits): CEA-708's give way first.
    @Test func captionsOfPicturesLeftOutGoWithTheNextOne() throws {
        let source = try captionedSource()
        let sent = try captionTriplets(source).flatMap { $0 }
        let is608 = { (triplet: [UInt8]) in triplet[0] & 0x03 < 2 }
        #expect(sent.count == 150, "50 pictures of three valid triplets")
        let folder = try Media.scratch()
        let half = folder.appendingPathComponent("half.mp4").path
        _ = try TranscodeSession(inputPath: source, outputPath: half,
                                 settings: try TranscodeSettings.parse(Data(#"{"video": {"frameRate": 12.5}}"#.utf8))).run()
        let halved = try captionTriplets(half)
        #expect(halved.count >= 25, "every picture of the halved rate")
        let all = halved.flatMap { $0 }
        #expect(all.filter(is608) == sent.filter(is608) && all.filter { !is608($0) } == sent.filter { !is608($0) },
                "every valid triplet, each kind in the order sent")
        #expect(halved.allSatisfy { picture in picture.drop { is608($0) }.allSatisfy { !is608($0) } }, "CEA-608's first in each picture")
        let slow = folder.appendingPathComponent("slow.mp4").path
        _ = try TranscodeSession(inputPath: source, outputPath: slow,
                                 settings: try TranscodeSettings.parse(Data(#"{"video": {"frameRate": 1}}"#.utf8))).run()
        let pictures = try captionTriplets(slow)
        let kept = pictures.flatMap { $0 }
        #expect(pictures.allSatisfy { $0.count <= 31 } && kept.count > 31, "at most 31 to a picture: \(pictures.map(\.count))")
        #expect(inOrder(kept.filter(is608), of: sent.filter(is608)) && inOrder(kept.filter { !is608($0) }, of: sent.filter { !is608($0) }),
                "each kind in the order sent")
    }

    /// Each picture's captions, and only its own (the last ten have none: none are carried on to them).
    @Test func captionsGoWithEveryPictureWhateverTheOutputSize() throws {
        let source = try captionedSource(captionedUpTo: 40)
        #expect(try captionedPictures(source) == 40)
        let folder = try Media.scratch()
        for (name, settings) in [("same", "{}"), ("smaller", #"{"video": {"width": 160}}"#), ("cropped", #"{"filters": {"video": {"crop": {"x": 0, "y": 0, "width": 240, "height": 240}}}}"#)] {
            let output = folder.appendingPathComponent("\(name).mp4").path
            _ = try TranscodeSession(inputPath: source, outputPath: output, settings: try TranscodeSettings.parse(Data(settings.utf8))).run()
            #expect(try captionedPictures(output) == 40, "\(name)")
        }
        // Every rung of a ladder, the one at the source's size and the smaller one alike.
        let ladder = folder.appendingPathComponent("ladder").path
        let settings = #"{"container": "hls", "renditions": [{"video": {"height": 240}}, {"video": {"height": 120}}]}"#
        _ = try TranscodeSession(inputPath: source, outputDirectory: ladder, settings: try TranscodeSettings.parse(Data(settings.utf8))).run()
        for rung in ["240p", "120p"] {
            let playlist = ladder + "/\(rung)/index.m3u8"
            #expect(FileManager.default.fileExists(atPath: playlist), "\(rung)")
            #expect(try captionedPictures(playlist) == 40, "\(rung)")
        }
    }
}
