/// At most `capacity` values by key; past it a value picked at random goes to make room. Random, not the least
/// recently used: players of one job more than it holds ask in turn, which makes every ask miss under LRU (as it
/// did when the whole cache was cleared once full) and few under a random choice. A value: kept under its owner's
/// lock, tested without it.
struct BoundedCache<Key: Hashable, Value> {
    let capacity: Int
    private var entries: [Key: Value] = [:]

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { entries.count }

    subscript(key: Key) -> Value? { entries[key] }

    /// Keeps `value` for `key`, first removing another entry at random when full.
    mutating func set(_ value: Value, for key: Key) {
        if entries[key] == nil, entries.count >= capacity, let victim = entries.keys.randomElement() {
            entries.removeValue(forKey: victim)
        }
        entries[key] = value
    }
}
