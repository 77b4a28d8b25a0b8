import CFFmpeg

/// A stream's Dolby Vision configuration, as FFmpeg reads it from the container (MP4's `dvcC`/`dvvC`, Matroska's
/// block addition mapping, MPEG-TS's descriptor). Dolby Vision video is HEVC (or AVC, AV1) whose base layer a
/// decoder shows as it is, plus per-picture reshaping data that only a Dolby Vision display path applies.
struct DolbyVision: Equatable {
    /// The profile: 5 (streaming services' single layer), 7 (UHD Blu-ray's two layers), 8 (a phone's, over HDR10
    /// or HLG), …
    let profile: Int
    /// What the base layer is without the reshaping (`dv_bl_signal_compatibility_id`): 0 nothing a display shows
    /// right (profile 5's IPTPQc2, whose colours come out green and purple), 1 HDR10, 2 SDR, 4 HLG, 6 BT.2100 PQ.
    let compatibility: Int
    let hasBaseLayer: Bool

    /// The configuration `stream` states, or nil when it states none.
    init?(stream: UnsafeMutablePointer<AVStream>) {
        var size = 0
        guard let data = av_stream_get_side_data(stream, AV_PKT_DATA_DOVI_CONF, &size),
              size >= MemoryLayout<AVDOVIDecoderConfigurationRecord>.size else { return nil }
        let record = UnsafeRawPointer(data).loadUnaligned(as: AVDOVIDecoderConfigurationRecord.self)
        self.init(profile: Int(record.dv_profile), compatibility: Int(record.dv_bl_signal_compatibility_id),
                  hasBaseLayer: record.bl_present_flag != 0)
    }

    init(profile: Int, compatibility: Int, hasBaseLayer: Bool) {
        self.profile = profile
        self.compatibility = compatibility
        self.hasBaseLayer = hasBaseLayer
    }

    /// Whether decoding the stream gives pictures in colours its tags describe: a base layer compatible with
    /// HDR10, SDR or HLG, which is what FFmpeg decodes (the reshaping is dropped, as a player without Dolby Vision
    /// drops it).
    var decodesToViewablePictures: Bool { hasBaseLayer && compatibility != 0 }

    /// Why a stream that does not decode to viewable pictures cannot be transcoded, for the job's error.
    var refusal: MediaError {
        MediaError(code: "unsupported_video", message: "The input's video is Dolby Vision profile \(profile) without a base layer "
            + "that HDR10, HLG or SDR players show (its colours need Dolby's reshaping, which FFmpeg here does not apply): "
            + "it cannot be re-encoded. \"video\": \"copy\" into MP4 keeps the stream and its Dolby Vision configuration as they are.")
    }
}
