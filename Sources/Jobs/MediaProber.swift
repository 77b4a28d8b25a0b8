import Pipeline

/// Reads an uploaded file's tracks. Two kinds: in this process (`InProcessProber`, for tools and tests) and in a
/// sandboxed child (`ChildProcessRunner`, what the server uses: probing runs FFmpeg's decoders on untrusted bytes).
public protocol MediaProber: Sendable {
    func probe(path: String) throws(MediaError) -> [Track]
}

/// Probes in this process, with the same locked-down opening as a transcode.
public struct InProcessProber: MediaProber {
    public init() {}

    public func probe(path: String) throws(MediaError) -> [Track] {
        try TranscodeSession.probe(path: path)
    }
}
