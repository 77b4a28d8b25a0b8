import CFFmpeg

/// Owns the swscale context that shrinks storyboard tiles to fit a square of `maxSide` pixels, aspect kept, in the
/// picture's own 4:2:0 format (its range untouched: the sprite copies planes as they are).
final class TileScaler {
    let maxSide: Int
    private var scaler: OpaquePointer?
    private var input: (width: Int32, height: Int32, format: Int32) = (0, 0, -1)

    init(maxSide: Int) { self.maxSide = maxSide }

    /// The size a `width` × `height` tile is kept at: even, at most `maxSide` on its longer side.
    func size(width: Int, height: Int) -> (width: Int, height: Int) {
        guard max(width, height) > maxSide else { return (width, height) }
        let scale = Double(maxSide) / Double(max(width, height))
        let even = { (value: Int) -> Int in max(2, Int((Double(value) * scale / 2).rounded()) * 2) }
        return (even(width), even(height))
    }

    /// `picture` itself when it fits, else a new, smaller copy.
    func fit(_ picture: Frame) throws(MediaError) -> Frame {
        let (width, height) = size(width: picture.width, height: picture.height)
        guard width != picture.width || height != picture.height else { return picture }
        let source = picture.pointer.pointee
        if scaler == nil || input != (source.width, source.height, source.format) {
            sws_freeContext(scaler)
            let format = AVPixelFormat(rawValue: source.format)
            scaler = sws_getContext(source.width, source.height, format, Int32(width), Int32(height), format, SWS_AREA, nil, nil, nil)
            guard scaler != nil else {
                throw MediaError(code: "unsupported_pixel_format", message: "A storyboard tile cannot be scaled (\(source.width)x\(source.height)).")
            }
            input = (source.width, source.height, source.format)
        }
        let tile = Frame()
        tile.pointer.pointee.width = Int32(width)
        tile.pointer.pointee.height = Int32(height)
        tile.pointer.pointee.format = source.format
        tile.pointer.pointee.color_range = source.color_range
        try FFmpeg.check(av_frame_get_buffer(tile.pointer, 0), "Allocating a storyboard tile", code: "out_of_memory")
        try FFmpeg.check(sws_scale_frame(scaler, tile.pointer, picture.pointer), "Scaling a storyboard tile")
        return tile
    }

    deinit { sws_freeContext(scaler) }
}
