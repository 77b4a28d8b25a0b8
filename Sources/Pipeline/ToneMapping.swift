import CFFmpeg

/// Maps HDR pictures (PQ or HLG, usually BT.2020 and 10-bit: a phone's HDR video, an HDR10 master) to SDR BT.709
/// 8-bit 4:2:0, the only range 8-bit H.264 carries well, with FFmpeg's filters:
///
/// 1. `zscale` to linear light in BT.709 primaries, from the source's tags as the plan read them (a stream whose
///    tags are in the container only gives frames without them). 1.0 is HDR's reference white, 203 cd/m²
///    (ITU-R BT.2408), SDR's white;
/// 2. `tonemap` with the Möbius curve: values up to 0.5 pass as they are and the rest rolls off smoothly, so the
///    source's peak becomes SDR white (reference white comes out at about 0.9). Mid-grey keeps its level; Hable's
///    curve darkened it by a quarter here, and clipping flattens every highlight;
/// 3. `zscale` to BT.709's transfer, matrix and limited range, dithered to 8 bits.
///
/// The curve works on 32-bit float RGB, so a tone-mapped transcode is several times slower than a plain one.
struct ToneMapping {
    /// The source's colours (their transfer is PQ or HLG).
    let source: ColorTags

    /// HDR's reference white (graphics white), cd/m²: linear 1.0 between the filters.
    static let referenceWhite = 203.0
    /// The peak assumed when a source states none, cd/m²: HLG's nominal display, and the usual HDR10 master.
    static let defaultPeak = 1000.0

    /// Tone mapping for a source tagged `source`, or nil when it is SDR or `settings` keep HDR as it is.
    init?(source: ColorTags, settings: ColorSettings?) {
        guard source.isHDR, settings?.toneMapsHDR ?? true else { return nil }
        self.source = source
    }

    /// Colours of the pictures that come out.
    static let output = ColorTags.bt709

    /// The brightest light `frame`'s HDR metadata states, cd/m²: its content light level (MaxCLL), else its
    /// mastering display's peak, else `defaultPeak`.
    static func peakLuminance(of frame: Frame) -> Double {
        if let data = av_frame_get_side_data(frame.pointer, AV_FRAME_DATA_CONTENT_LIGHT_LEVEL),
           Int(data.pointee.size) >= MemoryLayout<AVContentLightMetadata>.size {
            let level = UnsafeRawPointer(data.pointee.data).load(as: AVContentLightMetadata.self)
            if level.MaxCLL > 0 { return Double(level.MaxCLL) }
        }
        if let data = av_frame_get_side_data(frame.pointer, AV_FRAME_DATA_MASTERING_DISPLAY_METADATA),
           Int(data.pointee.size) >= MemoryLayout<AVMasteringDisplayMetadata>.size {
            let display = UnsafeRawPointer(data.pointee.data).load(as: AVMasteringDisplayMetadata.self)
            if display.has_luminance != 0, FFmpeg.isValid(display.max_luminance), av_q2d(display.max_luminance) > 0 {
                return av_q2d(display.max_luminance)
            }
        }
        return defaultPeak
    }

    /// The filter chain for a source whose brightest light is `peak` cd/m² (numbers are H.273 code points, which
    /// are zscale's and FFmpeg's alike).
    func filters(peak: Double) -> String {
        let range = source.range == AVCOL_RANGE_JPEG ? 1 : 0
        let relativePeak = max(1, peak / Self.referenceWhite)
        return "zscale=tin=\(source.transfer.rawValue):pin=\(source.primaries.rawValue):min=\(source.matrix.rawValue)"
            + ":rin=\(range):t=linear:p=bt709:npl=\(Self.referenceWhite),format=gbrpf32le"
            + ",tonemap=tonemap=mobius:param=0.5:desat=0:peak=\(String(format: "%.4f", relativePeak))"
            + ",zscale=tin=linear:pin=bt709:t=bt709:m=bt709:r=tv:d=ordered,format=yuv420p"
    }
}
