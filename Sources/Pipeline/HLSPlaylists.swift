import CFFmpeg
import Foundation

/// The HLS text of a ladder (RFC 8216 and Apple's HLS Authoring Specification): the master playlist, a media
/// playlist per track and an I-frame playlist per video track, from what the segments hold. FFmpeg's hls muxer
/// writes no measured bandwidth and no I-frame playlist, hence our own.
enum HLSPlaylists {
    /// Version 7: fragmented MP4 segments (`EXT-X-MAP` in every playlist, I-frame playlists included).
    static let version = 7
    static let audioGroup = "audio"
    static let mediaName = "index.m3u8"
    static let iFramesName = "iframes.m3u8"

    /// The master playlist: an audio group (when there is audio), a variant per video track with its measured peak
    /// and average bit rates (its audio's included), and an I-frame variant per video track. Without video, the
    /// audio alone is the one variant.
    static func master(video: [LadderTrack], audio: LadderTrack?) -> String {
        var lines = ["#EXTM3U", "#EXT-X-VERSION:\(version)", "#EXT-X-INDEPENDENT-SEGMENTS"]
        if let audio, !video.isEmpty {
            let channels = audio.sound.map { ",CHANNELS=\"\($0.channels)\"" } ?? ""
            lines.append("#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"\(audioGroup)\",NAME=\"Audio\",DEFAULT=YES,AUTOSELECT=YES\(channels),"
                         + "URI=\"\(audio.folder)/\(mediaName)\"")
        }
        if video.isEmpty, let audio {
            lines.append("#EXT-X-STREAM-INF:BANDWIDTH=\(audio.peakBitRate),AVERAGE-BANDWIDTH=\(audio.averageBitRate),"
                         + "CODECS=\"\(audio.codecs)\"")
            lines.append("\(audio.folder)/\(mediaName)")
        }
        for track in video {
            guard let picture = track.picture else { continue }
            var attributes = [
                "BANDWIDTH=\(track.peakBitRate + (audio?.peakBitRate ?? 0))",
                "AVERAGE-BANDWIDTH=\(track.averageBitRate + (audio?.averageBitRate ?? 0))",
                "CODECS=\"\([track.codecs, audio?.codecs].compactMap { $0 }.joined(separator: ","))\"",
                "RESOLUTION=\(picture.width)x\(picture.height)",
                "FRAME-RATE=\(String(format: "%.3f", av_q2d(picture.frameRate)))",
            ]
            if let range = picture.videoRange { attributes.append("VIDEO-RANGE=\(range)") }
            if audio != nil { attributes.append("AUDIO=\"\(audioGroup)\"") }
            lines.append("#EXT-X-STREAM-INF:" + attributes.joined(separator: ","))
            lines.append("\(track.folder)/\(mediaName)")
        }
        for track in video {
            guard let picture = track.picture else { continue }
            lines.append("#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=\(track.iFramePeakBitRate),"
                         + "AVERAGE-BANDWIDTH=\(track.iFrameAverageBitRate),CODECS=\"\(track.codecs)\","
                         + "RESOLUTION=\(picture.width)x\(picture.height)"
                         + (picture.videoRange.map { ",VIDEO-RANGE=\($0)" } ?? "") + ",URI=\"\(track.folder)/\(iFramesName)\"")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A track's media playlist (in its folder: URIs are relative to it).
    static func media(_ track: LadderTrack) -> String {
        let durations = track.segmentDurations
        var lines = header(targetDuration: track.targetDuration)
        for (segment, duration) in zip(track.segments, durations) {
            lines.append("#EXTINF:\(String(format: "%.5f", duration)),")
            lines.append(URL(fileURLWithPath: segment.path).lastPathComponent)
        }
        lines.append("#EXT-X-ENDLIST")
        return lines.joined(separator: "\n") + "\n"
    }

    /// A video track's I-frame playlist: each key frame as a byte range (its moof and the frame) of its segment.
    static func iFrames(_ track: LadderTrack) -> String {
        let frames = track.iFrames
        var lines = header(targetDuration: LadderTrack.targetDuration(frames.map(\.duration)), iFramesOnly: true)
        for item in frames {
            lines.append("#EXTINF:\(String(format: "%.5f", item.duration)),")
            lines.append("#EXT-X-BYTERANGE:\(item.frame.length)@\(item.frame.offset)")
            lines.append(URL(fileURLWithPath: item.segment.path).lastPathComponent)
        }
        lines.append("#EXT-X-ENDLIST")
        return lines.joined(separator: "\n") + "\n"
    }

    /// A playlist's first lines, with `targetDuration`: the ladder's for a media playlist (`LadderTrack.targetDuration`),
    /// an I-frame playlist's own (the rule of one target leaves them out).
    private static func header(targetDuration: Int, iFramesOnly: Bool = false) -> [String] {
        var lines = [
            "#EXTM3U", "#EXT-X-VERSION:\(version)", "#EXT-X-TARGETDURATION:\(targetDuration)",
            "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:VOD", "#EXT-X-INDEPENDENT-SEGMENTS",
        ]
        if iFramesOnly { lines.append("#EXT-X-I-FRAMES-ONLY") }
        lines.append("#EXT-X-MAP:URI=\"\(SegmentedOutput.initName)\"")
        return lines
    }
}
