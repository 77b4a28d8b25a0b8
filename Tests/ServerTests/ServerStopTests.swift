import Dispatch
import Foundation
import Glibc
import Locks
import Logging
@testable import Server
import Testing
import TestSupport

/// What a stop does to the connections it finds, on a server of its own in this process: a handler held on a
/// semaphore stands for a long request, so every step is ordered without sleeps standing for certainty.
@Suite struct ServerStopTests {
    /// A server with one handler thread: `/hold` waits for `release`, `/count` counts the handlers that ran.
    private final class Rig: @unchecked Sendable {
        let server: HTTPServer
        let release = DispatchSemaphore(value: 0)
        let holding = DispatchSemaphore(value: 0)
        let counted = LockedValue(0)

        init() throws {
            var configuration = HTTPServerConfiguration(uploadDirectory: try Media.scratch())
            configuration.port = 0
            configuration.eventLoops = 1
            configuration.handlerThreads = 1
            let (release, holding, counted) = (release, holding, counted)
            let router = Router([
                .init("GET", "/hold") { _ throws(HTTPError) in
                    holding.signal()
                    release.wait()
                    return Response(.ok, body: .data(Data("held\n".utf8)))
                },
                .init("GET", "/count") { _ throws(HTTPError) in
                    counted.withLock { $0 += 1 }
                    return Response(.ok, body: .data(Data("counted\n".utf8)))
                },
            ])
            server = try HTTPServer(configuration: configuration, router: router, logger: .disabled)
            try server.start()
        }

        func client() throws -> RawClient { try RawClient(port: server.port) }
    }

    /// A request still waiting for a handler thread when a stop's grace ends is not run: its connection is closed
    /// then, and the pools ran every queued handler anyway (each upload probed and stored, each job made), none of
    /// them able to answer, for as long as they took past the grace.
    @Test func aRequestWaitingForAThreadWhenTheGraceEndsIsNotRun() throws {
        let rig = try Rig()
        defer { rig.release.signal() } // a check failing early must not leave the handler thread held
        let held = try rig.client()
        held.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(rig.holding.wait(timeout: .now() + 10) == .success, "the only thread is held")
        let waiting = try rig.client()
        waiting.send("GET /count HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(waiting.read(timeout: 0.3).isEmpty, "no answer while the thread is held")
        let stopped = DispatchSemaphore(value: 0)
        let server = rig.server
        Thread { server.stop(grace: 0.5); stopped.signal() }.start()
        // The grace ends: both connections are closed, and the stop waits for the pool.
        #expect(waiting.read(timeout: 10).isEmpty && held.read(timeout: 10).isEmpty, "closed without an answer")
        rig.release.signal()
        #expect(stopped.wait(timeout: .now() + 10) == .success)
        #expect(rig.counted.withLock { $0 } == 0, "the request whose connection was closed did not run")
    }

    /// While a stop waits for a request in flight, a connection kept alive between requests is closed at once, and
    /// one that answers a request closes after it: its client goes elsewhere with its next request, which the
    /// stop would otherwise have cut when its grace ended.
    @Test func aStopClosesIdleConnectionsAndEndsOthersWithTheirResponse() throws {
        let rig = try Rig()
        defer { rig.release.signal() } // a check failing early must not leave the handler thread held
        let idle = try rig.client()
        idle.send("GET /count HTTP/1.1\r\nHost: x\r\n\r\n")
        let first = idle.read(until: "counted\n")
        #expect(first.contains("200 OK") && !first.contains("Connection: close"), "kept alive: \(first)")
        // One that has not sent its first request yet is left to send it, and is answered (closed unread, its
        // request, maybe under way, was reset). Connected before the held one: one listener, one loop, accepted in
        // order, so it was taken from the backlog once the held one's request runs.
        let fresh = try rig.client()
        let held = try rig.client()
        held.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(rig.holding.wait(timeout: .now() + 10) == .success)
        let stopped = DispatchSemaphore(value: 0)
        let server = rig.server
        Thread { server.stop(grace: 20); stopped.signal() }.start()
        // The idle one is closed: end of file, nothing sent (it stayed open until the grace ended, 20 s here).
        let started = Date()
        #expect(idle.read(timeout: 10) == "" && Date().timeIntervalSince(started) < 5, "closed at once, without an answer")
        fresh.send("GET /count HTTP/1.1\r\nHost: x\r\n\r\n")
        rig.release.signal()
        let answered = fresh.read(until: "counted\n")
        #expect(answered.contains("200 OK") && answered.contains("Connection: close"), "\(answered)")
        let last = held.read(until: "held\n")
        #expect(last.contains("200 OK") && last.contains("Connection: close"), "the request in flight ends its connection: \(last)")
        #expect(stopped.wait(timeout: .now() + 10) == .success, "the stop ended once nothing was in flight")
    }
}
