import Foundation

/// The layout of a scrub-preview storyboard: tiles of equal size in rows of `columns`, and the WebVTT track whose
/// cues map spans of the timeline to tiles (`storyboard.jpg#xywh=x,y,w,h`, the form Vidstack, Plyr, video.js
/// plugins and JW Player read). Cues follow each other without gaps from 0 to the duration.
struct Storyboard: Codable, Equatable {
    static let imageName = "storyboard.jpg"
    static let cuesName = "storyboard.vtt"
    /// Tiles in a row of the sprite.
    static let maxColumns = 10

    var tileWidth: Int
    var tileHeight: Int
    /// Where each tile's span starts, in seconds, in order.
    var starts: [Double]

    var columns: Int { min(Self.maxColumns, max(1, starts.count)) }
    var rows: Int { (starts.count + columns - 1) / columns }
    var width: Int { columns * tileWidth }
    var height: Int { rows * tileHeight }

    /// Top-left corner of tile `index` in the sprite, in pixels.
    func origin(of index: Int) -> (x: Int, y: Int) {
        (index % columns * tileWidth, index / columns * tileHeight)
    }

    /// The WebVTT track: tile `i` from its start to the next tile's start, the last one until `duration` seconds.
    func cues(duration: Double) -> String {
        var text = "WEBVTT\n"
        for (index, start) in starts.enumerated() {
            let end = index + 1 < starts.count ? starts[index + 1] : max(duration, start)
            let (x, y) = origin(of: index)
            text += "\n\(Self.timestamp(start)) --> \(Self.timestamp(end))\n"
            text += "\(Self.imageName)#xywh=\(x),\(y),\(tileWidth),\(tileHeight)\n"
        }
        return text
    }

    /// Writes the WebVTT track (`storyboard.vtt`) into the folder `root`, beside the sprite.
    func writeCues(into root: String, duration: Double) throws(MediaError) {
        guard FileManager.default.createFile(atPath: root + "/" + Self.cuesName, contents: Data(cues(duration: duration).utf8)) else {
            throw MediaError(code: "output_failed", message: "Writing \(Self.cuesName) failed.")
        }
    }

    /// `hh:mm:ss.mmm`.
    static func timestamp(_ seconds: Double) -> String {
        let milliseconds = Int((max(0, seconds) * 1000).rounded())
        let hours = milliseconds / 3_600_000, minutes = milliseconds / 60_000 % 60
        let secs = milliseconds / 1000 % 60, millis = milliseconds % 1000
        return String(format: "%02d:%02d:%02d.%03d", hours, minutes, secs, millis)
    }
}
