import CFFmpeg

/// Turns decoded pictures of any size and pixel format into what the encoder takes: 8-bit 4:2:0 at the output
/// size, cropped (fill mode), scaled with swscale, colour matrix converted, and rotated upright.
final class VideoConverter {
    private let encoding: VideoEncoding
    private let sourceColors: ColorTags
    private var scaler: OpaquePointer?
    private var scalerInput: (width: Int32, height: Int32, format: Int32) = (0, 0, -1)
    private let scaled = Frame()
    private let rotated = Frame()

    init(encoding: VideoEncoding, sourceColors: ColorTags) {
        self.encoding = encoding
        self.sourceColors = sourceColors
    }

    private var needsColorConversion: Bool {
        sourceColors.matrix != encoding.colors.matrix || sourceColors.range != encoding.colors.range
    }

    /// Returns a frame ready for the encoder: `frame` itself when nothing needs to change, else a converted copy
    /// owned by the converter (valid until the next call). Timestamps are left to the caller. `frame` must be the
    /// caller's own reference: its cropping fields are set (its pixels are never written).
    func convert(_ frame: Frame) throws(MediaError) -> Frame {
        let source = frame.pointer
        if encoding.cropWidth > 0 {
            let width = Int(source.pointee.width), height = Int(source.pointee.height)
            source.pointee.crop_left += (min(encoding.cropX, width))
            source.pointee.crop_top += (min(encoding.cropY, height))
            source.pointee.crop_right += (max(0, width - encoding.cropX - encoding.cropWidth))
            source.pointee.crop_bottom += (max(0, height - encoding.cropY - encoding.cropHeight))
        }
        try FFmpeg.check(av_frame_apply_cropping(source, Int32(AV_FRAME_CROP_UNALIGNED)), "Cropping the picture")

        let fits = source.pointee.format == AV_PIX_FMT_YUV420P.rawValue
            && Int(source.pointee.width) == encoding.scaledWidth && Int(source.pointee.height) == encoding.scaledHeight
            && !needsColorConversion
        let upright: Frame
        if fits {
            upright = frame
        } else {
            try scale(frame)
            upright = scaled
        }
        guard encoding.rotation != 0 else { return upright }
        try rotate(upright)
        return rotated
    }

    private func scale(_ frame: Frame) throws(MediaError) {
        let source = frame.pointer.pointee
        if scaler == nil || scalerInput != (source.width, source.height, source.format) {
            sws_freeContext(scaler)
            scaler = sws_getContext(
                source.width, source.height, AVPixelFormat(rawValue: source.format),
                Int32(encoding.scaledWidth), Int32(encoding.scaledHeight), AV_PIX_FMT_YUV420P,
                SWS_BICUBIC, nil, nil, nil)
            guard scaler != nil else {
                throw MediaError(code: "unsupported_pixel_format",
                                 message: "The input's pixel format cannot be converted to 4:2:0 (\(source.width)x\(source.height)).")
            }
            scalerInput = (source.width, source.height, source.format)
            let sourceFullRange: Int32 = sourceColors.range == AVCOL_RANGE_JPEG ? 1 : 0
            let outputFullRange: Int32 = encoding.colors.range == AVCOL_RANGE_JPEG ? 1 : 0
            sws_setColorspaceDetails(
                scaler, sws_getCoefficients(Int32(sourceColors.matrix.rawValue)), sourceFullRange,
                sws_getCoefficients(Int32(encoding.colors.matrix.rawValue)), outputFullRange, 0, 1 << 16, 1 << 16)
        }
        try prepare(scaled, width: encoding.scaledWidth, height: encoding.scaledHeight)
        try FFmpeg.check(sws_scale_frame(scaler, scaled.pointer, frame.pointer), "Scaling the picture")
    }

    /// Makes `frame` a writable 4:2:0 picture of the given size, reusing its buffer when nobody else holds it.
    private func prepare(_ frame: Frame, width: Int, height: Int) throws(MediaError) {
        let value = frame.pointer.pointee
        if value.width != Int32(width) || value.height != Int32(height) || value.format != AV_PIX_FMT_YUV420P.rawValue
            || value.buf.0 == nil {
            frame.unref()
            frame.pointer.pointee.width = Int32(width)
            frame.pointer.pointee.height = Int32(height)
            frame.pointer.pointee.format = AV_PIX_FMT_YUV420P.rawValue
            try FFmpeg.check(av_frame_get_buffer(frame.pointer, 0), "Allocating a picture", code: "out_of_memory")
        } else {
            try FFmpeg.check(av_frame_make_writable(frame.pointer), "Allocating a picture", code: "out_of_memory")
        }
    }

    /// Copies `source` into `rotated`, turned clockwise by the encoding's rotation.
    private func rotate(_ source: Frame) throws(MediaError) {
        try prepare(rotated, width: encoding.width, height: encoding.height)
        for plane in 0..<3 {
            let shift = plane == 0 ? 0 : 1
            let sourceWidth = Int(source.pointer.pointee.width) >> shift
            let sourceHeight = Int(source.pointer.pointee.height) >> shift
            let width = encoding.width >> shift
            let height = encoding.height >> shift
            guard let input = tc_frame_data(source.pointer, Int32(plane)),
                  let output = tc_frame_data(rotated.pointer, Int32(plane)) else { continue }
            let inStride = Int(tc_frame_linesize(source.pointer, Int32(plane)))
            let outStride = Int(tc_frame_linesize(rotated.pointer, Int32(plane)))
            for y in 0..<height {
                let row = output + y * outStride
                switch encoding.rotation {
                case 90:
                    for x in 0..<width { row[x] = input[(sourceHeight - 1 - x) * inStride + y] }
                case 180:
                    let sourceRow = input + (sourceHeight - 1 - y) * inStride
                    for x in 0..<width { row[x] = sourceRow[sourceWidth - 1 - x] }
                default:
                    for x in 0..<width { row[x] = input[x * inStride + (sourceWidth - 1 - y)] }
                }
            }
        }
        av_frame_copy_props(rotated.pointer, source.pointer)
    }

    deinit { sws_freeContext(scaler) }
}
