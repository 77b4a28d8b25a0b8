import Foundation
import Crypto
import Locks
import Testing
import TestSupport
@testable import Server

/// The upload writer against a disk that does not keep up (its only file thread held up): memory stays bounded
/// whatever the reads look like, and a busy writer never keeps a pool thread from the others.
@Suite struct UploadWriterTests {
    /// A pool of one thread, held until `release` is signalled.
    private func heldPool() -> (BlockingPool, DispatchSemaphore) {
        let pool = BlockingPool(name: "held", threads: 1)
        let release = DispatchSemaphore(value: 0)
        pool.submit { release.wait() }
        return (pool, release)
    }

    /// Partial uploads a process that died left: all of them without an age (a lone server's start), only those
    /// untouched for longer with one (shared storage, where other nodes' uploads and fetches in progress are).
    /// An upload's file that cannot be made or written says why in its status: a full disk 507, a server out of
    /// file descriptors 503 with Retry-After (a moment's load, tried again: it was a 500 `storage_error`).
    @Test func aFailedUploadWriteIsAnsweredByItsCause() {
        let full = FileSink.httpError(IOError(errnoCode: ENOSPC, reason: "writing"))
        #expect(full.status.code == 507 && full.code == "no_space")
        for code in [EMFILE, ENFILE] {
            let busy = FileSink.httpError(IOError(errnoCode: code, reason: "creating the upload file"))
            #expect(busy.status.code == 503 && busy.code == "server_busy" && busy.headers["Retry-After"] == "2", "\(busy)")
        }
        #expect(FileSink.httpError(IOError(errnoCode: EIO, reason: "writing")).status.code == 500)
    }

    @Test func leftoverPartialUploadsAreRemovedByAge() throws {
        let folder = try Media.scratch()
        func file(_ name: String, secondsAgo: Double) throws {
            let path = folder.appendingPathComponent(name).path
            #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-secondsAgo)], ofItemAtPath: path)
        }
        try file(".upload-old.partial", secondsAgo: 7200)
        try file(".upload-fetch-old-2.partial", secondsAgo: 7200)
        try file(".upload-new.partial", secondsAgo: 60)
        try file("an-upload", secondsAgo: 7200)
        #expect(FileSink.removeLeftovers(in: folder, olderThan: 3600) == 2)
        #expect(Media.files(in: folder) == [".upload-new.partial", "an-upload"])
        #expect(FileSink.removeLeftovers(in: folder) == 1)
        #expect(Media.files(in: folder) == ["an-upload"])
    }

    @Test func readsStopWhenEveryBufferIsInFlightWhateverTheirSizes() throws {
        let (pool, release) = heldPool()
        let path = try Media.scratch().appendingPathComponent("upload").path
        let writer = UploadWriter(path: path, pool: pool)
        // Reads of odd sizes (multipart and chunked bodies go through append): the current buffer is never empty.
        let read = Data(repeating: 7, count: 100_000)
        var reads = 0
        while writer.whenSpace({}) && reads < 1000 {
            try read.withUnsafeBytes { try writer.append($0) }
            reads += 1
        }
        // What the buffers hold, plus the one read that may overflow into a fresh buffer.
        let bound = UploadWriter.maxBuffers * UploadWriter.bufferBytes + read.count
        #expect(reads * read.count <= bound, "\(reads) reads taken with the file thread stuck (bound \(bound) bytes)")
        #expect(writer.buffersAllocated <= UploadWriter.maxBuffers, "\(writer.buffersAllocated) buffers")
        release.signal()
        writer.finish()
        _ = try writer.complete()
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        #expect(size == reads * read.count, "every byte taken was written")
        pool.shutdown()
    }

    /// Buffers past an upload's first come from the server's budget: with the disk stuck, two uploads hold their
    /// first buffer each and the budget's two more between them, not eight each (2 MiB a connection, 8 GiB over
    /// 4096); the one left without the budget's waits for its own buffer and goes on when it comes back.
    @Test func uploadsShareOneBudgetForTheirBuffersPastTheFirst() throws {
        let (pool, release) = heldPool()
        let memory = BodyMemory(limit: 2 * UploadWriter.bufferBytes)
        let folder = try Media.scratch()
        let first = UploadWriter(path: folder.appendingPathComponent("first").path, pool: pool, memory: memory)
        let second = UploadWriter(path: folder.appendingPathComponent("second").path, pool: pool, memory: memory)
        /// Reads straight into the writer's buffers, as the loop does, while it says there is room.
        func fill(_ writer: UploadWriter, resume: @escaping @Sendable () -> Void = {}) throws -> Int {
            var bytes = 0
            while writer.whenSpace(resume) && bytes < 100 * UploadWriter.bufferBytes {
                let space = writer.reserve()
                space.initializeMemory(as: UInt8.self, repeating: UInt8(bytes % 251))
                try writer.commit(space.count)
                bytes += space.count
            }
            return bytes
        }
        let firstBytes = try fill(first)
        #expect(first.buffersAllocated == 3, "its own buffer and the budget's two: \(first.buffersAllocated)")
        #expect(memory.inUse == 2 * UploadWriter.bufferBytes)
        let resumed = DispatchSemaphore(value: 0)
        let secondBytes = try fill(second) { resumed.signal() }
        #expect(second.buffersAllocated == 1, "the budget is spent: its own buffer only, \(second.buffersAllocated)")
        #expect(secondBytes == UploadWriter.bufferBytes)
        release.signal()
        #expect(resumed.wait(timeout: .now() + 10) == .success, "the second upload goes on once its buffer is written")
        let more = try fill(second)
        #expect(more > 0)
        first.finish()
        second.finish()
        _ = try first.complete()
        _ = try second.complete()
        func size(_ name: String) throws -> Int {
            try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent(name).path)[.size] as? Int ?? -1
        }
        #expect(try size("first") == firstBytes)
        #expect(try size("second") == secondBytes + more)
        #expect(memory.inUse == 0, "every budgeted buffer is given back: \(memory.inUse) bytes still held")
        pool.shutdown()
    }

    /// An upload whose client slows after the disk lagged holds none of the budget once its writes are done: kept
    /// on its free list, the budget stayed with idle uploads for hours and every other upload had one buffer.
    @Test func anUploadThatGoesQuietGivesItsBudgetedBuffersBack() throws {
        let (pool, release) = heldPool()
        let memory = BodyMemory(limit: 4 * UploadWriter.bufferBytes)
        let writer = UploadWriter(path: try Media.scratch().appendingPathComponent("quiet").path, pool: pool, memory: memory)
        var bytes = 0
        while writer.whenSpace({}) && bytes < 100 * UploadWriter.bufferBytes {
            let space = writer.reserve()
            space.initializeMemory(as: UInt8.self, repeating: 1)
            try writer.commit(space.count)
            bytes += space.count
        }
        #expect(memory.inUse == 4 * UploadWriter.bufferBytes)
        release.signal()
        // Its writes end; no read comes (the client went quiet), the upload is not finished.
        let deadline = Date().addingTimeInterval(5)
        // The budget comes back when the write's work item lets its buffer go, a moment after the count drops.
        while (writer.buffersAllocated > 1 || memory.inUse > 0) && Date() < deadline { usleep(10_000) }
        #expect(writer.buffersAllocated == 1, "\(writer.buffersAllocated) buffers")
        #expect(memory.inUse == 0, "\(memory.inUse) bytes of the budget held by an idle upload")
        let space = writer.whenSpace({})
        #expect(space, "its own buffer is there for the next read")
        writer.finish()
        _ = try writer.complete()
        pool.shutdown()
    }

    @Test func aBusyExecutorLetsAnotherOneRunBetweenItsItems() {
        let pool = BlockingPool(name: "fair", threads: 1)
        let busy = SerialExecutor(pool: pool), other = SerialExecutor(pool: pool)
        let order = LockedValue<[String]>([])
        let done = DispatchSemaphore(value: 0), submitted = DispatchSemaphore(value: 0)
        // The busy one's first item waits until the other's is submitted: a test thread held up on a loaded machine
        // let the pool run the busy items meanwhile, which said nothing of fairness.
        busy.submit { submitted.wait(); order.withLock { $0.append("busy-0") } }
        for index in 1..<50 { busy.submit { usleep(1000); order.withLock { $0.append("busy-\(index)") } } }
        other.submit { order.withLock { $0.append("other") }; done.signal() }
        submitted.signal()
        done.wait()
        let position = order.withLock { $0.firstIndex(of: "other") ?? .max }
        #expect(position <= 1, "the other executor's item ran after \(position) of the busy one's")
        pool.shutdown()
    }

    /// The running hashes of tus uploads: one asked for at another length stays (a PATCH at a stale offset took it
    /// for nothing), and a full map lets its oldest go, not every one (an upload that lost its hash reads its whole
    /// file again at completion).
    @Test func tusHashesStayUntilAskedAtTheirLengthAndTheOldestGoesFirst() {
        let digests = TusDigests(capacity: 2)
        let first = Digest(), second = Digest(), third = Digest()
        digests.put("a", first, offset: 10)
        #expect(digests.take("a", at: 9) == nil)
        #expect(digests.take("a", at: 10) === first, "still there after the stale ask")
        digests.put("a", first, offset: 10)
        digests.put("b", second, offset: 20)
        digests.put("a", first, offset: 30) // a's next PATCH: a is now the newest
        digests.put("c", third, offset: 40)
        #expect(digests.take("b", at: 20) == nil, "the oldest went")
        #expect(digests.take("a", at: 30) === first && digests.take("c", at: 40) === third, "the others stayed")
    }
}
