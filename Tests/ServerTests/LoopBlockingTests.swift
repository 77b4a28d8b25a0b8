import Foundation
import Testing
import TestSupport

/// The event loops do none of the blocking work that used to run there: no file is opened, written, flushed, renamed
/// or removed on them, and no SQLite read or write happens there; nothing in the server waits by sleeping. (Downloads
/// still `sendfile` from an open file on the loop, which a page-cache miss can block: not traced here.) Read with strace (thread ids
/// mapped to the server's thread names) while uploads, an aborted upload, event streams, polls, a download, a job
/// deleted mid-download and the deletion of a running job go through.
@Suite struct LoopBlockingTests {
    private static let traced = "openat,unlink,unlinkat,rename,renameat,renameat2,fsync,fdatasync,ftruncate,pread64,pwrite64,"
        + "write,fcntl,clock_nanosleep,nanosleep,close"

    @Test func eventLoopsDoNoBlockingWorkAndNothingPollsWithSleeps() throws {
        let folder = try Media.scratch()
        let trace = folder.appendingPathComponent("strace.log").path
        let server = try TestServer([], data: folder.appendingPathComponent("data"),
                                    wrapper: ["strace", "-f", "-y", "-qq", "-e", "trace=" + Self.traced, "-o", trace, "--"])
        defer { server.stop() }
        let names = server.threadNames
        let loops = Set(names.filter { $0.value.hasPrefix("http-") }.keys)
        #expect(loops.count >= 1, "threads: \(names)")

        // A finished job: upload, job, event stream, polls, download.
        let upload = try server.json("/v1/uploads/a.mp4", ["-T", try Media.path(.standard)])
        let uploadID = try #require(upload.object["id"] as? String, "\(upload.object)")
        let job = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(uploadID)", "settings": "480p"}"#])
        let jobID = try #require(job.object["id"] as? String)
        let events = try server.curl("/v1/jobs/\(jobID)/events", ["-N", "--max-time", "60"])
        #expect(events.body.contains("\"state\":\"succeeded\""))
        for _ in 0..<5 { #expect(try server.json("/v1/jobs/\(jobID)").status == 200) }
        #expect(try server.curl("/v1/jobs/\(jobID)/output", ["-o", folder.appendingPathComponent("out.mp4").path]).status == 200)
        // A job deleted while its output is downloaded slowly: the download goes on from the open file, whose last
        // close (freeing its blocks) is not the loop's.
        let big = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.tenSeconds)), "-F", #"settings={"video": {"averageBitRate": 8000000}}"#])
        let bigID = try #require(big.object["id"] as? String)
        #expect(eventually(120) { (try? server.json("/v1/jobs/\(bigID)"))?.object["state"] as? String == "succeeded" })
        let size = try #require(((try server.json("/v1/jobs/\(bigID)").object["output"] as? [String: Any])?["size"] as? Int))
        #expect(size > 6_000_000, "more than the socket buffers hold (tcp_wmem's 4 MiB at most, 64 KiB received): \(size) bytes")
        do {
            let reader = try RawClient(port: server.port)
            var small: Int32 = 65536
            setsockopt(reader.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            reader.send("GET /v1/jobs/\(bigID)/output HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(reader.read(until: "\r\n\r\n").hasPrefix("HTTP/1.1 200"), "the download started")
            #expect(try server.curl("/v1/jobs/\(bigID)", ["-X", "DELETE"]).status == 204)
            let pid = try #require(server.serverPID)
            let open = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? [])
                .compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)") }
            #expect(open.contains { $0.hasSuffix("/output.mp4 (deleted)") }, "the server sends from the deleted file: \(open)")
        } // the client's socket closes, unread: what the server still sends is answered with a reset
        Thread.sleep(forTimeInterval: 0.5)
        // An upload dropped half-way: its partial file is removed.
        let client = try RawClient(port: server.port)
        client.send("PUT /v1/uploads/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\n")
        client.send(Data(repeating: 7, count: 8 * 1024 * 1024))
        Thread.sleep(forTimeInterval: 0.3)
        client.hangUp()
        #expect(eventually(10) { !Media.files(in: server.data.appendingPathComponent("uploads")).contains { $0.hasPrefix(".upload-") } })
        // A running job deleted: the handler waits for it to stop.
        let long = try server.json("/v1/jobs", ["-F", "file=@" + (try Media.path(.long)), "-F", #"settings={"video": {"preset": "slow"}}"#])
        let longID = try #require(long.object["id"] as? String)
        #expect(eventually(30) { (try? server.json("/v1/jobs/\(longID)"))?.object["state"] as? String == "running" })
        #expect(try server.curl("/v1/jobs/\(longID)", ["-X", "DELETE"]).status == 204)
        server.stop()

        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
        var onLoops: [Substring] = []
        var sleeps: [Substring] = []
        for line in lines {
            guard let tid = Int32(line.prefix { $0 != " " }) else { continue }
            // strace pads the thread id to the widest one it has printed.
            let call = line.drop { $0 != " " }.drop { $0 == " " }
            // strace splits a call another thread interrupted: the first half names it, "<... resumed>" ends it.
            if call.hasPrefix("<...") { continue }
            if call.hasPrefix("clock_nanosleep") || call.hasPrefix("nanosleep") { sleeps.append(line) }
            guard loops.contains(tid), Self.blocks(call) else { continue }
            onLoops.append(line)
        }
        #expect(onLoops.isEmpty, "blocking calls on event loops:\n\(onLoops.prefix(10).joined(separator: "\n"))")
        #expect(sleeps.isEmpty, "sleeps:\n\(sleeps.prefix(10).map { "\($0) (\(names[Int32($0.prefix { $0 != " " }) ?? 0] ?? "?"))" }.joined(separator: "\n"))")
    }

    /// Whether a traced call is file or store work: anything on a file (not a socket, pipe, eventfd or the log on
    /// stderr, which the loop writes once per round of events by design), and SQLite's file locks.
    private static func blocks(_ call: Substring) -> Bool {
        // Naming the thread at its start.
        if call.contains("/proc/thread-self/comm") || call.contains("/comm>") { return false }
        // glibc's malloc sizing its arenas when a thread first contends for one: it reads the CPU count from sysfs
        // (memory, never a disk), at a moment that depends on how the threads' first allocations interleave.
        if call.contains("\"/sys/devices/system/cpu/online\"") { return false }
        if call.hasPrefix("write(") || call.hasPrefix("pwrite64(") {
            return !(call.hasPrefix("write(2<") || call.contains("<TCP") || call.contains("<socket:") || call.contains("<pipe:")
                || call.contains("<anon_inode:"))
        }
        if call.hasPrefix("fcntl(") { return call.contains("F_SETLK") || call.contains("F_GETLK") }
        // Closing a socket, a pipe or a file still there is quick; the last close of a deleted file frees its blocks.
        if call.hasPrefix("close(") { return call.contains("(deleted)") }
        return !call.hasPrefix("clock_nanosleep") && !call.hasPrefix("nanosleep")
    }
}
