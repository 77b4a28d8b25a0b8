/// Which other origins may read a job's output files from a browser (`--cors-origin`): none by default, `*` for
/// any, or a comma-separated list of origins (`https://player.example.com`). Applies to the output routes (a player
/// page elsewhere fetches playlists, segments, posters and storyboards) and to tus uploads (an upload page
/// elsewhere); the rest of the API stays same-origin.
public struct CORSPolicy: Sendable, Equatable {
    /// `*`, or the origins allowed exactly as browsers send them (scheme, host, port).
    public let origins: [String]

    public init(_ value: String?) {
        origins = (value ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    public var isEnabled: Bool { !origins.isEmpty }

    /// Whether `origin` (a request's `Origin`) is one allowed.
    func allows(origin: String?) -> Bool {
        origins.contains("*") || origin.map { origins.contains($0) } ?? false
    }

    /// Response headers that let the requesting origin read the answer (none when it is not allowed).
    func headers(for request: HTTPHeaders,
                 exposing exposed: String = "Content-Length, Content-Range, Accept-Ranges, ETag, Location") -> [(String, String)] {
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
        // Players read a segment's length and range, and revalidate with the ETag; tus clients their offsets.
        fields.append(("Access-Control-Expose-Headers", exposed))
        return fields
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`): reads with ranges and validators.
    func preflight(for request: HTTPHeaders, methods: String = "GET, HEAD, OPTIONS",
                   headers allowedHeaders: String = "Range, If-None-Match, If-Range, Authorization",
                   exposing exposed: String = "Content-Length, Content-Range, Accept-Ranges, ETag, Location") -> [(String, String)] {
        let allowed = headers(for: request, exposing: exposed)
        guard allowed.contains(where: { $0.0 == "Access-Control-Allow-Origin" }) else { return allowed }
        return allowed + [
            ("Access-Control-Allow-Methods", methods),
            ("Access-Control-Allow-Headers", allowedHeaders),
            ("Access-Control-Max-Age", "600"),
        ]
    }
}
