import Foundation
import Pipeline
import Testing
import TestSupport

/// Opening inputs: tracks, and what happens with broken, cut-short and hostile files.
@Suite struct MediaReaderTests {
    /// A read its token interrupts is a cancel, not the end of the input: taken for the end, a canceled pass went on to
    /// finish its output there (a checkpoint's video recorded complete at the interruption), or, where the file says
    /// how long it is, failed the job as cut short instead of canceling it.
    @Test func aReadTheTokenInterruptsIsACancelNotTheEnd() throws {
        let token = CancellationToken()
        let reader = try MediaReader(path: try Media.path(.standard), cancellation: token)
        for track in reader.tracks { reader.addPassthroughOutput(track: track.index) }
        #expect(try reader.nextSample() != nil)
        token.cancel()
        #expect(throws: MediaError.canceled) {
            while try reader.nextSample() != nil {}
        }
    }

    @Test func tracksDescribeTheSource() throws {
        let tracks = try TranscodeSession.probe(path: try Media.path(.standard))
        let video = try #require(tracks.first { $0.mediaType == .video })
        #expect(video.codec == "h264" && video.width == 640 && video.height == 360 && video.frameRate == 30)
        #expect(video.sampleAspectRatio == "1:1" && video.rotation == 0)
        let audio = try #require(tracks.first { $0.mediaType == .audio })
        #expect(audio.codec == "aac" && audio.sampleRate == 48_000 && audio.channels == 2 && audio.channelLayout == "stereo")
        #expect(abs((audio.duration ?? 0) - 4) < 0.1)
        #expect(video.hdr == nil && video.coverArt == nil)
    }

    /// An MP3's album cover is listed as what it is, not as a video at the container's 90 kHz clock, and an HDR
    /// track says so.
    @Test func coverArtAndHDRAreNamed() throws {
        let folder = try Media.scratch()
        let song = folder.appendingPathComponent("song.mp3").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "sine=d=2", "-f", "lavfi", "-i", "color=red:s=300x300:d=1", "-map", "0", "-map", "1",
                          "-frames:v", "1", "-c:a", "libmp3lame", "-c:v", "mjpeg", "-disposition:v", "attached_pic", song])
        let tracks = try TranscodeSession.probe(path: song)
        let cover = try #require(tracks.first { $0.mediaType == .video })
        #expect(cover.coverArt == true && cover.frameRate == nil && cover.width == 300, "\(cover)")
        #expect(try #require(tracks.first { $0.mediaType == .audio }).coverArt == nil)
        // It is not transcoded: the result is the sound alone.
        let output = folder.appendingPathComponent("song.mp4").path
        let result = try TranscodeSession(inputPath: song, outputPath: output, settings: TranscodeSettings()).run()
        #expect(result.tracks.map(\.mediaType) == [.audio])

        let pq = try #require(try TranscodeSession.probe(path: try Media.hdrPatches(.pq)).first)
        let hlg = try #require(try TranscodeSession.probe(path: try Media.hdrPatches(.hlg)).first)
        #expect(pq.hdr == "PQ" && hlg.hdr == "HLG" && pq.coverArt == nil)
    }

    @Test func rotationAndSampleAspectAreRead() throws {
        let rotated = try #require(try TranscodeSession.probe(path: try Media.path(.rotated90)).first)
        // ffmpeg 5.1 stores `rotate=90` as a matrix that players turn a quarter counter-clockwise.
        #expect(rotated.rotation == 270)
        let opposite = try #require(try TranscodeSession.probe(path: try Media.path(.rotated270)).first)
        #expect(opposite.rotation == 90)
        let anamorphic = try #require(try TranscodeSession.probe(path: try Media.path(.anamorphic)).first)
        #expect(anamorphic.sampleAspectRatio == "16:15")
        #expect(anamorphic.displaySize?.width == 768)
    }

    private func failure(_ input: String, folder: URL) throws -> MediaError? {
        let session = TranscodeSession(inputPath: input, outputPath: folder.appendingPathComponent("out.mp4").path,
                                       settings: TranscodeSettings())
        do {
            _ = try session.run()
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: [0.3, 0.6, 0.9])
    func truncatedInputFailsInsteadOfComingOutShorter(fraction: Double) throws {
        let folder = try Media.scratch()
        let input = try Media.truncated(try Media.path(.tenSeconds), fraction: fraction, into: folder)
        let error = try #require(try failure(input, folder: folder))
        #expect(error.code == "input_truncated", "\(error)")
        #expect(error.message.contains("cut short"))
        #expect(Media.files(in: folder) == [URL(fileURLWithPath: input).lastPathComponent], "no output is left")
    }

    @Test func matroskaCutShortIsTruncated() throws {
        let folder = try Media.scratch()
        let input = try Media.truncated(try Media.path(.long), fraction: 0.5, into: folder)
        let error = try #require(try failure(input, folder: folder))
        #expect(error.code == "input_truncated", "\(error)")
        #expect(Media.files(in: folder).count == 1)
    }

    @Test func indexLastMP4CutShortIsRefusedAsUnreadable() throws {
        let folder = try Media.scratch()
        let full = folder.appendingPathComponent("index-last.mp4").path
        try Media.ffmpeg(["-i", try Media.path(.standard), "-c", "copy", full])
        let input = try Media.truncated(full, fraction: 0.7, into: folder)
        let error = try #require(try failure(input, folder: folder))
        #expect(error.code == "unsupported_format" && error.message.contains("not a media file we can read"), "\(error)")
        #expect(Media.files(in: folder).count == 2)
    }

    /// A format FFmpeg knows but the list of demuxers leaves out is refused by its name: it was "not a media file
    /// we can read (Invalid argument)", which sent its owner looking for a broken file. A raw H.264 stream too (no
    /// timestamps, no seeking, no duration: a resumed checkpoint went on from the stream's end).
    @Test func aKnownFormatOutsideTheListIsNamed() throws {
        let folder = try Media.scratch()
        let mxf = folder.appendingPathComponent("clip.mxf").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=1", "-c:v", "mpeg2video", mxf])
        let error = try #require(try failure(mxf, folder: folder))
        #expect(error.code == "unsupported_format" && error.message.contains("(mxf)") && error.message.contains("not an accepted container"),
                "\(error)")
        let raw = folder.appendingPathComponent("clip.h264").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=1", "-c:v", "libx264", "-preset", "ultrafast",
                          "-pix_fmt", "yuv420p", "-f", "h264", raw])
        let rawError = try #require(try failure(raw, folder: folder))
        #expect(rawError.code == "unsupported_format" && rawError.message.contains("(h264)"), "\(rawError)")
    }

    /// An MP4 whose sample-size table states a gigabyte (or 200 MiB) for one sample is damaged, and said so: the
    /// demuxer's failure to hold it read as a memory shortage, and the job was told to raise its memory limit (or,
    /// read past the end, as a file cut short, to be uploaded again).
    @Test(arguments: [UInt32(0x3D00_0164), UInt32(0x0C80_0000)])
    func aSampleLargerThanTheFileIsDamageNotAMemoryShortage(size: UInt32) throws {
        let folder = try Media.scratch()
        let clip = folder.appendingPathComponent("clip.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", clip])
        var bytes = try Data(contentsOf: URL(fileURLWithPath: clip))
        let table = try #require(bytes.firstRange(of: Data("stsz".utf8))).lowerBound
        // Its third entry (after the version, the common size and the count).
        bytes.replaceSubrange(table + 16 + 8 ..< table + 16 + 12, with: withUnsafeBytes(of: size.bigEndian) { Array($0) })
        let damaged = folder.appendingPathComponent("damaged.mp4").path
        try bytes.write(to: URL(fileURLWithPath: damaged))
        let error = try #require(try failure(damaged, folder: folder))
        #expect(error.code == "unreadable_input" && error.message.contains("\(size) bytes") && error.message.contains("damaged"), "\(error)")
    }

    @Test func randomBytesAreRefused() throws {
        let folder = try Media.scratch()
        let input = try Media.randomBytes(200_000, into: folder)
        let error = try #require(try failure(input, folder: folder))
        #expect(error.code == "unsupported_format", "\(error)")
        #expect(Media.files(in: folder) == ["random.mp4"])
    }

    @Test func emptyAndMissingFilesAreRefused() throws {
        let folder = try Media.scratch()
        let empty = folder.appendingPathComponent("empty.mov").path
        _ = FileManager.default.createFile(atPath: empty, contents: Data())
        #expect(try failure(empty, folder: folder)?.code == "unsupported_format")
        #expect(try failure(folder.appendingPathComponent("missing.mp4").path, folder: folder)?.code == "input_not_found")
        // A folder, or a file this process may not read, is no fault of media: said so, not "not a media file".
        let inner = folder.appendingPathComponent("inner")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: false)
        let folderError = try #require(try failure(inner.path, folder: folder))
        #expect(folderError.code == "input_unreadable" && folderError.message.contains("is a folder"), "\(folderError)")
    }

    @Test func playlistsAreNeverFollowed() throws {
        let folder = try Media.scratch()
        let secret = try Media.path(.standard)
        let playlist = folder.appendingPathComponent("list.m3u8").path
        try "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:4,\nfile://\(secret)\n#EXT-X-ENDLIST\n"
            .write(toFile: playlist, atomically: true, encoding: .utf8)
        #expect(try failure(playlist, folder: folder)?.code == "unsupported_format")
        let concat = folder.appendingPathComponent("list.txt").path
        try "ffconcat version 1.0\nfile '\(secret)'\n".write(toFile: concat, atomically: true, encoding: .utf8)
        #expect(try failure(concat, folder: folder)?.code == "unsupported_format")
    }
}
