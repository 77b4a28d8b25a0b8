@testable import Server
import Testing

@Suite struct BoundedCacheTests {
    /// Full, one entry makes room, not all of them: players of 65 ladders asking in turn missed nearly every time
    /// when the cache of 64 was cleared once full (every request then read and decoded its job's whole file list).
    @Test func oneEntryMakesRoomWhenFull() {
        var cache = BoundedCache<Int, String>(capacity: 3)
        for key in 1...3 { cache.set("\(key)", for: key) }
        cache.set("4", for: 4)
        #expect(cache.count == 3 && cache[4] == "4")
        #expect([1, 2, 3].filter { cache[$0] != nil }.count == 2, "one of the others went")
        // A key set again replaces its value without removing another.
        cache.set("four", for: 4)
        #expect(cache.count == 3 && cache[4] == "four")
        var large = BoundedCache<Int, Int>(capacity: 64)
        var misses = 0
        for _ in 0..<10 {
            for job in 0..<65 where large[job] == nil {
                misses += 1
                large.set(job, for: job)
            }
        }
        // Cleared when full, or least recently used: 650. At random: some 85.
        #expect(misses < 200, "\(misses) of 650 asks missed")
    }
}
