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
        /// When it was put (a count): the oldest goes first when the map is full.
        let order: Int

        init(offset: Int64, digest: Digest, order: Int) {
            self.offset = offset
            self.digest = digest
            self.order = order
        }
    }

    private let entries = LockedValue<(map: [String: Entry], puts: Int)>(([:], 0))
    private let capacity: Int

    init(capacity: Int = 1024) { self.capacity = capacity }

    /// Takes the digest of `id` if it covers exactly the first `offset` bytes (it is gone from here until `put` back);
    /// one that covers another length stays (a PATCH at a stale offset, refused, took it for nothing).
    func take(_ id: String, at offset: Int64) -> Digest? {
        entries.withLock { entries -> Digest? in
            guard let entry = entries.map[id], entry.offset == offset else { return nil }
            entries.map[id] = nil
            return entry.digest
        }
    }

    func put(_ id: String, _ digest: Digest, offset: Int64) {
        entries.withLock { entries in
            entries.puts += 1
            // Handed over: nothing else holds the digest from here on.
            let entry = Entry(offset: offset, digest: digest, order: entries.puts)
            if entries.map[id] == nil, entries.map.count >= capacity,
               let oldest = entries.map.min(by: { $0.value.order < $1.value.order })?.key {
                // The least recently written (an upload its client gave up, most likely), not every one.
                entries.map[oldest] = nil
            }
            entries.map[id] = entry
        }
    }

    func remove(_ id: String) { entries.withLock { _ = $0.map.removeValue(forKey: id) } }
}
