import Foundation

/// The still pictures of a checkpointed transcode (thumbnails, poster, storyboard sprite) in the checkpoint's
/// `stills/` folder: the video pass's `Thumbnailer` writes them there, a resumed pass's thumbnailer keeps the whole
/// ones it finds, and once the video is complete they are flushed to disk and recorded in the manifest with it.
/// At the end they are linked into the output folder, with the storyboard's cues written for the output's length.
struct CheckpointStills {
    static let folder = "stills"
    /// The folder, inside the checkpoint's.
    let path: String

    init(checkpoint: Checkpoint) throws(MediaError) {
        path = checkpoint.file(Self.folder)
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw MediaError(code: "output_failed", message: "Creating the checkpoint folder \(path) failed: \(error.localizedDescription)")
        }
    }

    /// Whether every picture `record` lists is there and whole, so that a complete video's pictures can be used as
    /// they are (else the video is made again, and the pictures with it).
    func holds(_ record: CheckpointManifest.Stills?) -> Bool {
        guard let record else { return false }
        return Self.names(record).allSatisfy { JPEGEncoder.isWhole(atPath: path + "/" + $0) }
    }

    /// Flushes what `thumbnailer` wrote (after its `finish`) to disk and says what it is, for the manifest; `step`
    /// after each file (10,000 thumbnails at 12 ms a flush outlast the stall timeout: progress for the watchdog,
    /// which failed the job for good and took its checkpoint with it).
    func record(_ thumbnailer: Thumbnailer, step: () -> Void) throws(MediaError) -> CheckpointManifest.Stills {
        try FileDurability.syncTree(atPath: path, step: step)
        return CheckpointManifest.Stills(thumbnails: thumbnailer.taken, poster: thumbnailer.posterTaken,
                                         storyboard: thumbnailer.storyboard)
    }

    /// Puts the pictures `record` (the manifest's, once the video is complete) lists into the output folder and
    /// writes the storyboard's cues, which end at `duration` seconds (the output's); `step` after each picture.
    func link(_ record: CheckpointManifest.Stills?, into directory: OutputDirectory, duration: Double, step: () -> Void) throws(MediaError) {
        guard let record else {
            throw MediaError(code: "output_failed", message: "The checkpoint's video is complete but its pictures are not recorded.")
        }
        for name in Self.names(record) {
            try directory.adopt(file: path + "/" + name, as: name)
            step()
        }
        try record.storyboard?.writeCues(into: directory.temporaryPath, duration: duration)
    }

    /// The files `record` lists, relative to the folder.
    private static func names(_ record: CheckpointManifest.Stills) -> [String] {
        var names = (0..<record.thumbnails).map { Thumbnailer.thumbnailPath($0 + 1) }
        if record.poster { names.append(Thumbnailer.posterName) }
        if record.storyboard != nil { names.append(Storyboard.imageName) }
        return names
    }
}
