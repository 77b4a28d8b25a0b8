/// Where a decoded picture goes in the encoder's picture before rotation: the part of it kept, and the rectangle
/// of the box (`scaledWidth` × `scaledHeight`) it is scaled into.
///
/// The encoding's geometry (`OutputGeometry`) is made for the stream's shape at its start. A picture of another
/// shape mid-stream (a broadcast switching between 4:3 and 16:9 programmes, an adaptive stream's other resolution)
/// keeps its own display aspect in the box the encoder was opened with: `fit` puts it inside with black bars, `fill`
/// crops it to the box, `stretch` stretches it as before.
struct PictureLayout: Equatable {
    struct Rect: Equatable {
        var x: Int, y: Int, width: Int, height: Int
    }

    /// Part of the picture kept, in its pixels; nil: all of it.
    var crop: Rect?
    /// Where it is scaled into, inside the box; nil: the whole box.
    var destination: Rect?

    /// The whole picture into the whole box.
    init() {}

    /// Display aspects closer than this (relative) count as the same shape: even sizes round them a little, and
    /// SD's 704 and 720 widths, or its 12:11 and 16:15 sample aspects, differ by about 2 %.
    static let tolerance = 0.03

    /// The layout of a `width` × `height` picture of `sampleAspect` (nil: unstated, taken for the stream's own).
    /// The shape the geometry was made for is the stream's, with the codec's sample aspect (what decoded pictures
    /// carry; a container's may differ, and the geometry's display aspect follows that one).
    init(width: Int, height: Int, sampleAspect: Double?, encoding: VideoEncoding) {
        guard width > 0, height > 0, encoding.sourceWidth > 0, encoding.sourceHeight > 0 else { return }
        let reference = Double(encoding.sourceWidth) * encoding.codecSampleAspect / Double(encoding.sourceHeight)
        let aspect = Double(width) * (sampleAspect ?? encoding.codecSampleAspect) / Double(height)
        let changed = abs(aspect / reference - 1) > Self.tolerance
        // The aspect the geometry gives this picture: the stream's as the geometry saw it, changed as this
        // picture's differs from the stream's.
        let display = encoding.sourceAspect * aspect / reference
        let boxWidth = encoding.scaledWidth, boxHeight = encoding.scaledHeight
        let box = Double(boxWidth) / Double(boxHeight)
        switch encoding.scalingMode {
        case .stretch:
            return
        case .fill where !changed:
            guard encoding.cropWidth > 0 else { return }
            if width == encoding.sourceWidth, height == encoding.sourceHeight {
                crop = Rect(x: encoding.cropX, y: encoding.cropY, width: encoding.cropWidth, height: encoding.cropHeight)
                return
            }
            // The geometry's crop, in this picture's pixels (the same shape at another resolution).
            let scaleX = Double(width) / Double(encoding.sourceWidth), scaleY = Double(height) / Double(encoding.sourceHeight)
            let size = (min(width, Self.even(Double(encoding.cropWidth) * scaleX)), min(height, Self.even(Double(encoding.cropHeight) * scaleY)))
            crop = Rect(x: min(width - size.0, Int((Double(encoding.cropX) * scaleX).rounded())),
                        y: min(height - size.1, Int((Double(encoding.cropY) * scaleY).rounded())), width: size.0, height: size.1)
        case .fill:
            let (keepX, keepY) = display > box ? (box / display, 1.0) : (1.0, display / box)
            crop = Self.centred(width: min(width, Self.even(Double(width) * keepX)),
                                height: min(height, Self.even(Double(height) * keepY)), in: (width, height))
        case .fit where !changed:
            return
        case .fit:
            let size = display > box
                ? (boxWidth, min(boxHeight, Self.even(Double(boxWidth) / display)))
                : (min(boxWidth, Self.even(Double(boxHeight) * display)), boxHeight)
            destination = Self.centred(width: size.0, height: size.1, in: (boxWidth, boxHeight))
        }
    }

    /// A `width` × `height` rectangle in the middle of `area`, at even offsets (4:2:0 chroma).
    private static func centred(width: Int, height: Int, in area: (width: Int, height: Int)) -> Rect {
        Rect(x: (area.width - width) / 4 * 2, y: (area.height - height) / 4 * 2, width: width, height: height)
    }

    private static func even(_ value: Double) -> Int { OutputGeometry.even(value) }
}
