/// RFC 6381 codec strings, as HLS `CODECS` and DASH `@codecs` carry them, read from the real streams.
enum CodecString {
    /// `avc1.PPCCLL` from an H.264 encoder's extradata: profile, constraint flags and level of its SPS. The extradata
    /// is an `avcC` record (first byte 1) or Annex B NAL units (start codes).
    static func avc(extradata: [UInt8]) -> String? {
        let fields: ArraySlice<UInt8>
        if extradata.first == 1, extradata.count >= 4 {
            fields = extradata[1...3]
        } else {
            var index = 0
            var found: ArraySlice<UInt8>?
            while index + 3 < extradata.count {
                if extradata[index] == 0, extradata[index + 1] == 0, extradata[index + 2] == 1 {
                    let header = index + 3
                    if extradata[header] & 0x1F == 7, header + 3 < extradata.count {
                        found = extradata[header + 1 ... header + 3]
                        break
                    }
                    index = header
                } else {
                    index += 1
                }
            }
            guard let found else { return nil }
            fields = found
        }
        return "avc1." + fields.map { byte in
            let text = String(byte, radix: 16, uppercase: false)
            return text.count == 1 ? "0" + text : text
        }.joined()
    }

    /// AAC-LC, the profile FFmpeg's AAC encoder writes.
    static let aacLC = "mp4a.40.2"
}
