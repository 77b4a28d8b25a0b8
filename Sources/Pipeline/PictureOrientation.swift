/// How a stored picture is shown: mirrored left to right, then turned clockwise by `rotation` (the display matrix),
/// its samples `sampleAspect` wide. Laid over the stored picture (the filters run before `VideoConverter` shows it
/// so), a watermark is turned and placed here so that it shows upright, unmirrored, undistorted and where it was
/// asked: it was laid on as given, and a phone's portrait video showed it sideways in another corner.
struct PictureOrientation: Equatable {
    var rotation = 0
    var mirrored = false
    var sampleAspect = 1.0

    /// The stored picture's corner that is shown at the corner asked (`right`, `bottom`).
    func storedCorner(right: Bool, bottom: Bool) -> (right: Bool, bottom: Bool) {
        var stored: (right: Bool, bottom: Bool) = switch rotation {
        case 90: (bottom, !right)
        case 180: (!right, !bottom)
        case 270: (!bottom, right)
        default: (right, bottom)
        }
        if mirrored { stored.right.toggle() }
        return stored
    }

    /// Filters that make an upright image what, shown as the stored picture is, comes out as the image: turned back,
    /// mirrored, and narrowed by the sample aspect. Nil when nothing changes.
    var imageFilters: String? {
        var filters: [String] = []
        switch rotation {
        case 90: filters.append("transpose=cclock")
        case 180: filters.append(contentsOf: ["hflip", "vflip"])
        case 270: filters.append("transpose=clock")
        default: break
        }
        if mirrored { filters.append("hflip") }
        if abs(sampleAspect - 1) > 0.001 { filters.append("scale=w='max(1,round(iw/\(sampleAspect)))':h=ih") }
        return filters.isEmpty ? nil : filters.joined(separator: ",")
    }

    /// `pixels` along the stored picture's width that show as that many.
    func storedWidth(_ pixels: Int) -> Int { Int((Double(pixels) / sampleAspect).rounded()) }
}
