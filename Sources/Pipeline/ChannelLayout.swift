import CFFmpeg

/// A copy of an audio frame's channel layout (`AVChannelLayout`, which may own a custom map), kept to tell whether
/// later frames have the same one: a change of layout with the same number of channels (quad then 4.0 in a
/// broadcast) needs the resampler, or the filter graph, built again as a change of count does.
final class ChannelLayout {
    private var layout = AVChannelLayout()

    init(copying source: AVChannelLayout) throws(MediaError) {
        var source = source
        try FFmpeg.check(av_channel_layout_copy(&layout, &source), "Keeping the audio's channel layout", code: "out_of_memory")
    }

    /// Whether `other` is the same layout: the same order, channels and, for a custom one, the same map.
    func matches(_ other: AVChannelLayout) -> Bool {
        var other = other
        return av_channel_layout_compare(&layout, &other) == 0
    }

    deinit { av_channel_layout_uninit(&layout) }
}
