import Foundation

/// A URL as it may be shown or logged: user name and password, and query values that look like credentials
/// (a presigned URL's `X-Amz-Signature`, `token`, `key`, `sig`…), replaced by `REDACTED`.
public enum RedactedURL {
    static let secretNames = ["sig", "token", "key", "secret", "password", "credential", "auth", "policy"]

    public static func text(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "(an unparseable URL)" }
        if components.user != nil || components.password != nil {
            components.user = "REDACTED"
            components.password = nil
        }
        if let items = components.queryItems {
            components.queryItems = items.map { item in
                let name = item.name.lowercased()
                return secretNames.contains(where: name.contains) ? URLQueryItem(name: item.name, value: "REDACTED") : item
            }
        }
        return components.string ?? "(an unparseable URL)"
    }
}
