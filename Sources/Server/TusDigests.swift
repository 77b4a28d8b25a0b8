import Crypto
import Locks

/// The running SHA-256 of each resumable upload this process is receiving, with the offset it covers: when the next
/// PATCH starts there, it goes on hashing instead of the completion reading the whole file again. Lost on restart
/// (then the completion reads the file); at most `capacity` uploads are kept.
final class TusDigests: @unchecked Sendable {
    // Safe to share: a Digest is handed over whole under the lock, and used by one writer at a time after that.
    private final class Entry: @unchecked Sendable {
        let offset: Int64
        let digest: Digest

        init(offset: Int64, digest: Digest) {
            self.offset = offset
            self.digest = digest
        }
    }

    private let entries = LockedValue<[String: Entry]>([:])
    private let capacity: Int

    init(capacity: Int = 1024) { self.capacity = capacity }

    /// Takes the digest of `id` if it covers exactly the first `offset` bytes (it is gone from here until `put` back).
    func take(_ id: String, at offset: Int64) -> Digest? {
        entries.withLock { entries -> Digest? in
            guard let entry = entries.removeValue(forKey: id), entry.offset == offset else { return nil }
            return entry.digest
        }
    }

    func put(_ id: String, _ digest: Digest, offset: Int64) {
        let entry = Entry(offset: offset, digest: digest) // handed over: nothing else holds the digest from here on
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll() }
            entries[id] = entry
        }
    }

    func remove(_ id: String) { entries.withLock { _ = $0.removeValue(forKey: id) } }
}
