import Foundation

/// A URL as it may be shown or logged: user name and password, query values that look like credentials (a
/// presigned URL's `X-Amz-Signature`, `token`, `key`, `sig`…) and path segments that look like random tokens (Slack's
/// `/services/T0/B0/<secret>`, Discord's `/api/webhooks/<id>/<token>`), replaced by `REDACTED`; a fragment
/// (`#access_token=…`, never sent anyway) goes.
public enum RedactedURL {
    static let secretNames = ["sig", "token", "key", "secret", "password", "credential", "auth", "policy", "pass", "jwt", "hmac"]

    /// A path segment of 16 characters or more, of letters, digits, `-` and `_` only, with capitals, small letters
    /// and digits all three: a random token (a name, as `big-buck-bunny-1080p` or `clip.mp4`, or a lower-case id is
    /// not one).
    static func looksLikeToken(_ segment: Substring) -> Bool {
        segment.count >= 16
            && segment.unicodeScalars.allSatisfy { ($0.isASCII && CharacterSet.alphanumerics.contains($0)) || $0 == "-" || $0 == "_" }
            && segment.contains(where: \.isUppercase) && segment.contains(where: \.isLowercase) && segment.contains(where: \.isNumber)
    }

    public static func text(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "(an unparseable URL)" }
        if components.user != nil || components.password != nil {
            components.user = "REDACTED"
            components.password = nil
        }
        components.fragment = nil
        components.percentEncodedPath = components.percentEncodedPath.split(separator: "/", omittingEmptySubsequences: false)
            .map { looksLikeToken($0) ? "REDACTED" : String($0) }.joined(separator: "/")
        if let items = components.queryItems {
            components.queryItems = items.map { item in
                let name = item.name.lowercased()
                // `code`: Azure Functions' keys and OAuth's codes (only the whole name: `countrycode` is none).
                let secret = secretNames.contains(where: name.contains) || name == "code"
                return secret ? URLQueryItem(name: item.name, value: "REDACTED") : item
            }
        }
        return components.string ?? "(an unparseable URL)"
    }
}
