import Foundation

/// A URL as it may be shown or logged: user name and password, query values that look like credentials (a
/// presigned URL's `X-Amz-Signature`, `token`, `key`, `sig`…) and path segments that look like random tokens (Slack's
/// `/services/T0/B0/<secret>`, Discord's `/api/webhooks/<id>/<token>`, Teams' `/IncomingWebhook/<32 hex>/`,
/// Telegram's `/bot<id>:<secret>/`, a JSON Web Token),
/// replaced by `REDACTED`; a fragment (`#access_token=…`, never sent anyway) goes.
public enum RedactedURL {
    static let secretNames = ["sig", "token", "key", "secret", "password", "credential", "auth", "policy", "pass", "jwt", "hmac"]

    /// A path segment of 16 characters or more, of letters, digits, `-` and `_` only, with capitals, small letters
    /// and digits all three, or of 20 or more letters and digits, capitals and small letters, whose case changes at
    /// least every fourth character (a random secret holds no digit now and then: one Slack secret in 70); or of 24
    /// or more small letters and digits, both, and nothing else (Microsoft Teams' and Make's webhook URLs hold a
    /// 32-character lower-case secret so): a random token. A name, as `big-buck-bunny-1080p`, `clip.mp4` or
    /// `AnnualReportPresentation`, or an id with dashes (a UUID) is not one; a CamelCase name of short words may be
    /// hidden too (in what is shown only).
    static func looksLikeToken(_ segment: Substring) -> Bool {
        let scalars = segment.unicodeScalars
        let mixedCase = segment.contains(where: \.isUppercase) && segment.contains(where: \.isLowercase)
        let mixed = segment.count >= 16
            && scalars.allSatisfy(isTokenCharacter)
            && mixedCase && segment.contains(where: \.isNumber)
        let changes = zip(segment, segment.dropFirst()).filter { $0.isUppercase != $1.isUppercase }.count
        let letters = segment.count >= 20 && mixedCase && changes * 4 >= segment.count
            && scalars.allSatisfy { $0.isASCII && CharacterSet.alphanumerics.contains($0) }
        let lowerCase = segment.count >= 24
            && scalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) }
            && segment.contains(where: \.isLetter) && segment.contains(where: \.isNumber)
        return mixed || letters || lowerCase
    }

    /// A path segment to hide: one that looks like a token, or that holds one after a `:` (Telegram's
    /// `bot<id>:<secret>`, which API file URLs and webhooks carry), or a JSON Web Token (`eyJ…` in three parts).
    static func isSecret(_ segment: Substring) -> Bool {
        if looksLikeToken(segment) { return true }
        let parts = segment.replacingOccurrences(of: "%3A", with: ":", options: .caseInsensitive).split(separator: ":")
        // After a colon, any long run of a token's characters: a random secret has no digit now and then.
        if parts.count > 1, parts.contains(where: { looksLikeToken($0) || ($0.count >= 30 && $0.unicodeScalars.allSatisfy(isTokenCharacter)) }) {
            return true
        }
        return segment.hasPrefix("eyJ") && segment.split(separator: ".", omittingEmptySubsequences: false).count == 3
    }

    private static func isTokenCharacter(_ scalar: Unicode.Scalar) -> Bool {
        (scalar.isASCII && CharacterSet.alphanumerics.contains(scalar)) || scalar == "-" || scalar == "_"
    }

    public static func text(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "(an unparseable URL)" }
        if components.user != nil || components.password != nil {
            components.user = "REDACTED"
            components.password = nil
        }
        components.fragment = nil
        components.percentEncodedPath = components.percentEncodedPath.split(separator: "/", omittingEmptySubsequences: false)
            .map { isSecret($0) ? "REDACTED" : String($0) }.joined(separator: "/")
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
