import CCrypto
import Foundation

/// A streaming message digest (OpenSSL's EVP), owning its `EVP_MD_CTX`: SHA-256 for uploads, and the algorithms tus
/// clients may send a chunk's checksum in. Also the one-shot HMAC-SHA256 webhook signatures are made with.
public final class Digest {
    public enum Algorithm: String, CaseIterable, Sendable {
        case sha1, sha256, md5
    }

    public let algorithm: Algorithm
    private var context: OpaquePointer?

    public init(_ algorithm: Algorithm = .sha256) {
        self.algorithm = algorithm
        context = EVP_MD_CTX_new()
        let type = switch algorithm {
        case .sha1: EVP_sha1()
        case .sha256: EVP_sha256()
        case .md5: EVP_md5()
        }
        precondition(context != nil && EVP_DigestInit_ex(context, type, nil) == 1, "\(algorithm) is unavailable")
    }

    private init(_ algorithm: Algorithm, context: OpaquePointer?) {
        self.algorithm = algorithm
        self.context = context
    }

    /// Another digest in the state this one is in now, going on by itself from here.
    public func copy() -> Digest {
        let other = EVP_MD_CTX_new()
        precondition(other != nil && EVP_MD_CTX_copy_ex(other, context) == 1, "copying a \(algorithm) digest failed")
        return Digest(algorithm, context: other)
    }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        EVP_DigestUpdate(context, bytes.baseAddress, bytes.count)
    }

    /// The digest's bytes; the digest is spent afterwards.
    public func finishBytes() -> Data {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &digest, &length)
        return Data(digest.prefix(Int(length)))
    }

    /// The digest as lowercase hex; the digest is spent afterwards.
    public func finish() -> String {
        Self.hex(finishBytes())
    }

    /// `bytes` as lowercase hex.
    public static func hex(_ bytes: Data) -> String {
        bytes.map { byte in
            let digits = String(byte, radix: 16)
            return byte < 16 ? "0" + digits : digits
        }.joined()
    }

    /// HMAC-SHA256 of `message` under `key` (32 bytes).
    public static func hmacSHA256(key: Data, message: Data) -> Data {
        var mac = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        key.withUnsafeBytes { key in
            message.withUnsafeBytes { message in
                _ = HMAC(EVP_sha256(), key.baseAddress, Int32(key.count), message.bindMemory(to: UInt8.self).baseAddress,
                         message.count, &mac, &length)
            }
        }
        return Data(mac.prefix(Int(length)))
    }

    deinit { EVP_MD_CTX_free(context) }
}
