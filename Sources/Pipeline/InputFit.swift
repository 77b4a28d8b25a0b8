/// Settings judged against the tracks a probe read of the input, where a job is asked for (the API): a crop
/// outside the picture, an output picture no H.264 level (or not the level asked) holds, thumbnails more than a job
/// takes. The job makes the same checks when it runs (`VideoEncoding`, `Thumbnailer`), on the tracks it picks; a
/// job that could only fail was queued with 201 and failed a moment later. A setting is refused here only when it
/// fails with every video track the job could pick, and lengths are taken at their shortest, so nothing a job
/// would run is refused.
public enum InputFit {
    /// Throws what the job would fail with (`invalid_settings`, or `output_too_large` for a picture the source
    /// leads to, the message starting with the key at fault).
    public static func check(_ settings: TranscodeSettings, tracks: [Track]) throws(MediaError) {
        guard case .encode(let base) = settings.video else { return }
        let pictures = tracks.filter { $0.mediaType == .video && $0.coverArt != true && ($0.width ?? 0) > 0 && ($0.height ?? 0) > 0 }
        guard !pictures.isEmpty else { return }
        var encoded: [(key: String, settings: VideoSettings)] = []
        if !settings.container.isSegmented {
            encoded = [("video", base)]
        } else if case .list(let rungs) = settings.renditions {
            encoded = rungs.enumerated().map { ("renditions[\($0.offset)].video", $0.element) }
        }
        var problems: [MediaError] = []
        for track in pictures {
            guard let problem = problem(track, encoded: encoded, settings: settings) else { break }
            problems.append(problem)
        }
        if problems.count == pictures.count { throw problems[0] }
        if let interval = settings.thumbnails?.interval, settings.thumbnails?.count == nil {
            // The job spreads them over its whole length (its tracks' earliest start to latest end), at least
            // as long as the shortest video track, and the shortest audio track when the sound is kept.
            let shortest = { (tracks: [Track]) in tracks.map { $0.duration ?? 0 }.min() ?? 0 }
            let audio = settings.audio == .drop ? [] : tracks.filter { $0.mediaType == .audio }
            let duration = max(shortest(pictures), shortest(audio)) / (settings.filters?.tempo ?? 1)
            if let problem = Thumbnailer.problem(interval: interval, duration: duration) {
                throw MediaError(code: "invalid_settings", message: "thumbnails.interval: \(problem)")
            }
        }
    }

    /// What the job would fail with, made from `track`'s picture, or nil.
    private static func problem(_ track: Track, encoded: [(key: String, settings: VideoSettings)],
                                settings: TranscodeSettings) -> MediaError? {
        // A picture larger than inputs may be by default is left to the job: it refuses it as `input_too_large`
        // (by limits the intake does not know) before anything here would be asked.
        guard let width = track.width, let height = track.height, width <= VideoSettings.maxDimension,
              height <= VideoSettings.maxDimension else { return nil }
        let crop = settings.filters?.video?.crop
        var key = "video"
        do throws(MediaError) {
            if crop != nil {
                // The crop alone (a ladder whose rungs come from the source checks it too), in a box no picture
                // overflows: a source wider than the largest output is refused only for a size that keeps it so.
                _ = try VideoEncoding.picture(of: track, settings: VideoSettings(width: 2, height: 2), crop: crop)
            }
            for (rungKey, video) in encoded {
                key = rungKey
                let geometry = try VideoEncoding.picture(of: track, settings: video, crop: crop).geometry
                if let problem = H264Level.problem(width: geometry.width, height: geometry.height) {
                    return MediaError(code: "invalid_settings", message: "\(key): \(problem); ask for a smaller width or height.")
                }
                guard let level = video.level else { continue }
                if let problem = H264Level.bitRateProblem(video) {
                    return MediaError(code: "invalid_settings", message: "\(key).averageBitRate: \(problem).")
                }
                // The rate the encoder gets is the one asked when it is below the source's (after a tempo);
                // otherwise the stream's own, which the probe's average may not be: then the size alone is judged.
                let sourceRate = (track.frameRate ?? 0) * (settings.filters?.tempo ?? 1)
                let rate = video.frameRate.flatMap { $0 < sourceRate * 0.99 ? $0 : nil } ?? 0
                if let problem = H264Level.problem(level: level, width: geometry.width, height: geometry.height, frameRate: rate) {
                    return MediaError(code: "invalid_settings", message: "\(key).level: \(problem); leave the level out for x264's own choice.")
                }
            }
        } catch {
            // The crop's message names its key; the size's (`output_too_large`) names none.
            return error.message.hasPrefix("filters.") ? error : MediaError(code: error.code, message: "\(key): \(error.message)")
        }
        if let thumbnails = settings.thumbnails {
            do throws(MediaError) {
                _ = try VideoEncoding.picture(of: track, settings: thumbnails.picture, crop: crop)
            } catch {
                return thumbnails.refusal(error)
            }
        }
        return nil
    }
}
