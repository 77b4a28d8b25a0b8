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

    /// A new frame sharing `frame`'s buffers (`av_frame_ref`): its own timestamps and properties, the same pixels
    /// or samples, which nobody may then write.
    static func reference(to frame: Frame) throws(MediaError) -> Frame {
        let copy = Frame()
        try FFmpeg.check(av_frame_ref(copy.pointer, frame.pointer), "Sharing a decoded frame", code: "out_of_memory")
        return copy
    }

    deinit {
        var frame: UnsafeMutablePointer<AVFrame>? = pointer
        av_frame_free(&frame)
    }
}
