import Foundation
import Locks
import Testing
import TestSupport

/// Requests that block (on the store, on the disk, on an FFmpeg probe) wait for a thread of a fixed pool; a burst of
/// them never grows the process by a thread each, as a concurrent dispatch queue did.
@Suite struct ThreadPoolTests {
    @Test func threeHundredConcurrentRequestsLeaveTheThreadCountFixed() throws {
        let server = try TestServer(["--handler-threads", "4", "--probe-threads", "2"])
        let media = try Data(contentsOf: URL(fileURLWithPath: try Media.path(.audioOnly)))
        // Each kind once, so anything made on first use exists before the count is taken.
        #expect(try server.json("/v1/uploads/warm.wav", ["-T", try Media.path(.audioOnly)]).status == 201)
        #expect(try server.json("/v1/jobs?limit=200").status == 200)
        let before = server.threadCount
        let statuses = LockedValue<[Int]>([])
        let peak = LockedValue(before)
        let done = DispatchGroup()
        for index in 0..<300 {
            done.enter()
            NamedThread.start("client-\(index)") {
                defer { done.leave() }
                guard let client = try? RawClient(port: server.port) else { return }
                let head: String
                let body: [Data]
                if index % 2 == 0 {
                    head = "PUT /v1/uploads/a.wav HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: \(media.count)\r\n\r\n"
                    body = [media]
                } else {
                    head = "GET /v1/jobs?limit=200 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                    body = []
                }
                let (answer, _) = client.exchange(head: head, body: body)
                let status = Int(answer.split(separator: " ").dropFirst().first ?? "") ?? 0
                statuses.withLock { $0.append(status) }
            }
        }
        while done.wait(timeout: .now() + 0.01) == .timedOut {
            let count = server.threadCount
            peak.withLock { $0 = max($0, count) }
        }
        let answered = statuses.withLock { $0 }
        #expect(answered.count == 300 && answered.allSatisfy { $0 == 200 || $0 == 201 }, "\(Dictionary(grouping: answered) { $0 }.mapValues(\.count))")
        #expect(peak.withLock { $0 } <= before, "threads grew from \(before) to \(peak.withLock { $0 })")
    }
}
