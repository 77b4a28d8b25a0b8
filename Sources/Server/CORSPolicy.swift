/// Which other origins may read a job's output files from a browser (`--cors-origin`): none by default, `*` for
/// any, or a comma-separated list of origins (`https://player.example.com`). Applies to the output routes (a player
/// page elsewhere fetches playlists, segments, posters and storyboards) and to tus uploads (an upload page
/// elsewhere); the rest of the API stays same-origin.
public struct CORSPolicy: Sendable, Equatable {
    /// `*`, or the origins allowed exactly as browsers send them (scheme, host, port).
    public let origins: [String]

    public init(_ value: String?) {
        origins = (value ?? "").split(separator: ",").map { Self.serialized($0.trimmingCharacters(in: .whitespaces)) }
            .filter { !$0.isEmpty }
    }

    /// An origin as browsers send it (WHATWG: scheme and host in lower case, no default port), so that
    /// `https://Player.example.com:443` allows the page the browser calls `https://player.example.com`.
    static func serialized(_ origin: String) -> String {
        let lowered = origin.lowercased()
        for (scheme, port) in [("http://", ":80"), ("https://", ":443")] where lowered.hasPrefix(scheme) && lowered.hasSuffix(port) {
            return String(lowered.dropLast(port.count))
        }
        return lowered
    }

    public var isEnabled: Bool { !origins.isEmpty }

    /// The headers of an output file's answer a page on another origin may read.
    static let exposedByOutputs = "Content-Length, Content-Range, Accept-Ranges, ETag, Location, Content-Disposition"

    /// Response headers that let the requesting origin read the answer (none when it is not allowed).
    func headers(for request: HTTPHeaders,
                 exposing exposed: String = Self.exposedByOutputs) -> [(String, String)] {
        var fields: [(String, String)]
        if origins.contains("*") {
            fields = [("Access-Control-Allow-Origin", "*")]
        } else if let origin = request["Origin"], origins.contains(origin) {
            fields = [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
        } else {
            // The answer depends on the Origin even when it names none allowed: a cache that kept a copy fetched
            // without one (a <video> or <img>) must not hand it to the allowed page's fetch, which needs the header.
            return isEnabled ? [("Vary", "Origin")] : []
        }
        // Players read a segment's length and range, and revalidate with the ETag; a download page the file's
        // name; tus clients their offsets.
        fields.append(("Access-Control-Expose-Headers", exposed))
        return fields
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`): reads with ranges and validators.
    func preflight(for request: HTTPHeaders, methods: String = "GET, HEAD, OPTIONS",
                   headers allowedHeaders: String = "Range, If-None-Match, If-Modified-Since, If-Match, If-Unmodified-Since, If-Range, Authorization",
                   exposing exposed: String = Self.exposedByOutputs) -> [(String, String)] {
        let allowed = headers(for: request, exposing: exposed)
        guard allowed.contains(where: { $0.0 == "Access-Control-Allow-Origin" }) else { return allowed }
        return allowed + [
            ("Access-Control-Allow-Methods", methods),
            ("Access-Control-Allow-Headers", allowedHeaders),
            ("Access-Control-Max-Age", "600"),
        ]
    }
}
