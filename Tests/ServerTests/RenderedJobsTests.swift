import Testing
@testable import Server

/// The cache of rendered job documents, as a value: bounded by bytes as well as by count.
@Suite struct RenderedJobsTests {
    /// 4096 documents were kept whatever their size (a long ladder's lists every file: 1.5 MB), and deleted jobs'
    /// stayed: gigabytes for a client polling its jobs.
    @Test func documentsAreBoundedByBytesAndGoWithTheirJobs() {
        var cache = RenderedJobs<Int>(maxEntries: 100, maxBytes: 1000)
        for index in 0..<10 { cache.insert(index, size: 100, for: "job\(index)") }
        #expect(cache.count == 10 && cache.bytes == 1000)
        cache.insert(10, size: 100, for: "job10") // past the budget: one other entry makes room, not all
        #expect(cache.count == 10 && cache.bytes == 1000 && cache["job10"] == 10)
        cache.insert(11, size: 125, for: "job10") // in place of the old one, counted once, another making room
        #expect(cache.count == 9 && cache.bytes == 925 && cache["job10"] == 11)
        cache.insert(12, size: 126, for: "big") // over an eighth of the budget: not kept
        #expect(cache["big"] == nil && cache.bytes == 925)
        cache.update("job10") { $0 += 1 }
        #expect(cache["job10"] == 12)
        cache.remove("job10")
        #expect(cache.count == 8 && cache.bytes == 800)
        var counted = RenderedJobs<Int>(maxEntries: 2, maxBytes: 1000)
        for index in 0..<3 { counted.insert(index, size: 1, for: "job\(index)") }
        #expect(counted.count == 2 && counted["job2"] == 2)
    }
}
