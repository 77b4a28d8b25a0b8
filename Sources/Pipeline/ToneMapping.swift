import CFFmpeg

/// Maps HDR pictures (PQ or HLG, usually BT.2020 and 10-bit: a phone's HDR video, an HDR10 master) to SDR BT.709
/// 8-bit 4:2:0, the only range 8-bit H.264 carries well, with FFmpeg's filters:
///
/// 1. `zscale` to 16-bit RGB in BT.709 primaries, PQ-coded, from the source's tags as the plan read them (a stream
///    whose tags are in the container only gives frames without them); an HLG source is put on PQ's absolute scale
///    as zimg renders it, for a 1000 cd/m² display, whose reference white is about 203 cd/m². Sizes are made even
///    first (by a line or column at most, `padsToEven`): zimg takes no odd-sized 4:2:0 picture;
/// 2. `lutrgb`: a curve on each of R, G and B (as BT.2390's EETF is applied), from PQ to light relative to HDR's
///    reference white, 203 cd/m² (ITU-R BT.2408), through the Möbius curve (values up to 0.5 pass as they are, the
///    rest rolls off smoothly so the source's peak becomes SDR white, and reference white comes out at about 0.77 in
///    light, 0.9 in code value), to BT.709's code values. Mid-grey keeps
///    its level; Hable's curve darkened it by a quarter here, and clipping flattens every highlight. A table of
///    65,536 entries per channel costs half as much as FFmpeg's `tonemap` filter on 32-bit float pictures, which
///    gave the same patches (it maps by the brightest channel, so it shifts hues less in the highlights);
/// 3. `zscale` to BT.709's matrix and limited range, dithered to 8 bits.
///
/// When every output scales the picture down, step 1 scales it first to the largest size one needs (`prescale`).
///
/// Tone mapping still makes an HDR transcode about twice as slow as one that keeps HDR.
struct ToneMapping {
    /// The source's colours (their transfer is PQ or HLG; primaries and matrix are ones zimg converts).
    let source: ColorTags
    /// The brightest light the source states, cd/m², which becomes SDR white: the content light level (MaxCLL,
    /// which HEVC carries in SEI messages) of the stream's first picture, else its mastering display's peak, else
    /// the container's (MP4 `clli`/`mdcv`, Matroska's colour elements), else `defaultPeak`. Always the first
    /// picture of the file's, wherever the decode starts: a transcode resumed mid-way from its checkpoint maps its
    /// pictures as the attempt before did, even when only the first one carries the metadata.
    let peak: Double

    /// The size the pictures are mapped at, when smaller than the source's: the first `zscale` scales them down
    /// (bicubic) to it. nil: the source's own size.
    var prescale: (width: Int, height: Int)?

    /// Whether an odd-sized picture is made even by a black column or line added (for a user's crop, which may take
    /// the source's last one and leaves the added one out) rather than by its last one dropped (the whole picture
    /// is shown: no black edge). Cropping at an odd offset, before the mapping, would misread the colours. The
    /// picture is made 4:4:4 first: FFmpeg's `pad` drops an odd 4:2:0 picture's last column, as its crop would.
    var padsToEven = false

    /// How the pictures are made, for checkpoint fingerprints: segments mapped another way must not be spliced.
    /// Left as it was when pictures began to be mapped at a smaller size (`prescale`): pictures mapped either way
    /// differ by about 46 dB of PSNR, nothing to see at a seam, and it is part of every job's fingerprint, so a change
    /// would throw away every checkpoint in progress, SDR ones too.
    static let method = "lutrgb mobius 0.5, reference white 203, even sizes"

    /// The size to map a `source`-sized picture at for the encodings of `pictures` (the outputs, thumbnails and
    /// poster), or nil for the source's own. Tone mapping costs by the pixel: pictures every output scales down
    /// anyway are mapped at the largest size one needs (a 4K phone video for 1080p: half the time). Only when every
    /// output scales the whole picture: a crop (the user's in `filters`, after the mapping, or a fill mode's) or a
    /// watermark counts source pixels.
    static func prescale(source: (width: Int, height: Int), pictures: [VideoEncoding], filters: FilterSettings?) -> (width: Int, height: Int)? {
        guard filters?.video?.crop == nil, filters?.video?.watermark == nil, pictures.allSatisfy({ $0.cropWidth == 0 }) else { return nil }
        return prescaledSize(source: source, outputs: pictures.map { ($0.scaledWidth, $0.scaledHeight) })
    }

    /// The size to map a `source`-sized picture at for outputs that scale it whole to `outputs` (before any
    /// rotation): the aspect of the source's even part (what is mapped), just large enough for the largest output
    /// in both directions, even; nil when that is nearly the source's own size (a tenth smaller or less: not worth
    /// a second scaling).
    static func prescaledSize(source: (width: Int, height: Int), outputs: [(width: Int, height: Int)]) -> (width: Int, height: Int)? {
        let width = source.width / 2 * 2, height = source.height / 2 * 2
        guard width > 0, height > 0 else { return nil }
        let factor = outputs.map { max(Double($0.width) / Double(width), Double($0.height) / Double(height)) }.max() ?? 1
        guard factor < 0.9 else { return nil }
        func scaled(_ length: Int) -> Int { min(length, Int((Double(length) * factor / 2).rounded(.up)) * 2) }
        return (scaled(width), scaled(height))
    }

    /// HDR's reference white (graphics white), cd/m²: linear 1.0 between the filters.
    static let referenceWhite = 203.0
    /// The peak assumed when a source states none, cd/m²: HLG's nominal display, and the usual HDR10 master.
    static let defaultPeak = 1000.0

    /// Tone mapping for `stream`, tagged `source`, or nil when it is SDR or `settings` keep HDR as it is.
    /// `firstPicture` reads the stream's first picture (nil if it has none), only when tone mapping applies.
    init?(source: ColorTags, stream: UnsafeMutablePointer<AVStream>, settings: ColorSettings?,
          firstPicture: () throws(MediaError) -> Frame?) throws(MediaError) {
        guard source.isHDR, settings?.toneMapsHDR ?? true else { return nil }
        var tags = source
        // What zimg cannot convert (reserved, FCC, SMPTE 240M, …) is taken for BT.2020, as HDR is mastered.
        if ![AVCOL_PRI_BT709, AVCOL_PRI_BT470BG, AVCOL_PRI_SMPTE170M, AVCOL_PRI_BT2020, AVCOL_PRI_SMPTE431,
             AVCOL_PRI_SMPTE432].contains(tags.primaries) {
            tags.primaries = AVCOL_PRI_BT2020
        }
        if ![AVCOL_SPC_BT709, AVCOL_SPC_BT470BG, AVCOL_SPC_SMPTE170M, AVCOL_SPC_BT2020_NCL,
             AVCOL_SPC_BT2020_CL].contains(tags.matrix) {
            tags.matrix = AVCOL_SPC_BT2020_NCL
        }
        self.source = tags
        var lightSize = 0, displaySize = 0
        let light = av_stream_get_side_data(stream, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, &lightSize)
        let display = av_stream_get_side_data(stream, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, &displaySize)
        let containerPeak = Self.statedPeak(light: light.map { (UnsafeRawPointer($0), lightSize) },
                                            display: display.map { (UnsafeRawPointer($0), displaySize) })
        let framePeak = try firstPicture().flatMap { frame -> Double? in
            func side(_ type: AVFrameSideDataType) -> (bytes: UnsafeRawPointer, count: Int)? {
                av_frame_get_side_data(frame.pointer, type).map { (UnsafeRawPointer($0.pointee.data), Int($0.pointee.size)) }
            }
            return Self.statedPeak(light: side(AV_FRAME_DATA_CONTENT_LIGHT_LEVEL), display: side(AV_FRAME_DATA_MASTERING_DISPLAY_METADATA))
        }
        peak = framePeak ?? containerPeak ?? Self.defaultPeak
    }

    /// The peak HDR metadata states, cd/m²: the content light level (MaxCLL), else the mastering display's peak;
    /// nil if neither is there (each given as its bytes and their count, from a frame or a stream).
    private static func statedPeak(light: (bytes: UnsafeRawPointer, count: Int)?,
                                   display: (bytes: UnsafeRawPointer, count: Int)?) -> Double? {
        if let light, light.count >= MemoryLayout<AVContentLightMetadata>.size {
            let level = light.bytes.loadUnaligned(as: AVContentLightMetadata.self)
            if level.MaxCLL > 0 { return Double(level.MaxCLL) }
        }
        if let display, display.count >= MemoryLayout<AVMasteringDisplayMetadata>.size {
            let mastering = display.bytes.loadUnaligned(as: AVMasteringDisplayMetadata.self)
            if mastering.has_luminance != 0, FFmpeg.isValid(mastering.max_luminance), av_q2d(mastering.max_luminance) > 0 {
                return av_q2d(mastering.max_luminance)
            }
        }
        return nil
    }

    /// Colours of the pictures that come out.
    static let output = ColorTags.bt709

    /// The size a `width` × `height` picture has after the chain's first step, which makes it even (see `filters`).
    func evenSize(width: Int, height: Int) -> (width: Int, height: Int) {
        padsToEven ? ((width + 1) / 2 * 2, (height + 1) / 2 * 2) : (width / 2 * 2, height / 2 * 2)
    }

    /// The filter chain (numbers are H.273 code points, which are zscale's and FFmpeg's alike).
    var filters: String {
        let range = source.range == AVCOL_RANGE_JPEG ? 1 : 0
        let curve = Self.curve(relativePeak: peak / Self.referenceWhite)
        return (padsToEven ? "format=yuv444p16le,pad=ceil(iw/2)*2:ceil(ih/2)*2:0:0" : "crop=trunc(iw/2)*2:trunc(ih/2)*2:0:0")
            + ",zscale=" + (prescale.map { "w=\($0.width):h=\($0.height):f=bicubic:" } ?? "") + "tin=\(source.transfer.rawValue):pin=\(source.primaries.rawValue):min=\(source.matrix.rawValue)"
            + ":rin=\(range):t=smpte2084:p=bt709:npl=\(Self.referenceWhite),format=gbrp16le"
            + ",lutrgb=r='\(curve)':g='\(curve)':b='\(curve)'"
            + ",zscale=tin=bt709:pin=bt709:t=bt709:p=bt709:m=bt709:r=tv:d=ordered,format=yuv420p"
    }

    /// The `lutrgb` expression from a PQ code value (`val`, 0 to 65535) to a BT.709 one, for a source whose peak is
    /// `relativePeak` times reference white.
    static func curve(relativePeak: Double) -> String {
        func number(_ value: Double) -> String { "(" + String(format: "%.9g", value) + ")" }
        // ST 2084's EOTF: code value → cd/m², then relative to reference white (register 1).
        let (m1, m2, c1, c2, c3) = (0.1593017578125, 78.84375, 0.8359375, 18.8515625, 18.6875)
        var text = "st(0,pow(val/65535,1/\(m2)));"
            + "st(1,10000*pow(max(ld(0)-\(c1),0)/(\(c2)-\(c3)*ld(0)),1/\(m1))/\(referenceWhite));"
        // Möbius (mpv's, as FFmpeg's tonemap filter has it): linear up to j, then (x + a) / (x + b) scaled to meet
        // the line at j with its slope and reach 1 at the peak. No peak above white: clipping only.
        let j = 0.5, peak = relativePeak
        if peak <= 1.0001 {
            text += "st(2,min(1,ld(1)));"
        } else {
            let a = -j * j * (peak - 1) / (j * j - 2 * j + peak)
            let b = (j * j - 2 * j * peak + peak) / (peak - 1)
            let scale = (b * b + 2 * b * j + j * j) / (b - a)
            text += "st(2,min(1,if(lte(ld(1),\(j)),ld(1),\(number(scale))*(ld(1)+\(number(a)))/(ld(1)+\(number(b))))));"
        }
        // BT.709 as zscale codes it (BT.1886's 2.4 gamma, the inverse of how step 1 reads an SDR picture).
        return text + "65535*pow(max(ld(2),0),1/2.4)"
    }
}
