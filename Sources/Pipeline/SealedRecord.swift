import Foundation

/// A checkpoint record that carries the SHA-256 of its own JSON (sorted keys, the checksum left out): read back, it
/// is taken only as it was written. The files a checkpoint lists have their checksums; the numbers that say where
/// a resume starts and how its streams are set up had none, and a flipped bit that left the JSON valid (a time, a
/// byte of the encoder's parameters) gave wrong output with the job succeeding.
protocol SealedRecord: Codable {
    var checksum: String? { get set }
}

extension SealedRecord {
    /// The record with its checksum set; nil when it cannot be encoded.
    func sealed() -> Self? {
        var copy = self
        copy.checksum = nil
        guard let digest = Self.digest(of: copy) else { return nil }
        copy.checksum = digest
        return copy
    }

    /// Whether the record carries a checksum and it matches what it holds.
    var isIntact: Bool {
        guard let checksum else { return false }
        var copy = self
        copy.checksum = nil
        return Self.digest(of: copy) == checksum
    }

    private static func digest(of record: Self) -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(record) else { return nil }
        let hasher = SHA256Hasher()
        data.withUnsafeBytes { hasher.update($0) }
        return hasher.finish()
    }
}
