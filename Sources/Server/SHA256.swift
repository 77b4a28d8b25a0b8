import CCrypto

/// A streaming SHA-256 (OpenSSL's EVP), owning its `EVP_MD_CTX`.
final class SHA256 {
    private var context: OpaquePointer?

    init() {
        context = EVP_MD_CTX_new()
        precondition(context != nil && EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1, "SHA-256 is unavailable")
    }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        EVP_DigestUpdate(context, bytes.baseAddress, bytes.count)
    }

    /// The digest as lowercase hex; the hasher is spent afterwards.
    func finish() -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &digest, &length)
        return digest.prefix(Int(length)).map(Self.hex).joined()
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16)
        return byte < 16 ? "0" + digits : digits
    }

    deinit { EVP_MD_CTX_free(context) }
}

