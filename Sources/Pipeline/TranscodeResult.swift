/// What a finished transcode produced.
public struct TranscodeResult: Sendable, Equatable, Codable {
    /// Path of the output file.
    public var path: String
    /// Size of the output in bytes.
    public var size: Int
    public var container: FileType
    /// The output's tracks, as read back from the written file.
    public var tracks: [Track]
    /// Output duration in seconds.
    public var duration: Double
    /// Video frames encoded (0 for copied or absent video).
    public var framesEncoded: Int
    /// Wall-clock seconds the transcode took.
    public var elapsed: Double
    /// MIME type to serve the file with.
    public var mimeType: String
    /// Every file of an output folder (nil for a lone file); `size` is their sum.
    public var files: [OutputFile]?
    /// Seconds of output an earlier attempt made that this one continued from (a checkpoint); nil otherwise.
    public var resumedFrom: Double?

    public init(path: String, size: Int, container: FileType, tracks: [Track], duration: Double, framesEncoded: Int,
                elapsed: Double, mimeType: String, files: [OutputFile]? = nil) {
        self.path = path
        self.size = size
        self.container = container
        self.tracks = tracks
        self.duration = duration
        self.framesEncoded = framesEncoded
        self.elapsed = elapsed
        self.mimeType = mimeType
        self.files = files
    }
}
