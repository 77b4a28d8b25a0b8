import CFFmpeg
import Foundation

/// What an output stream needs to be written without its encoder: an encoder's `AVCodecParameters`, its time base
/// and frame rate, kept in a checkpoint's manifest so that a later attempt can mux packets an earlier one encoded.
/// Equal parameters (SPS and PPS, AudioSpecificConfig included) also say the earlier encoder was set up the same.
struct StreamParameters: Codable, Equatable {
    var mediaType: Int32
    var codecID: UInt32
    /// The encoder's extradata, base64.
    var extradata: String
    var format: Int32
    var bitRate: Int64
    var profile: Int32
    var level: Int32
    var width: Int32
    var height: Int32
    var sampleAspectRatio: [Int32]
    var fieldOrder: UInt32
    var colorRange: UInt32
    var colorPrimaries: UInt32
    var colorTransfer: UInt32
    var colorSpace: UInt32
    var chromaLocation: UInt32
    var videoDelay: Int32
    var channels: Int32
    /// The channel mask of a native-order layout (0 otherwise: the default layout for `channels`).
    var channelMask: UInt64
    var sampleRate: Int32
    var frameSize: Int32
    var initialPadding: Int32
    var timeBase: [Int32]
    var frameRate: [Int32]
    /// A kept HDR source's metadata (absent from older manifests: none).
    var hdrMetadata: HDRMetadata?

    /// The parameters of an opened encoder.
    init(encoder: StreamEncoder) throws(MediaError) {
        guard let parameters = avcodec_parameters_alloc() else { throw MediaError(code: "out_of_memory", message: "Allocating stream parameters failed.") }
        defer {
            var owned: UnsafeMutablePointer<AVCodecParameters>? = parameters
            avcodec_parameters_free(&owned)
        }
        try FFmpeg.check(avcodec_parameters_from_context(parameters, encoder.context), "Describing the checkpoint stream")
        let value = parameters.pointee
        let context = encoder.context!.pointee
        mediaType = value.codec_type.rawValue
        codecID = value.codec_id.rawValue
        extradata = value.extradata_size > 0
            ? Data(UnsafeBufferPointer(start: value.extradata, count: Int(value.extradata_size))).base64EncodedString() : ""
        format = value.format
        bitRate = value.bit_rate
        profile = value.profile
        level = value.level
        width = value.width
        height = value.height
        sampleAspectRatio = [context.sample_aspect_ratio.num, context.sample_aspect_ratio.den]
        fieldOrder = value.field_order.rawValue
        colorRange = value.color_range.rawValue
        colorPrimaries = value.color_primaries.rawValue
        colorTransfer = value.color_trc.rawValue
        colorSpace = value.color_space.rawValue
        chromaLocation = value.chroma_location.rawValue
        videoDelay = value.video_delay
        channels = value.ch_layout.nb_channels
        channelMask = value.ch_layout.order == AV_CHANNEL_ORDER_NATIVE ? value.ch_layout.u.mask : 0
        sampleRate = value.sample_rate
        frameSize = value.frame_size
        initialPadding = value.initial_padding
        timeBase = [encoder.timeBase.num, encoder.timeBase.den]
        frameRate = [context.framerate.num, context.framerate.den]
        hdrMetadata = encoder.hdrMetadata
    }

    var rationalTimeBase: AVRational { AVRational(num: timeBase[0], den: timeBase[1]) }

    var isVideo: Bool { mediaType == AVMEDIA_TYPE_VIDEO.rawValue }

    /// Describes `stream` (a new stream of an output file) with these parameters.
    func apply(to stream: UnsafeMutablePointer<AVStream>) throws(MediaError) {
        let parameters = stream.pointee.codecpar!
        parameters.pointee.codec_type = AVMediaType(rawValue: mediaType)
        parameters.pointee.codec_id = AVCodecID(rawValue: codecID)
        parameters.pointee.codec_tag = 0
        if let bytes = Data(base64Encoded: extradata), !bytes.isEmpty {
            guard let memory = av_mallocz(bytes.count + Int(AV_INPUT_BUFFER_PADDING_SIZE)) else {
                throw MediaError(code: "out_of_memory", message: "Allocating stream headers failed.")
            }
            bytes.copyBytes(to: memory.assumingMemoryBound(to: UInt8.self), count: bytes.count)
            parameters.pointee.extradata = memory.assumingMemoryBound(to: UInt8.self)
            parameters.pointee.extradata_size = Int32(bytes.count)
        }
        parameters.pointee.format = format
        parameters.pointee.bit_rate = bitRate
        parameters.pointee.profile = profile
        parameters.pointee.level = level
        parameters.pointee.width = width
        parameters.pointee.height = height
        parameters.pointee.sample_aspect_ratio = AVRational(num: sampleAspectRatio[0], den: sampleAspectRatio[1])
        parameters.pointee.field_order = AVFieldOrder(rawValue: fieldOrder)
        parameters.pointee.color_range = AVColorRange(rawValue: colorRange)
        parameters.pointee.color_primaries = AVColorPrimaries(rawValue: colorPrimaries)
        parameters.pointee.color_trc = AVColorTransferCharacteristic(rawValue: colorTransfer)
        parameters.pointee.color_space = AVColorSpace(rawValue: colorSpace)
        parameters.pointee.chroma_location = AVChromaLocation(rawValue: chromaLocation)
        parameters.pointee.video_delay = videoDelay
        if channels > 0 {
            av_channel_layout_uninit(&parameters.pointee.ch_layout)
            if channelMask != 0 {
                try FFmpeg.check(av_channel_layout_from_mask(&parameters.pointee.ch_layout, channelMask), "Describing the audio channels")
            } else {
                FFmpeg.defaultChannelLayout(&parameters.pointee.ch_layout, channels: channels)
            }
        }
        parameters.pointee.sample_rate = sampleRate
        parameters.pointee.frame_size = frameSize
        parameters.pointee.initial_padding = initialPadding
        stream.pointee.time_base = rationalTimeBase
        if isVideo {
            stream.pointee.sample_aspect_ratio = AVRational(num: sampleAspectRatio[0], den: sampleAspectRatio[1])
            stream.pointee.avg_frame_rate = AVRational(num: frameRate[0], den: frameRate[1])
        }
        try hdrMetadata?.attach(to: stream)
    }
}
