import CFFmpeg

/// Turns decoded pictures of any size and pixel format into what the encoder takes: 8-bit 4:2:0 at the output
/// size, cropped (fill mode), scaled with swscale, colour matrix converted, and rotated upright. A picture whose
/// shape changed mid-stream is laid out by `PictureLayout` (black bars in fit mode).
final class VideoConverter {
    private let encoding: VideoEncoding
    private let sourceColors: ColorTags
    private var scaler: OpaquePointer?
    /// What the scaler was made for: the input's size and format, and the size it scales to.
    private var scalerShape: (width: Int32, height: Int32, format: Int32, toWidth: Int, toHeight: Int, fullRange: Bool)
        = (0, 0, -1, 0, 0, false)
    private let scaled = Frame()
    private let rotated = Frame()
    /// A picture of another shape, scaled to its place in the box before it is copied there.
    private let fitted = Frame()
    /// A 1-bit picture as 8-bit grey, which can be cropped anywhere, and the scaler that makes it.
    private let greyed = Frame()
    private var greyScaler: OpaquePointer?
    /// The layout of the last picture's shape (size and sample aspect), kept while the shape lasts.
    private var layoutShape: (width: Int32, height: Int32, aspect: AVRational) = (0, 0, AVRational(num: 0, den: 1))
    private var layout = PictureLayout()

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
        let layout = layout(of: frame.pointer.pointee)
        // A 1-bit picture (`monob`, `monow`) is made 8-bit grey first: FFmpeg crops bits on the right and at the
        // bottom only (a fill crop's left and top were left in, the picture squeezed, off centre), and swscale takes
        // it to Y'CbCr without the range conversion asked (black stayed 0 in a limited-range output).
        let fromBits = Self.isBitstream(frame.pointer.pointee.format)
        let frame = fromBits ? try grey(frame) : frame
        let source = frame.pointer
        if let crop = layout.crop {
            let width = Int(source.pointee.width), height = Int(source.pointee.height)
            source.pointee.crop_left += (min(crop.x, width))
            source.pointee.crop_top += (min(crop.y, height))
            source.pointee.crop_right += (max(0, width - crop.x - crop.width))
            source.pointee.crop_bottom += (max(0, height - crop.y - crop.height))
        }
        try FFmpeg.check(av_frame_apply_cropping(source, Int32(AV_FRAME_CROP_UNALIGNED)), "Cropping the picture")

        let fits = layout.destination == nil && source.pointee.format == AV_PIX_FMT_YUV420P.rawValue
            && Int(source.pointee.width) == encoding.scaledWidth && Int(source.pointee.height) == encoding.scaledHeight
            && !needsColorConversion
        let upright: Frame
        if fits {
            upright = frame
        } else {
            // Made grey from bits, its levels are full range (0 and 255) whatever the stream's tags say.
            try scale(frame, into: layout.destination, fullRange: fromBits || sourceColors.range == AVCOL_RANGE_JPEG)
            upright = scaled
        }
        guard encoding.rotation != 0 || encoding.mirrored else { return upright }
        try rotate(upright)
        return rotated
    }

    private static func isBitstream(_ format: Int32) -> Bool {
        guard let descriptor = av_pix_fmt_desc_get(AVPixelFormat(rawValue: format)) else { return false }
        return descriptor.pointee.flags & UInt64(AV_PIX_FMT_FLAG_BITSTREAM) != 0
    }

    /// `frame` as 8-bit grey, same size, in the converter's own frame (valid until the next call).
    private func grey(_ frame: Frame) throws(MediaError) -> Frame {
        let source = frame.pointer.pointee
        greyScaler = sws_getCachedContext(greyScaler, source.width, source.height,
                                          AVPixelFormat(rawValue: source.format), source.width, source.height,
                                          AV_PIX_FMT_GRAY8, SWS_POINT, nil, nil, nil)
        guard greyScaler != nil else {
            throw MediaError(code: "unsupported_pixel_format",
                             message: "A 1-bit picture cannot be made grey (\(source.width)x\(source.height)).")
        }
        greyed.unref()
        greyed.pointer.pointee.width = source.width
        greyed.pointer.pointee.height = source.height
        greyed.pointer.pointee.format = AV_PIX_FMT_GRAY8.rawValue
        try FFmpeg.check(av_frame_get_buffer(greyed.pointer, 0), "Allocating a picture", code: "out_of_memory")
        try FFmpeg.check(sws_scale_frame(greyScaler, greyed.pointer, frame.pointer), "Making a 1-bit picture grey")
        greyed.pointer.pointee.sample_aspect_ratio = source.sample_aspect_ratio
        greyed.pointer.pointee.color_range = source.color_range
        return greyed
    }

    /// The layout of `picture`'s shape, made again only when its size or sample aspect changes.
    private func layout(of picture: AVFrame) -> PictureLayout {
        let shape = (picture.width, picture.height, picture.sample_aspect_ratio)
        if shape.0 == layoutShape.width, shape.1 == layoutShape.height, av_cmp_q(shape.2, layoutShape.aspect) == 0 {
            return layout
        }
        layoutShape = (shape.0, shape.1, shape.2)
        layout = PictureLayout(width: Int(picture.width), height: Int(picture.height),
                               sampleAspect: FFmpeg.isValid(shape.2) ? av_q2d(shape.2) : nil, encoding: encoding)
        return layout
    }

    /// Scales `frame` into `scaled`: into the whole box, or into `destination` with black around it.
    private func scale(_ frame: Frame, into destination: PictureLayout.Rect?, fullRange: Bool) throws(MediaError) {
        let source = frame.pointer.pointee
        let target = destination ?? PictureLayout.Rect(x: 0, y: 0, width: encoding.scaledWidth, height: encoding.scaledHeight)
        if scaler == nil || scalerShape != (source.width, source.height, source.format, target.width, target.height, fullRange) {
            sws_freeContext(scaler)
            scaler = nil
            let sourceFullRange: Int32 = fullRange ? 1 : 0
            let outputFullRange: Int32 = encoding.colors.range == AVCOL_RANGE_JPEG ? 1 : 0
            // The ranges are options of the scaler as it is set up: set afterwards (`sws_setColorspaceDetails`
            // alone), FFmpeg 5.1 converted the range of 8-bit YUV scaled to another size only. At the same size the
            // picture was copied, and a source of more than 8 bits never converted: an SD video's poster at its own
            // size, a ProRes source's thumbnails and a full range asked of either came out grey (black 16, white 235).
            if let context = sws_alloc_context() {
                let options: [(String, Int64)] = [
                    ("srcw", Int64(source.width)), ("srch", Int64(source.height)), ("src_format", Int64(source.format)),
                    ("dstw", Int64(target.width)), ("dsth", Int64(target.height)), ("dst_format", Int64(AV_PIX_FMT_YUV420P.rawValue)),
                    ("sws_flags", Int64(SWS_BICUBIC)), ("src_range", Int64(sourceFullRange)), ("dst_range", Int64(outputFullRange)),
                ]
                let raw = UnsafeMutableRawPointer(context)
                if options.allSatisfy({ av_opt_set_int(raw, $0.0, $0.1, 0) >= 0 }), sws_init_context(context, nil, nil) >= 0 {
                    scaler = context
                } else {
                    sws_freeContext(context)
                }
            }
            guard scaler != nil else {
                throw MediaError(code: "unsupported_pixel_format",
                                 message: "The input's pixel format cannot be converted to 4:2:0 (\(source.width)x\(source.height)).")
            }
            scalerShape = (source.width, source.height, source.format, target.width, target.height, fullRange)
            sws_setColorspaceDetails(
                scaler, sws_getCoefficients(Int32(sourceColors.matrix.rawValue)), sourceFullRange,
                sws_getCoefficients(Int32(encoding.colors.matrix.rawValue)), outputFullRange, 0, 1 << 16, 1 << 16)
        }
        guard let destination else {
            try prepare(scaled, width: encoding.scaledWidth, height: encoding.scaledHeight)
            try FFmpeg.check(sws_scale_frame(scaler, scaled.pointer, frame.pointer), "Scaling the picture")
            return
        }
        // Scaled on its own (swscale may write a little past a line's width), then copied into its rectangle of a
        // black box (offsets even: chroma is half size).
        try prepare(fitted, width: destination.width, height: destination.height)
        try FFmpeg.check(sws_scale_frame(scaler, fitted.pointer, frame.pointer), "Scaling the picture")
        try prepare(scaled, width: encoding.scaledWidth, height: encoding.scaledHeight)
        let black: [UInt8] = [encoding.colors.range == AVCOL_RANGE_JPEG ? 0 : 16, 128, 128]
        for plane in 0..<3 {
            let shift = plane == 0 ? 0 : 1
            guard let box = tc_frame_data(scaled.pointer, Int32(plane)), let picture = tc_frame_data(fitted.pointer, Int32(plane)) else {
                throw MediaError(code: "out_of_memory", message: "A 4:2:0 picture lacks plane \(plane).")
            }
            let boxStride = Int(tc_frame_linesize(scaled.pointer, Int32(plane)))
            let pictureStride = Int(tc_frame_linesize(fitted.pointer, Int32(plane)))
            box.update(repeating: black[plane], count: boxStride * (encoding.scaledHeight >> shift))
            let width = destination.width >> shift
            for row in 0..<(destination.height >> shift) {
                (box + ((destination.y >> shift) + row) * boxStride + (destination.x >> shift))
                    .update(from: picture + row * pictureStride, count: width)
            }
        }
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

    /// Copies `source` into `rotated`, mirrored left to right if the encoding says so, then turned clockwise by
    /// its rotation.
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
            // The source column a mirrored picture's column `x` comes from.
            let mirrored = encoding.mirrored
            @inline(__always) func column(_ x: Int) -> Int { mirrored ? sourceWidth - 1 - x : x }
            for y in 0..<height {
                let row = output + y * outStride
                switch encoding.rotation {
                case 0:
                    let sourceRow = input + y * inStride
                    for x in 0..<width { row[x] = sourceRow[column(x)] }
                case 90:
                    for x in 0..<width { row[x] = input[(sourceHeight - 1 - x) * inStride + column(y)] }
                case 180:
                    let sourceRow = input + (sourceHeight - 1 - y) * inStride
                    for x in 0..<width { row[x] = sourceRow[column(sourceWidth - 1 - x)] }
                default:
                    for x in 0..<width { row[x] = input[x * inStride + column(sourceWidth - 1 - y)] }
                }
            }
        }
        // No properties copied (as a scaled picture has none; timestamps are the caller's): `av_frame_copy_props`
        // adds the source's side data to what the frame holds, and this frame lives the whole stream.
    }

    deinit {
        sws_freeContext(scaler)
        sws_freeContext(greyScaler)
    }
}
