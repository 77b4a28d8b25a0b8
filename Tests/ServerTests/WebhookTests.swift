import Foundation
import Testing
import TestSupport

/// Webhooks from a real server to a real receiver (Tests/Outbound/peer.py), which verifies every signature with the
/// `standardwebhooks` package from PyPI: an implementation of the specification that is not ours.
@Suite(.serialized) struct WebhookTests {
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    private func start(_ peer: OutboundPeer?, _ extra: [String] = [], data: URL? = nil) throws -> TestServer {
        try TestServer(["--webhook-secret", Self.secret, "--webhook-retry-scale", "0.01", "--allow-private-urls", "127.0.0.0/8"] + extra,
                       data: data)
    }

    private func upload(_ server: TestServer, _ clip: Media.Clip = .standard) throws -> String {
        let answer = try server.json("/v1/uploads/", ["-T", try Media.path(clip)])
        return try #require(answer.object["id"] as? String, "\(answer.object)")
    }

    /// Creates a job with `body` (JSON) and returns its id.
    private func job(_ server: TestServer, _ body: String) throws -> String {
        let answer = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", body])
        return try #require(answer.object["id"] as? String, "\(answer.status) \(answer.object)")
    }

    private func state(_ server: TestServer, _ id: String) throws -> String? { try server.json("/v1/jobs/\(id)").object["state"] as? String }

    /// A job whose webhook (the peer's `/hooks/<hook>`) wants `job.running` and `job.succeeded`, run to success.
    private func succeededJob(hook: String) throws -> (peer: OutboundPeer, server: TestServer, id: String) {
        let peer = try OutboundPeer(secret: Self.secret)
        let server = try start(peer)
        let input = try upload(server)
        let id = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/\#(hook)", "events": ["job.running", "job.succeeded"]}}"#)
        #expect(try eventually(60) { try state(server, id) == "succeeded" })
        return (peer, server, id)
    }

    /// An event its URL refuses outright (400 to `job.running` from a receiver that takes how jobs end only) holds
    /// back none of the job's later ones: `job.succeeded` waited behind its retries, 41.6 hours at full scale (25
    /// minutes here). Once a later one is delivered, the refused one is not sent again (late, it would take the
    /// job back for a receiver that follows the state).
    @Test func anEventItsURLRefusesHoldsBackNoneAfterIt() throws {
        let (peer, server, id) = try succeededJob(hook: "picky")
        #expect(eventually(20) { peer.deliveries(job: id).contains { $0["type"] as? String == "job.succeeded" && $0["answered"] as? Int == 200 } },
                "\(peer.deliveries(job: id))")
        var list: [[String: Any]] = []
        let stale = try eventually(10) {
            list = try server.json("/v1/jobs/\(id)/webhooks").object["deliveries"] as? [[String: Any]] ?? []
            let running = list.first { $0["event"] as? String == "job.running" }
            return running?["state"] as? String == "failed" && running?["lastStatus"] as? Int == 400
                && (running?["lastError"] as? String)?.contains("later event") == true
        }
        #expect(stale, "\(list)")
    }

    /// A refused event whose retry is in flight (a receiver answering 400 during a deploy, then 200 a few seconds
    /// later) holds back the job's later events until it ends: `job.succeeded` went out meanwhile, and the retry's
    /// success then reached the receiver after it (`job.running` after `job.succeeded`).
    @Test func anEventBeingSentAgainHoldsBackTheLaterOnes() throws {
        let (peer, server, id) = try succeededJob(hook: "deploying")
        // The peer records the retry of job.running when it answers it, 8 s after it came (the job ends well within).
        #expect(eventually(30) { peer.deliveries(job: id).filter { $0["answered"] as? Int == 200 }.count == 2 }, "\(peer.deliveries(job: id))")
        let answered = peer.deliveries(job: id).filter { $0["answered"] as? Int == 200 }.compactMap { $0["type"] as? String }
        #expect(answered == ["job.running", "job.succeeded"], "\(peer.deliveries(job: id))")
        let list = try server.json("/v1/jobs/\(id)/webhooks").object["deliveries"] as? [[String: Any]] ?? []
        #expect(list.count == 2 && list.allSatisfy { $0["state"] as? String == "delivered" }, "\(list)")
    }

    @Test func succeededFailedAndCanceledJobsEachAnnounceExactlyTheirEventsInOrder() throws {
        let peer = try OutboundPeer(secret: Self.secret)
        let server = try start(peer, ["--webhook-url", peer.base + "/hooks/ok?scope=server"])
        let input = try upload(server)
        let all = #""events": ["job.running", "job.succeeded", "job.failed", "job.canceled"]"#
        let succeeds = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/ok", \#(all)}}"#)
        // Fails as it runs: the file ends at 60 % of what its index promises.
        let cut = try Media.truncated(try Media.path(.standard), fraction: 0.6, into: try Media.scratch())
        let cutID = try #require(try server.json("/v1/uploads/", ["-T", cut]).object["id"] as? String)
        // Its webhook's host outside ASCII: posted to by its IDNA form (libcurl, without a locale, took the name as
        // given for a bad URL, and every delivery failed as invalid_url). curl resolves every *.localhost to loopback.
        let international = "http://éxample.localhost:\(try #require(URL(string: peer.base)?.port))/hooks/ok"
        let fails = try job(server, #"{"input": "\#(cutID)", "webhook": {"url": "\#(international)"}}"#)
        let ended = try eventually(60) { try state(server, succeeds) == "succeeded" && (try state(server, fails)) == "failed" }
        let failedJob = try server.json("/v1/jobs/\(fails)").object
        #expect(ended, "\(failedJob)")
        // Canceled while queued behind a long job, with the default events (how it ended).
        let long = try job(server, #"{"input": "\#(try upload(server, .tenSeconds))", "priority": 10, "settings": {"video": {"preset": "veryslow"}}}"#)
        #expect(try eventually(30) { try state(server, long) == "running" })
        let canceled = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/ok"}}"#)
        #expect(try server.json("/v1/jobs/\(canceled)/cancel", ["-X", "POST"]).object["state"] as? String == "canceled")
        _ = try server.curl("/v1/jobs/\(long)/cancel", ["-X", "POST"])
        // Every expected delivery arrives (4 + 3 + 2, and the long job's two to the server-wide URL), then nothing more.
        let expected = [(succeeds, 4), (fails, 3), (canceled, 2), (long, 2)]
        #expect(eventually(30) { expected.allSatisfy { peer.deliveries(job: $0.0).count >= $0.1 } },
                "\(expected.map { peer.deliveries(job: $0.0).count })")
        Thread.sleep(forTimeInterval: 1)
        #expect(expected.allSatisfy { peer.deliveries(job: $0.0).count == $0.1 }, "\(expected.map { peer.deliveries(job: $0.0).count })")

        func events(_ job: String, scope: String) -> [String] {
            peer.deliveries(job: job).filter { ($0["path"] as? String)?.contains("scope=server") == (scope == "server") }.compactMap { $0["type"] as? String }
        }
        #expect(peer.requests().filter { $0["id"] != nil }.allSatisfy { $0["verified"] as? Bool == true }, "every signature verifies")
        #expect(events(succeeds, scope: "job") == ["job.running", "job.succeeded"])
        #expect(events(fails, scope: "job") == ["job.failed"], "the job's own webhook: only how it ended, by default")
        #expect(events(canceled, scope: "job") == ["job.canceled"])
        #expect(events(succeeds, scope: "server") == ["job.running", "job.succeeded"])
        #expect(events(fails, scope: "server") == ["job.running", "job.failed"])
        #expect(events(canceled, scope: "server") == ["job.canceled"])
        // Each body shows the job as the event left it, however late it is sent.
        let started = try #require(peer.deliveries(job: succeeds).first)
        #expect(started["type"] as? String == "job.running" && started["state"] as? String == "running", "\(started)")
        let done = try #require(peer.deliveries(job: succeeds).last)
        #expect(done["state"] as? String == "succeeded" && (done["payloadTimestamp"] as? String)?.hasSuffix("Z") == true, "\(done)")
        let failure = try #require(peer.deliveries(job: fails).last { ($0["path"] as? String)?.hasSuffix("/hooks/ok") == true })
        #expect(failure["state"] as? String == "failed")
        // Each delivery has its own id; the job's JSON shows its webhook; the list shows each delivered once.
        let ids = peer.requests().compactMap { $0["id"] as? String }
        #expect(Set(ids).count == ids.count)
        let shown = try server.json("/v1/jobs/\(succeeds)").object["webhook"] as? [String: Any]
        #expect(shown?["url"] as? String == peer.base + "/hooks/ok" && (shown?["events"] as? [String])?.count == 4 && shown?["disabled"] as? Bool == false)
        let list = try server.json("/v1/jobs/\(succeeds)/webhooks").object["deliveries"] as? [[String: Any]] ?? []
        #expect(list.count == 4 && list.allSatisfy { $0["state"] as? String == "delivered" && $0["attempts"] as? Int == 1 && $0["lastStatus"] as? Int == 200 },
                "\(list)")
        // Nine deliveries for these three jobs, two (job.running, job.canceled) for the long one's server-wide URL.
        var metrics = ""
        let counted = try eventually(10) {
            metrics = try server.curl("/metrics").body
            return metrics.contains("transcoderd_webhook_deliveries{state=\"delivered\"} 11\n")
        }
        #expect(counted && metrics.contains("transcoderd_webhook_deliveries{state=\"pending\"} 0\n")
                && metrics.contains("transcoderd_webhook_attempts_total{outcome=\"delivered\"} 11\n"),
                "\(metrics.split(separator: "\n").filter { $0.contains("webhook") })")
    }

    @Test func failuresAreRetriedUnderOneIDGoneDisablesAndRetryAfterIsHonoured() throws {
        let peer = try OutboundPeer(secret: Self.secret)
        let server = try start(peer)
        let input = try upload(server)
        let flaky = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/flaky"}}"#)
        let gone = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/gone", "events": ["job.running", "job.succeeded"]}}"#)
        let busy = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/busy"}}"#)
        let limited = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/limited", "events": ["job.succeeded"]}}"#)
        let slow = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/slow-body", "events": ["job.succeeded"]}}"#)
        // 500, 500, 200: three attempts of one delivery, 0.05 s then 3 s apart on the scaled schedule.
        #expect(eventually(60) { peer.deliveries(job: flaky).count == 3 }, "\(peer.deliveries(job: flaky))")
        let tries = peer.deliveries(job: flaky)
        #expect(Set(tries.compactMap { $0["id"] as? String }).count == 1 && tries.map { $0["answered"] as? Int } == [500, 500, 200])
        #expect(tries.allSatisfy { $0["verified"] as? Bool == true && $0["type"] as? String == "job.succeeded" })
        var listed: [String: Any] = [:]
        let recorded = try eventually(10) {
            listed = (try server.json("/v1/jobs/\(flaky)/webhooks").object["deliveries"] as? [[String: Any]])?.first ?? [:]
            return listed["state"] as? String == "delivered"
        }
        #expect(recorded && listed["attempts"] as? Int == 3 && listed["lastStatus"] as? Int == 200, "\(listed)")

        // 410 on job.running: that delivery stops, the webhook is off, job.succeeded is never sent (whether it was
        // written before the 410 came, then turned off with it, or never written).
        #expect(try eventually(60) { try state(server, gone) == "succeeded" && (try server.json("/v1/jobs/\(gone)").object["webhook"] as? [String: Any])?["disabled"] as? Bool == true })
        Thread.sleep(forTimeInterval: 1.5)
        #expect(peer.deliveries(job: gone).map { $0["type"] as? String } == ["job.running"])
        let goneList = try server.json("/v1/jobs/\(gone)/webhooks").object["deliveries"] as? [[String: Any]] ?? []
        #expect(!goneList.isEmpty && goneList.allSatisfy { $0["state"] as? String == "disabled" } && goneList.first?["event"] as? String == "job.running",
                "\(goneList)")

        // 503 with Retry-After: 5 waits five seconds, not the schedule's 0.05 (and not much longer either).
        #expect(eventually(60) { peer.deliveries(job: busy).count == 2 })
        let waits = peer.deliveries(job: busy).compactMap { $0["received"] as? Double }
        #expect(waits.count == 2 && waits[1] - waits[0] >= 4.9 && waits[1] - waits[0] < 8, "\(waits)")

        // 429 with Retry-After: 0 waits no less than the schedule: 0.05 s, then 3 s. Taken at its word, it had every
        // attempt sent back to back, and a receiver limiting a burst for a few seconds lost the delivery for good.
        #expect(eventually(60) { peer.deliveries(job: limited).count == 3 })
        let paced = peer.deliveries(job: limited).compactMap { $0["received"] as? Double }
        #expect(paced.count == 3 && paced[2] - paced[1] >= 2.7, "\(paced)")

        // 200 at once, the body 20 s later: delivered at the first attempt (its body awaited, it timed out after
        // 15 s and was sent again, eight times, then recorded as failed).
        var slowListed: [String: Any] = [:]
        #expect(try eventually(60) {
            slowListed = (try server.json("/v1/jobs/\(slow)/webhooks").object["deliveries"] as? [[String: Any]])?.first ?? [:]
            return slowListed["state"] as? String == "delivered"
        }, "\(slowListed)")
        #expect(slowListed["attempts"] as? Int == 1 && slowListed["lastStatus"] as? Int == 200 && peer.deliveries(job: slow).count == 1, "\(slowListed)")

        // Redelivery sends the same delivery again, same id.
        let id = try #require(listed["id"] as? String)
        let again = try server.json("/v1/jobs/\(flaky)/webhooks/\(id)/redeliver", ["-X", "POST"])
        #expect(again.status == 202 && again.object["state"] as? String == "pending")
        #expect(eventually(20) { peer.deliveries(job: flaky).count == 4 })
        #expect(peer.deliveries(job: flaky).last?["id"] as? String == id)
        #expect(try server.curl("/v1/jobs/\(flaky)/webhooks/msg_nope/redeliver", ["-X", "POST"]).status == 404)
    }

    @Test func aDeliveryOwedWhenTheServerIsKilledIsSentAfterItRestarts() throws {
        // The receiver is not there yet (its port held, connections to it refused): the delivery fails and waits
        // for its retry (5 s on the real schedule).
        let reserved = try ReservedPort()
        let port = reserved.port
        let data = try Media.scratch().appendingPathComponent("data")
        var server = try TestServer(["--webhook-secret", Self.secret, "--allow-private-urls", "127.0.0.0/8"], data: data)
        let input = try upload(server)
        let id = try job(server, #"{"input": "\#(input)", "webhook": {"url": "http://127.0.0.1:\#(port)/hooks/ok"}}"#)
        #expect(try eventually(60) { try state(server, id) == "succeeded" })
        // The first attempt found nobody; killed while the delivery waits for its retry.
        var owed: [String: Any] = [:]
        let failedOnce = try eventually(20) {
            owed = (try server.json("/v1/jobs/\(id)/webhooks").object["deliveries"] as? [[String: Any]])?.first ?? [:]
            return owed["attempts"] as? Int == 1 && owed["state"] as? String == "pending" && owed["lastError"] is String
        }
        #expect(failedOnce, "\(owed)")
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()
        _ = server.stop()
        let peer = try OutboundPeer(secret: Self.secret, port: port)
        reserved.release()
        #expect(peer.deliveries(job: id).isEmpty)
        server = try TestServer(["--webhook-secret", Self.secret, "--allow-private-urls", "127.0.0.0/8", "--webhook-retry-scale", "0.01"], data: data)
        #expect(eventually(30) { peer.deliveries(job: id).count == 1 }, "\(server.log)")
        let delivery = try #require(peer.deliveries(job: id).first)
        #expect(delivery["type"] as? String == "job.succeeded" && delivery["verified"] as? Bool == true)
        _ = server.stop()
    }

    /// A delivery waiting on a receiver that does not answer (accepts the connection, never replies) does not hold
    /// the server past its shutdown grace: it stayed until the attempt's 15 s timeout, past a compose file's stop
    /// period, and was killed.
    @Test func aHangingReceiverDoesNotHoldAStopPastTheGrace() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")),
                                  sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        #expect(listen(listener, 16) == 0)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let server = try start(nil, ["--shutdown-grace", "3"])
        let input = try upload(server, .audioOnly)
        let id = try job(server, #"{"input": "\#(input)", "webhook": {"url": "http://127.0.0.1:\#(port)/hooks/ok"}}"#)
        #expect(try eventually(60) { try state(server, id) == "succeeded" })
        // The attempt is under way: its request arrived, and waits for an answer.
        var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        try #require(poll(&ready, 1, 30_000) == 1, "the delivery connected")
        let connection = accept(listener, nil, nil)
        defer { close(connection) }
        var buffer = [UInt8](repeating: 0, count: 65536)
        #expect(recv(connection, &buffer, buffer.count, 0) > 0, "the delivery's request arrived")
        let stopping = Date()
        #expect(server.stop() == 0)
        let took = Date().timeIntervalSince(stopping)
        #expect(took < 10, "stopped \(took) s after the signal, with a grace of 3 s (the attempt's timeout is 15 s)")
    }

    /// A receiver that hangs holds half the senders at most: the other half go on with other URLs. Every sender
    /// took the next due delivery whatever its URL, so a user's hanging URL on a handful of jobs held all four for the
    /// attempt's 15 s timeout, again and again, and every other webhook (`--webhook-url`'s too) waited minutes.
    @Test func aReceiverThatHangsHoldsHalfTheSendersAtMost() throws {
        let peer = try OutboundPeer(secret: Self.secret)
        let server = try start(peer)
        let input = try upload(server)
        let hanging = try (0..<8).map { _ in try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/hang"}}"#) }
        #expect(try eventually(120) { try hanging.allSatisfy { try state(server, $0) == "succeeded" } })
        let hangs = { peer.requests().filter { ($0["path"] as? String)?.hasSuffix("/hooks/hang") == true }.count }
        #expect(eventually(20) { hangs() >= 2 }, "attempts to the hanging URL are under way")
        let healthy = try job(server, #"{"input": "\#(input)", "webhook": {"url": "\#(peer.base)/hooks/ok"}}"#)
        #expect(try eventually(60) { try state(server, healthy) == "succeeded" })
        let finished = Date()
        #expect(eventually(8) { peer.deliveries(job: healthy).contains { $0["type"] as? String == "job.succeeded" && $0["answered"] as? Int == 200 } },
                "the healthy URL's delivery waited behind the hanging one's")
        #expect(Date().timeIntervalSince(finished) < 8)
        // Two senders at most on the hanging URL: an attempt lasts its 15 s timeout, so no 14 s holds three starts.
        let starts = peer.requests().filter { ($0["path"] as? String)?.hasSuffix("/hooks/hang") == true }.compactMap { $0["received"] as? Double }.sorted()
        #expect(starts.count >= 2 && zip(starts, starts.dropFirst(2)).allSatisfy { $1 - $0 >= 14 }, "attempts began at \(starts.map { $0 - (starts.first ?? 0) })")
    }

    @Test func webhookSettingsAreCheckedAndNamed() throws {
        let server = try TestServer()
        let input = try upload(server)
        for (webhook, status, message) in [
            (#"{"url": "ftp://x/y"}"#, 422, "webhook.url"),
            // What libcurl refuses is refused now: each delivery failed with invalid_url for 41.6 hours of retries.
            (#"{"url": "http://example.com/\r\nX-Injected: 1"}"#, 422, "webhook.url"),
            (#"{"url": "http://example.com:99999/"}"#, 422, "webhook.url"),
            (#"{"url": "http://example.com:0/"}"#, 422, "webhook.url"),
            (#"{"url": "https://x/y", "events": ["job.done"]}"#, 400, "webhook.events[0]"),
            (#"{"url": "https://x/y", "events": []}"#, 400, "webhook.events"),
            (#"{"url": "https://x/y", "secret": "s"}"#, 400, "webhook.secret"),
            (#"{"url": "http://169.254.169.254/latest"}"#, 422, "cloud metadata"),
            (#"{"url": "http://[::1]:9/x"}"#, 422, "loopback"),
            // Spellings libcurl reads as an address, refused as one before the job is made.
            (#"{"url": "http://2130706433:9/x"}"#, 422, "loopback"),
            (#"{"url": "http://127.1:9/x"}"#, 422, "loopback"),
        ] {
            let answer = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", #"{"input": "\#(input)", "webhook": \#(webhook)}"#])
            let error = answer.object["error"] as? [String: Any]
            #expect(answer.status == status && (error?["message"] as? String)?.contains(message) == true, "\(webhook): \(answer.object)")
            // A URL that is no URL says so in its code, as an upload's does.
            if message == "webhook.url" { #expect(error?["code"] as? String == "invalid_url", "\(webhook): \(answer.object)") }
        }
        let jobs = try server.json("/v1/jobs").object["jobs"] as? [Any]
        #expect(jobs?.isEmpty == true, "a refused request makes no job")
        // A name that resolves to loopback passes creation and is refused when the delivery connects: no retries.
        let named = try job(server, #"{"input": "\#(input)", "webhook": {"url": "http://localhost:9/hook"}}"#)
        var deliveries: [[String: Any]] = []
        let failed = try eventually(60) {
            deliveries = try server.json("/v1/jobs/\(named)/webhooks").object["deliveries"] as? [[String: Any]] ?? []
            return deliveries.first?["state"] as? String == "failed"
        }
        #expect(failed && deliveries.count == 1 && deliveries.first?["attempts"] as? Int == 1
                && (deliveries.first?["lastError"] as? String)?.contains("loopback") == true, "\(deliveries)")
        // With no --webhook-secret the server keeps one in the data directory, readable by its owner only.
        let kept = try String(contentsOfFile: server.data.appendingPathComponent("webhook-secret").path, encoding: .utf8)
        #expect(kept.hasPrefix("whsec_"))
        let mode = try FileManager.default.attributesOfItem(atPath: server.data.appendingPathComponent("webhook-secret").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }
}
