import CFFmpeg
import Foundation

/// Takes still pictures from the decoded video as it goes by (no second pass over the file): a thumbnail at each
/// point of its grid (`thumbnails/00001.jpg`, ...), a poster at the output's size, and a storyboard sprite of the
/// thumbnails with its WebVTT cues. Runs on its own thread behind a `FrameQueue`, like an encode side.
///
/// Pictures already in its folder (an interrupted attempt's, in a checkpoint; a new output folder is empty) are
/// kept and not taken again: a resumed pass only needs to read from `earliestNeeded` on.
final class Thumbnailer: FrameConsumer {
    static let folder = "thumbnails"
    static let posterName = "poster.jpg"
    /// Most thumbnails a job writes.
    static let maxThumbnails = 10_000
    /// Why thumbnails every `interval` s over `duration` s (0: unknown) are too many, or nil.
    static func problem(interval: Double, duration: Double) -> String? {
        let expected = duration > 0 ? Int(duration / interval) + 1 : 0
        guard expected > maxThumbnails else { return nil }
        return "\(expected) thumbnails over \(Int(duration)) s; at most \(maxThumbnails), choose a longer interval."
    }

    /// Most tiles a storyboard holds; past it every other tile is dropped and the spans double.
    static let maxTiles = 400
    /// A storyboard tile's longer side at most, pixels: larger thumbnails are shrunk for it. A scrub preview needs no
    /// more, and 400 tiles of 1280×720 held 550 MB until the sprite was written (1152×2048 ones made a sprite past
    /// JPEG's 65,500 lines, which failed the job at its end).
    static let maxTileSide = 320

    private let root: String
    private let timeline: Timeline
    /// Seconds between thumbnails; nil when only a poster is asked for.
    private let interval: Double?
    private let limit: Int
    /// Thumbnails written so far (`00001.jpg` up to this number).
    private(set) var taken = 0
    private let converter: VideoConverter?
    private let jpeg: JPEGEncoder?
    private let posterTime: Double?
    private let posterConverter: VideoConverter?
    private let posterJPEG: JPEGEncoder?
    private(set) var posterTaken = false
    /// On a resumed pass that seeked: the latest output time its first picture may have; a later one means the seek
    /// went past pictures still to take.
    private var firstFrameLimit: Double?
    /// The latest picture, a reference of its own that no conversion touched (converting sets the cropping of the
    /// reference it is given). It is on screen until the next one: a point of the grid or a poster's time before
    /// the next picture is taken from it, and so are a poster and counted thumbnails past the last picture.
    private var latest: FrameQueue.Item?
    /// `count` thumbnails were asked for: every one is written, those past the last picture from it.
    private let counted: Bool
    /// The storyboard's tiles (references to converted thumbnails) and how many thumbnails each stands for.
    private let wantsStoryboard: Bool
    private var tiles: [Frame] = []
    private var tileStep = 1
    private var tileStarts: [Double] = []
    private let tileScaler = TileScaler(maxSide: Thumbnailer.maxTileSide)
    /// The storyboard's layout, once its sprite is written.
    private(set) var storyboard: Storyboard?
    /// For a source whose video keeps HDR: the pictures taken are tone-mapped first (JPEG has no HDR). Only those
    /// taken go through it, each on its own (the chain keeps nothing from one picture to the next).
    private let toneMapping: ToneMapping?
    /// The mapping's graph, made for pictures of one shape (made again for another).
    private var mapper: (graph: FilterGraph, shape: (width: Int32, height: Int32, format: Int32))?

    /// - Parameters:
    ///   - thumbnail: the encoding a thumbnail is converted with (its size, upright, full-range BT.601).
    ///   - poster: the same at the output's size.
    ///   - expectedDuration: seconds the output should last (0 when unknown), for `count` and a poster fraction.
    ///   - toneMapping: maps the pictures taken to SDR (a source whose video keeps HDR); `sourceColors` are then
    ///     the mapping's output.
    init(settings: ThumbnailSettings, root: String, timeline: Timeline, sourceColors: ColorTags, toneMapping: ToneMapping? = nil,
         thumbnail: VideoEncoding, poster: VideoEncoding, expectedDuration: Double) throws(MediaError) {
        self.root = root
        self.toneMapping = toneMapping
        self.timeline = timeline
        if let count = settings.count {
            guard expectedDuration > 0 else {
                throw MediaError(code: "invalid_settings",
                                 message: "thumbnails.count: the input does not declare its duration, so thumbnails cannot be spread over it; give an interval instead.")
            }
            interval = expectedDuration / Double(count)
            limit = count
            counted = true
        } else if let seconds = settings.interval {
            if let problem = Self.problem(interval: seconds, duration: expectedDuration) {
                throw MediaError(code: "invalid_settings", message: "thumbnails.interval: \(problem)")
            }
            interval = seconds
            limit = Self.maxThumbnails
            counted = false
        } else {
            interval = nil
            limit = 0
            counted = false
        }
        if interval != nil {
            converter = VideoConverter(encoding: thumbnail, sourceColors: sourceColors)
            jpeg = try JPEGEncoder(width: thumbnail.width, height: thumbnail.height)
            try Self.makeFolder(root + "/" + Self.folder)
        } else {
            converter = nil
            jpeg = nil
        }
        switch settings.poster {
        case .fraction(let fraction)?: posterTime = fraction * expectedDuration
        case .time(let seconds)?: posterTime = seconds
        case nil: posterTime = nil
        }
        if posterTime != nil {
            posterConverter = VideoConverter(encoding: poster, sourceColors: sourceColors)
            posterJPEG = try JPEGEncoder(width: poster.width, height: poster.height)
        } else {
            posterConverter = nil
            posterJPEG = nil
        }
        wantsStoryboard = settings.storyboard == true && interval != nil
        adoptEarlierPictures()
    }

    /// The earliest output time (seconds) of a picture still to take; nil when none is left but a poster past the
    /// end (taken from the last picture).
    var earliestNeeded: Double? {
        var times: [Double] = []
        if let interval, taken < limit { times.append(Double(taken) * interval) }
        if let posterTime, !posterTaken { times.append(posterTime) }
        return times.min()
    }

    /// Says the input was moved to read from before `seconds` of output (`earliestNeeded`): a first picture after
    /// it throws `VideoEncodeSide.seekMissed` (the pass then reads the input from the start).
    func expectFirstPicture(by seconds: Double) {
        firstFrameLimit = seconds
    }

    func consume(_ item: FrameQueue.Item) throws(MediaError) {
        let pts = item.frame.pointer.pointee.pts
        guard pts != FFmpeg.noPTS else { return }
        let time = FFmpeg.seconds(timeline.convert(pts, from: item.timeBase, to: FFmpeg.timeBaseQ), FFmpeg.timeBaseQ)
        if let firstFrameLimit {
            self.firstFrameLimit = nil
            if time > firstFrameLimit + KeyFrameGrid.tolerance { throw VideoEncodeSide.seekMissed }
        }
        let tolerance = KeyFrameGrid.tolerance
        // Kept before any conversion touches the item; the one before it is what the points up to now show.
        let untouched = earliestNeeded != nil || counted && taken < limit ? try Self.untouched(item) : nil
        let previous = latest
        if let interval, taken < limit, time + tolerance >= Double(taken) * interval {
            // The points before this picture show the one before it, on screen until now: in a gap of a variable
            // rate source (a screen recording, a cut) that is seconds, where this picture was taken for them all.
            if let previous, Double(taken) * interval < time - tolerance {
                try takeThumbnails(of: try Self.untouched(previous)) { Double(taken) * interval < time - tolerance }
            }
            try takeThumbnails(of: item) { time + tolerance >= Double(taken) * interval }
        }
        if let posterTime, !posterTaken, time + tolerance >= posterTime {
            if let previous, posterTime < time - tolerance {
                try writePoster(try Self.untouched(previous))
            } else {
                try writePoster(item)
            }
        }
        latest = untouched
    }

    func finish() throws(MediaError) {
        if let last = latest {
            if posterTime != nil, !posterTaken { try writePoster(try Self.untouched(last)) }
            // Points of a count past the last picture (a song's one cover frame, a video shorter than its sound).
            if counted { try takeThumbnails(of: last) { true } }
        }
        latest = nil
        if wantsStoryboard, let first = tiles.first { try writeSprite(tileWidth: first.width, tileHeight: first.height) }
    }

    /// Writes `item`'s picture as the next thumbnails while `due` says the next point is due (and the limit allows).
    private func takeThumbnails(of item: FrameQueue.Item, while due: () -> Bool) throws(MediaError) {
        guard let interval, let converter, let jpeg, taken < limit, due() else { return }
        let picture = try converter.convert(try mapped(item))
        while taken < limit, due() {
            taken += 1
            try jpeg.write(picture, to: root + "/" + Self.thumbnailPath(taken))
            if wantsStoryboard { try keepTile(picture, start: Double(taken - 1) * interval) }
        }
    }

    /// A reference of its own to `item`'s picture, for a conversion to set the cropping of.
    private static func untouched(_ item: FrameQueue.Item) throws(MediaError) -> FrameQueue.Item {
        FrameQueue.Item(frame: try Frame.reference(to: item.frame), timeBase: item.timeBase)
    }

    /// Writes the storyboard's cues, which end at the output's real `duration` (seconds).
    func writeCues(duration: Double) throws(MediaError) {
        try storyboard?.writeCues(into: root, duration: duration)
    }

    static func thumbnailPath(_ number: Int) -> String { folder + "/" + String(format: "%05d.jpg", number) }

    private func writePoster(_ item: FrameQueue.Item) throws(MediaError) {
        guard let posterConverter, let posterJPEG else { return }
        posterTaken = true
        let picture = try posterConverter.convert(try mapped(item))
        try posterJPEG.write(picture, to: root + "/" + Self.posterName)
    }

    /// The item's picture as a still is taken from: tone-mapped when the source keeps HDR (the graph's own frame,
    /// valid until the next call), else the item's own reference.
    private func mapped(_ item: FrameQueue.Item) throws(MediaError) -> Frame {
        guard let toneMapping else { return item.frame }
        let picture = item.frame.pointer.pointee
        let shape = (width: picture.width, height: picture.height, format: picture.format)
        let graph: FilterGraph
        if let mapper, mapper.shape == shape {
            graph = mapper.graph
        } else {
            graph = try FilterGraph(video: picture, timeBase: item.timeBase, chain: toneMapping.filters)
            mapper = (graph, shape)
        }
        try graph.push(item.frame)
        guard let mappedPicture = try graph.pull() else {
            throw MediaError(code: "filter_failed", message: "Tone mapping a still picture gave no picture.")
        }
        return mappedPicture
    }

    /// Keeps a reference to the converted thumbnail (its converter makes a new picture next time, since this one is
    /// still held), dropping every other tile when there are too many.
    private func keepTile(_ picture: Frame, start: Double) throws(MediaError) {
        guard (taken - 1) % tileStep == 0 else { return }
        let fitted = try tileScaler.fit(picture)
        tiles.append(fitted === picture ? try Frame.reference(to: picture) : fitted)
        tileStarts.append(start)
        if tiles.count > Self.maxTiles {
            tiles = tiles.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
            tileStarts = tileStarts.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
            tileStep *= 2
        }
    }

    /// Lays the tiles out on one picture and writes it as `storyboard.jpg`.
    private func writeSprite(tileWidth: Int, tileHeight: Int) throws(MediaError) {
        let layout = Storyboard(tileWidth: tileWidth, tileHeight: tileHeight, starts: tileStarts)
        let sprite = Frame()
        sprite.pointer.pointee.width = Int32(layout.width)
        sprite.pointer.pointee.height = Int32(layout.height)
        sprite.pointer.pointee.format = AV_PIX_FMT_YUV420P.rawValue
        try FFmpeg.check(av_frame_get_buffer(sprite.pointer, 0), "Allocating the storyboard", code: "out_of_memory")
        for plane in 0..<3 {
            let shift = plane == 0 ? 0 : 1
            guard let data = tc_frame_data(sprite.pointer, Int32(plane)) else { continue }
            let stride = Int(tc_frame_linesize(sprite.pointer, Int32(plane)))
            // Black in full range: luma 0, chroma neutral.
            data.update(repeating: plane == 0 ? 0 : 128, count: stride * (layout.height >> shift))
            for (index, tile) in tiles.enumerated() {
                guard let source = tc_frame_data(tile.pointer, Int32(plane)) else { continue }
                let sourceStride = Int(tc_frame_linesize(tile.pointer, Int32(plane)))
                let (x, y) = layout.origin(of: index)
                for row in 0..<(tileHeight >> shift) {
                    (data + (y >> shift + row) * stride + (x >> shift))
                        .update(from: source + row * sourceStride, count: tileWidth >> shift)
                }
            }
        }
        let encoder = try JPEGEncoder(width: layout.width, height: layout.height)
        try encoder.write(sprite, to: root + "/" + Storyboard.imageName)
        tiles.removeAll()
        storyboard = layout
    }

    /// Keeps what an earlier attempt left in the folder: the thumbnails from the first on while each is a whole JPEG
    /// (for the storyboard, the tiles are decoded again from them), and a whole poster. Thumbnails after the first
    /// missing or broken one are removed: they are taken again.
    private func adoptEarlierPictures() {
        if interval != nil, let jpeg {
            let decoder = wantsStoryboard ? try? JPEGDecoder() : nil
            var number = 1
            while number <= limit, JPEGEncoder.isWhole(atPath: root + "/" + Self.thumbnailPath(number)) {
                if wantsStoryboard && (number - 1) % tileStep == 0 {
                    guard let tile = try? decoder?.decode(path: root + "/" + Self.thumbnailPath(number)),
                          tile.width == jpeg.width, tile.height == jpeg.height,
                          [AV_PIX_FMT_YUVJ420P.rawValue, AV_PIX_FMT_YUV420P.rawValue].contains(tile.pointer.pointee.format)
                    else { break }
                    taken = number
                    guard (try? keepTile(tile, start: Double(number - 1) * (interval ?? 0))) != nil else {
                        taken = number - 1
                        break
                    }
                }
                taken = number
                number += 1
            }
            let folder = root + "/" + Self.folder
            let kept = Set((0..<taken).map { Self.thumbnailPath($0 + 1) })
            for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where !kept.contains(Self.folder + "/" + name) {
                unlink(folder + "/" + name)
            }
        }
        if posterTime != nil { posterTaken = JPEGEncoder.isWhole(atPath: root + "/" + Self.posterName) }
    }

    private static func makeFolder(_ path: String) throws(MediaError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw MediaError(code: "output_failed", message: "Creating \(path) failed: \(error.localizedDescription)")
        }
    }
}
