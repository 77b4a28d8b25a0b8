import Dispatch
import Foundation
import Glibc
import Locks
import Logging
@testable import Server
import Testing
import TestSupport

/// One connection's pipelined requests do not hold the other connections of its loop: each is given a bounded turn.
@Suite struct PipeliningFairnessTests {
    /// Requests answered on the loop itself (here an inline route; a health check, a 404, a refusal on a real
    /// server) were answered back to back from the buffer, up to 16 reads of 80 KiB a turn: 31,000 pipelined
    /// requests, 5 to 7 s in which no other connection of the loop was served (a helper's measure: 18 s for a
    /// keep-alive client's request). Measured against the flood itself, no clock bound: the other client's five
    /// requests take a small part of the time the flood's take, where they waited for its turns to end.
    @Test func aFloodOfPipelinedRequestsDoesNotHoldTheLoopsOtherConnections() throws {
        var configuration = HTTPServerConfiguration(uploadDirectory: try Media.scratch())
        configuration.port = 0
        configuration.eventLoops = 1
        let router = Router([
            .init("GET", "/ping", inline: true) { _ throws(HTTPError) in Response(.ok, body: .data(Data("pong\n".utf8))) },
        ])
        let server = try HTTPServer(configuration: configuration, router: router, logger: .disabled)
        try server.start()
        defer { server.stop(grace: 0) }

        let count = 40_000
        let flood = try RawClient(port: server.port)
        let victim = try RawClient(port: server.port)
        // The flood's answers, counted as they come; its first one says the loop is busy with it.
        let answered = LockedValue(0)
        let started = DispatchSemaphore(value: 0), finished = DispatchSemaphore(value: 0)
        let floodFD = flood.fd
        NamedThread.start("flood reader") {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            var carry: [UInt8] = []
            let marker = Array("HTTP/1.1 200".utf8)
            var signalled = false
            while answered.withLock({ $0 }) < count {
                let read = recv(floodFD, &buffer, buffer.count, 0)
                if read <= 0 { break }
                let bytes = carry + buffer[0..<read]
                var found = 0, index = 0
                while index + marker.count <= bytes.count {
                    if bytes[index] == marker[0], Array(bytes[index..<index + marker.count]) == marker {
                        found += 1
                        index += marker.count
                    } else {
                        index += 1
                    }
                }
                carry = Array(bytes.suffix(marker.count - 1))
                answered.withLock { $0 += found }
                if !signalled {
                    signalled = true
                    started.signal()
                }
            }
            finished.signal()
        }
        let floodStart = ContinuousClock.now
        let requests = Data(String(repeating: "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", count: count).utf8)
        NamedThread.start("flood writer") {
            _ = requests.withUnsafeBytes { Glibc.send(floodFD, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        try #require(started.wait(timeout: .now() + 30) == .success, "the flood is answered")
        let victimStart = ContinuousClock.now
        var answers: [String] = []
        for _ in 0..<5 {
            victim.send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            answers.append(victim.read(until: "pong\n", timeout: 60))
        }
        let victimTime = ContinuousClock.now - victimStart
        let answeredMeanwhile = answered.withLock { $0 }
        #expect(finished.wait(timeout: .now() + 120) == .success, "the flood ends")
        let floodTime = ContinuousClock.now - floodStart
        #expect(answers.allSatisfy { $0.contains("200 OK") && $0.hasSuffix("pong\n") }, "\(answers)")
        #expect(answered.withLock { $0 } == count)
        #expect(answeredMeanwhile < count / 2, "the flood had \(answeredMeanwhile) of \(count) answers when the other client's five came")
        #expect(victimTime < floodTime / 4, "the other client's five requests took \(victimTime), the flood's \(count) \(floodTime)")
    }
}
