/// Rendered job documents by job id, for pollers of jobs that are not moving, bounded by count and by bytes: a
/// ladder's document lists every file (a 2 h one, some 1.5 MB), and 4096 of them were kept whatever their size,
/// deleted jobs' among them (an API delete now removes its job's; one removed by retention or another node stays until
/// an entry makes room). A document over an eighth of the budget is not kept; one that would pass the budget removes
/// entries picked at random until it fits (as `BoundedCache`: pollers of more jobs than it holds, in turn, missed
/// nearly every time when the whole cache was emptied).
struct RenderedJobs<Entry> {
    private var entries: [String: (entry: Entry, bytes: Int)] = [:]
    /// Bytes of every document kept.
    private(set) var bytes = 0
    let maxEntries: Int
    let maxBytes: Int

    init(maxEntries: Int = 4096, maxBytes: Int = 32 << 20) {
        self.maxEntries = maxEntries
        self.maxBytes = maxBytes
    }

    var count: Int { entries.count }

    subscript(id: String) -> Entry? { entries[id]?.entry }

    /// Changes the entry of `id`, if there is one.
    mutating func update(_ id: String, _ change: (inout Entry) -> Void) {
        guard var kept = entries[id] else { return }
        change(&kept.entry)
        entries[id] = kept
    }

    /// Keeps `entry`, a document of `size` bytes, for `id` (in place of what it had).
    mutating func insert(_ entry: Entry, size: Int, for id: String) {
        remove(id)
        guard size <= maxBytes / 8 else { return }
        while entries.count >= maxEntries || bytes + size > maxBytes, let victim = entries.keys.randomElement() {
            remove(victim)
        }
        entries[id] = (entry, size)
        bytes += size
    }

    mutating func remove(_ id: String) {
        if let gone = entries.removeValue(forKey: id) { bytes -= gone.bytes }
    }
}
