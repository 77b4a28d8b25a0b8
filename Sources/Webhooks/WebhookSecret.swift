import Crypto
import Foundation

/// The key webhook signatures are made with, after the Standard Webhooks specification: `whsec_` followed by the
/// base64 of 24 to 64 random bytes. A receiver verifies `webhook-signature` with the same secret.
public struct WebhookSecret: Sendable, Equatable {
    public let key: Data

    /// Parses `whsec_<base64>`; nil when it is not one (wrong prefix, not base64, fewer than 24 or more than 64 bytes).
    public init?(_ text: String) {
        guard text.hasPrefix("whsec_"), let key = Data(base64Encoded: String(text.dropFirst(6))), (24...64).contains(key.count) else {
            return nil
        }
        self.key = key
    }

    /// A fresh secret of 32 random bytes.
    public static func generate() -> WebhookSecret {
        var generator = SystemRandomNumberGenerator()
        return WebhookSecret(key: Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }))
    }

    private init(key: Data) { self.key = key }

    public var text: String { "whsec_" + key.base64EncodedString() }

    /// The `webhook-signature` value for one attempt: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`.
    public func signature(id: String, timestamp: Int, body: Data) -> String {
        let message = Data("\(id).\(timestamp).".utf8) + body
        return "v1," + Digest.hmacSHA256(key: key, message: message).base64EncodedString()
    }
}
