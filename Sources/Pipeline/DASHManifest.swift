import CFFmpeg
import Foundation

/// A static MPEG-DASH manifest (ISO/IEC 23009-1, live profile) over the same CMAF segments as the HLS playlists:
/// one adaptation set for the video renditions, one for the audio, each representation a `SegmentTemplate` with a
/// `SegmentTimeline` of the segments' real times.
enum DASHManifest {
    static let name = "manifest.mpd"

    static func render(video: [LadderTrack], audio: LadderTrack?) -> String {
        // Until the last track ends on the shared timeline (a video that starts a second after its audio ends a
        // second later than its length says), and at least as long as any track's media (audio primed before zero).
        let duration = ([audio].compactMap { $0 } + video).map { max($0.end, $0.duration) }.max() ?? 0
        let longest = ([audio].compactMap { $0 } + video).flatMap { track in track.segments.map { track.seconds($0.duration) } }.max() ?? 1
        var lines = [
            #"<?xml version="1.0" encoding="UTF-8"?>"#,
            #"<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" type="static" "#
                + #"mediaPresentationDuration="\#(period(duration))" minBufferTime="\#(period(max(2, longest)))">"#,
            #"  <Period id="0" start="PT0S">"#,
        ]
        if !video.isEmpty {
            let widest = video.compactMap(\.picture).map(\.width).max() ?? 0
            let tallest = video.compactMap(\.picture).map(\.height).max() ?? 0
            lines.append(#"    <AdaptationSet id="0" contentType="video" mimeType="video/mp4" segmentAlignment="\#(aligned(video))" "#
                         + #"startWithSAP="1" maxWidth="\#(widest)" maxHeight="\#(tallest)">"#)
            // HDR kept as it is (`video.color.hdr: keep`; one decode, so every rendition alike), as DASH-IF's
            // guidelines say it: PQ only for players that know it, HLG also plays as SDR.
            let transfer = #"schemeIdUri="urn:mpeg:mpegB:cicp:TransferCharacteristics""#
            switch video.compactMap(\.picture).first?.videoRange {
            case "PQ": lines.append(#"      <EssentialProperty \#(transfer) value="16"/>"#)
            case "HLG": lines.append(#"      <SupplementalProperty \#(transfer) value="18"/>"#)
            default: break
            }
            for track in video {
                guard let picture = track.picture else { continue }
                lines.append(#"      <Representation id="\#(escape(track.folder))" bandwidth="\#(track.peakBitRate)" "#
                             + #"codecs="\#(track.codecs)" width="\#(picture.width)" height="\#(picture.height)" "#
                             + #"frameRate="\#(picture.frameRate.num)/\#(picture.frameRate.den)" sar="1:1">"#)
                lines += template(track, indent: "        ")
                lines.append("      </Representation>")
            }
            lines.append("    </AdaptationSet>")
        }
        if let audio {
            lines.append(#"    <AdaptationSet id="1" contentType="audio" mimeType="audio/mp4" segmentAlignment="true" startWithSAP="1">"#)
            lines.append(#"      <Representation id="\#(escape(audio.folder))" bandwidth="\#(audio.peakBitRate)" "#
                         + #"codecs="\#(audio.codecs)" audioSamplingRate="\#(audio.sound?.sampleRate ?? 0)">"#)
            lines.append(#"        <AudioChannelConfiguration schemeIdUri="urn:mpeg:dash:23003:3:audio_channel_configuration:2011" "#
                         + #"value="\#(audio.sound?.channels ?? 2)"/>"#)
            lines += template(audio, indent: "        ")
            lines.append("      </Representation>")
            lines.append("    </AdaptationSet>")
        }
        lines += ["  </Period>", "</MPD>"]
        return lines.joined(separator: "\n") + "\n"
    }

    /// Whether the video renditions' segments start at the same times (within a millisecond), so that a player may
    /// switch between them at any segment: renditions at other frame rates place their first picture, and so their
    /// segments, up to a frame apart (10 fps beside 29.97: 25 ms), which the manifest must not call aligned.
    private static func aligned(_ video: [LadderTrack]) -> Bool {
        guard let first = video.first else { return true }
        let starts = { (track: LadderTrack) in track.segments.map { track.seconds($0.start - track.offset) } }
        let reference = starts(first)
        return video.dropFirst().allSatisfy { track in
            let own = starts(track)
            return own.count == reference.count && zip(own, reference).allSatisfy { abs($0 - $1) < 0.001 }
        }
    }

    /// The segment template of a track: its files by number, and the timeline of their start times and lengths
    /// (runs of equal lengths folded into `r`).
    private static func template(_ track: LadderTrack, indent: String) -> [String] {
        let folder = escape(track.folder)
        var lines = [indent + #"<SegmentTemplate timescale="\#(track.timescale)" initialization="\#(folder)/\#(SegmentedOutput.initName)" "#
            + #"media="\#(folder)/segment_$Number%05d$.m4s" startNumber="1" presentationTimeOffset="\#(track.offset)">"#, indent + "  <SegmentTimeline>"]
        var index = 0
        let segments = track.segments
        while index < segments.count {
            var repeats = 0
            while index + repeats + 1 < segments.count,
                  segments[index + repeats + 1].duration == segments[index].duration,
                  segments[index + repeats + 1].start == segments[index + repeats].start + segments[index].duration {
                repeats += 1
            }
            let run = repeats > 0 ? #" r="\#(repeats)""# : ""
            lines.append(indent + #"    <S t="\#(segments[index].start)" d="\#(segments[index].duration)"\#(run)/>"#)
            index += repeats + 1
        }
        lines += [indent + "  </SegmentTimeline>", indent + "</SegmentTemplate>"]
        return lines
    }

    /// An ISO 8601 duration in seconds, as the MPD wants it.
    private static func period(_ seconds: Double) -> String { String(format: "PT%.3fS", seconds) }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "<", with: "&lt;")
    }
}
