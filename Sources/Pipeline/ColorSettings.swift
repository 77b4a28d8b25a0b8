/// The colour description asked for in `video.color`, as AVFoundation's colour properties name it.
public struct ColorSettings: Sendable, Equatable, Codable {
    /// `bt709` or `bt601` (SMPTE 170M).
    public var primaries: String?
    /// `bt709` or `bt601`.
    public var transfer: String?
    /// Matrix coefficients: `bt709` or `bt601`.
    public var matrix: String?
    /// `tv` (limited, 16-235) or `pc` (full, 0-255).
    public var range: String?
    /// What becomes of an HDR source (PQ or HLG): `tonemap` (the default) maps it to SDR BT.709, since 8-bit H.264
    /// cannot carry HDR without banding and most screens and browsers would show it washed out or dark; `keep`
    /// passes its values and tags through as they are.
    public var hdr: String?

    static let standards = ["bt709", "bt601"]

    public init(primaries: String? = nil, transfer: String? = nil, matrix: String? = nil, range: String? = nil,
                hdr: String? = nil) {
        self.primaries = primaries
        self.transfer = transfer
        self.matrix = matrix
        self.range = range
        self.hdr = hdr
    }

    /// Whether an HDR source is tone-mapped to SDR (`hdr` is not `keep`).
    var toneMapsHDR: Bool { hdr != "keep" }

    init(_ value: JSONValue, path: String) throws(SettingsError) {
        let reader = try SettingsReader(value, path: path, allowed: ["primaries", "transfer", "matrix", "range", "hdr"])
        primaries = try reader.string("primaries", oneOf: Self.standards)
        transfer = try reader.string("transfer", oneOf: Self.standards)
        matrix = try reader.string("matrix", oneOf: Self.standards)
        range = try reader.string("range", oneOf: ["tv", "pc"])
        hdr = try reader.string("hdr", oneOf: ["tonemap", "keep"])
    }
}
