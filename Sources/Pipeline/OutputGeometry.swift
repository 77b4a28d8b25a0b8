/// Where a source picture ends up: output size, the part of the source kept, the size it is scaled to, rotation.
///
/// Sizes follow the display: sample aspect ratio and rotation applied, so anamorphic and rotated sources come out
/// with square pixels, upright, at the aspect ratio a player would show.
struct OutputGeometry: Equatable {
    var width: Int
    var height: Int
    var cropX = 0, cropY = 0, cropWidth = 0, cropHeight = 0
    var scaledWidth: Int
    var scaledHeight: Int
    var rotation: Int

    /// Resolves the settings against a source of `sourceWidth` × `sourceHeight` coded pixels.
    static func resolve(
        sourceWidth: Int, sourceHeight: Int, sampleAspect: Double, rotation: Int, settings: VideoSettings
    ) throws(MediaError) -> OutputGeometry {
        guard sourceWidth > 0, sourceHeight > 0 else {
            throw MediaError(code: "unsupported_video", message: "The input's video has no picture size.")
        }
        let quarter = rotation % 180 != 0
        let sourceDisplayWidth = Double(sourceWidth) * (sampleAspect > 0 ? sampleAspect : 1)
        let displayWidth = quarter ? Double(sourceHeight) : sourceDisplayWidth
        let displayHeight = quarter ? sourceDisplayWidth : Double(sourceHeight)
        let aspect = displayWidth / displayHeight

        var width: Int, height: Int
        var keepX = 1.0, keepY = 1.0
        switch (settings.width, settings.height) {
        case (nil, nil):
            (width, height) = (even(displayWidth), even(displayHeight))
        case (let boxWidth?, nil):
            (width, height) = (boxWidth, even(Double(boxWidth) / aspect))
        case (nil, let boxHeight?):
            (width, height) = (even(Double(boxHeight) * aspect), boxHeight)
        case (let boxWidth?, let boxHeight?):
            let boxAspect = Double(boxWidth) / Double(boxHeight)
            switch settings.scalingMode ?? .fit {
            case .stretch:
                (width, height) = (boxWidth, boxHeight)
            case .fit:
                (width, height) = aspect > boxAspect
                    ? (boxWidth, even(Double(boxWidth) / aspect)) : (even(Double(boxHeight) * aspect), boxHeight)
            case .fill:
                (width, height) = (boxWidth, boxHeight)
                if aspect > boxAspect { keepX = boxAspect / aspect } else { keepY = aspect / boxAspect }
            }
        }
        if settings.allowUpscaling == false {
            // Shrink the whole box so that no side exceeds the source's display size.
            let factor = min(1, displayWidth / Double(width), displayHeight / Double(height))
            if factor < 1 { (width, height) = (even(Double(width) * factor), even(Double(height) * factor)) }
        }
        let limit = VideoSettings.maxDimension
        guard width <= limit, height <= limit else {
            throw MediaError(code: "output_too_large",
                             message: "The output would be \(width)×\(height); the largest allowed is \(limit)×\(limit). Set video.width or video.height.")
        }
        var geometry = OutputGeometry(width: width, height: height, scaledWidth: quarter ? height : width,
                                      scaledHeight: quarter ? width : height, rotation: rotation)
        if keepX < 1 || keepY < 1 {
            // The kept fraction is measured on the display's axes; a quarter turn swaps them in the source.
            let (fractionX, fractionY) = quarter ? (keepY, keepX) : (keepX, keepY)
            geometry.cropWidth = min(sourceWidth, even(Double(sourceWidth) * fractionX))
            geometry.cropHeight = min(sourceHeight, even(Double(sourceHeight) * fractionY))
            geometry.cropX = (sourceWidth - geometry.cropWidth) / 2
            geometry.cropY = (sourceHeight - geometry.cropHeight) / 2
        }
        return geometry
    }

    /// Nearest even whole number, at least 2.
    static func even(_ value: Double) -> Int { max(2, Int((value / 2).rounded()) * 2) }
}

private func even(_ value: Double) -> Int { OutputGeometry.even(value) }
