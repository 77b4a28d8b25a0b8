/// A settings document that cannot be used, with the key at fault (dotted, e.g. `video.profile`).
public struct SettingsError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Dotted path of the key, empty for the document itself.
    public let key: String
    /// What is expected there.
    public let message: String

    public init(key: String, message: String) {
        self.key = key
        self.message = message
    }

    /// Stable code for API errors.
    public var code: String { "invalid_settings" }

    /// `key: message`, e.g. `video.profile: expected one of baseline, main, high`.
    public var description: String { key.isEmpty ? message : "\(key): \(message)" }
}
