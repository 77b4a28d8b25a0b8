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

    /// Display aspects closer than this (relative) count as the same shape: even sizes round them a little.
    static let tolerance = 0.02

    /// The layout of a `width` × `height` picture whose display aspect (width × sample aspect / height) is `aspect`,
    /// in a stream whose first picture's was `reference`.
    init(width: Int, height: Int, aspect: Double, reference: Double, encoding: VideoEncoding) {
        guard width > 0, height > 0, aspect > 0, reference > 0 else { return }
        let changed = abs(aspect / reference - 1) > Self.tolerance
        // The aspect the geometry gives this picture: the first picture's as the geometry saw it (its container's
        // sample aspect may differ from the codec's the frames carry), changed as this one differs from it.
        let display = encoding.sourceAspect * aspect / reference
        let boxWidth = encoding.scaledWidth, boxHeight = encoding.scaledHeight
        let box = Double(boxWidth) / Double(boxHeight)
        switch encoding.scalingMode {
        case .stretch:
            return
        case .fill where !changed:
            // The geometry's crop, in this picture's pixels (the same shape at another resolution).
            guard encoding.cropWidth > 0, encoding.sourceWidth > 0, encoding.sourceHeight > 0 else { return }
            let scaleX = Double(width) / Double(encoding.sourceWidth), scaleY = Double(height) / Double(encoding.sourceHeight)
            crop = Self.centred(width: min(width, Self.even(Double(encoding.cropWidth) * scaleX)),
                                height: min(height, Self.even(Double(encoding.cropHeight) * scaleY)), in: (width, height))
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
