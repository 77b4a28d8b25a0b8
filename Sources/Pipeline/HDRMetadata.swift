import CFFmpeg
import Foundation

/// HDR10's static metadata as a source's container states it: the content light level (MaxCLL, MaxFALL) and the
/// mastering display's colour volume, FFmpeg's stream side data (MP4's `clli` and `mdcv`, Matroska's colour
/// metadata). An encoded output whose HDR is kept carries them on: without them a player or a TV guesses the peak,
/// and a film mastered at 4,000 cd/m² clips on a 1,000 cd/m² screen. Kept as bytes (`AVContentLightMetadata`,
/// `AVMasteringDisplayMetadata`), base64 in a checkpoint's manifest.
struct HDRMetadata: Codable, Equatable {
    var contentLightLevel: Data?
    var masteringDisplay: Data?

    /// What `stream` states; nil when it states neither.
    init?(stream: UnsafeMutablePointer<AVStream>) {
        func sideData(_ type: AVPacketSideDataType, size expected: Int) -> Data? {
            var size = 0
            guard let bytes = av_stream_get_side_data(stream, type, &size), size >= expected else { return nil }
            return Data(bytes: bytes, count: size)
        }
        contentLightLevel = sideData(AV_PKT_DATA_CONTENT_LIGHT_LEVEL, size: MemoryLayout<AVContentLightMetadata>.size)
        masteringDisplay = sideData(AV_PKT_DATA_MASTERING_DISPLAY_METADATA, size: MemoryLayout<AVMasteringDisplayMetadata>.size)
        if contentLightLevel == nil && masteringDisplay == nil { return nil }
    }

    /// States the metadata on `stream`, a new output stream (before the file's header is written).
    func attach(to stream: UnsafeMutablePointer<AVStream>) throws(MediaError) {
        for (type, bytes) in [(AV_PKT_DATA_CONTENT_LIGHT_LEVEL, contentLightLevel), (AV_PKT_DATA_MASTERING_DISPLAY_METADATA, masteringDisplay)] {
            guard let bytes, !bytes.isEmpty else { continue }
            guard let memory = av_stream_new_side_data(stream, type, bytes.count) else {
                throw MediaError(code: "out_of_memory", message: "Adding the HDR metadata to the output stream failed.")
            }
            bytes.copyBytes(to: memory, count: bytes.count)
        }
    }
}
