import CFFmpeg

/// Owns one `AVFrame`: decoded video pixels or audio samples with a presentation time.
public final class Frame {
    let pointer: UnsafeMutablePointer<AVFrame>

    init() {
        guard let frame = av_frame_alloc() else { fatalError("av_frame_alloc: out of memory") }
        pointer = frame
    }

    /// Width in pixels (video).
    public var width: Int { Int(pointer.pointee.width) }
    /// Height in pixels (video).
    public var height: Int { Int(pointer.pointee.height) }
    /// Number of samples per channel (audio).
    public var sampleCount: Int { Int(pointer.pointee.nb_samples) }

    func unref() { av_frame_unref(pointer) }

    deinit {
        var frame: UnsafeMutablePointer<AVFrame>? = pointer
        av_frame_free(&frame)
    }
}
