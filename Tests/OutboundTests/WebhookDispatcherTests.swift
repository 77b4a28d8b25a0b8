import Foundation
@testable import Jobs
import Locks
import Logging
import Outbound
import Testing
import TestSupport
import Webhooks

/// The webhook senders against a real SQLite store.
@Suite struct WebhookDispatcherTests {
    /// A store that refuses writes but answers reads (a full disk, a file system remounted read-only; here a trigger
    /// failing every update of the deliveries) is tried again at the idle poll, not at once: the sender saw a
    /// delivery due, claimed again every 10 ms and logged each failure.
    @Test func aStoreThatRefusesClaimsIsNotRetriedInALoop() throws {
        let directory = try Media.scratch()
        let store = try SQLiteJobStore(path: directory.appendingPathComponent("jobs.sqlite").path)
        let now = Date().timeIntervalSince1970
        _ = try store.rows("""
            INSERT INTO webhook_deliveries (id, job_id, event, url, scope, created_at, next_attempt_at, job)
            VALUES ('msg_1', 'job', 'job.succeeded', 'http://127.0.0.1:9/', 'job', ?, ?, '{}')
            """, [.real(now - 5), .real(now - 5)])
        _ = try store.rows("""
            CREATE TRIGGER refuse_claims BEFORE UPDATE ON webhook_deliveries
            BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END
            """, [])
        #expect(try store.secondsUntilNextDelivery() ?? 1 <= 0, "the delivery is due and the store still reads")
        let lines = LockedValue<[String]>([])
        let logger = Logger(format: .json, minimumLevel: .debug) { line in lines.withLock { $0.append(line) } }
        var settings = WebhookDispatcher.Settings(secret: .generate(), policy: AddressPolicy(), schedule: RetrySchedule())
        settings.senders = 1
        settings.idlePoll = 5
        let dispatcher = WebhookDispatcher(store: store, settings: settings, logger: logger) { _ in Data() }
        func failures() -> [String] { lines.withLock { $0 }.filter { $0.contains("claiming webhook deliveries failed") } }
        dispatcher.start()
        #expect(eventually(10) { !failures().isEmpty }, "the first claim failed")
        let first = failures().count
        Thread.sleep(forTimeInterval: 1.5)
        dispatcher.stop()
        #expect(failures().count == first, "\(failures().count - first) more claims within 1.5 s of the idle poll's 5")
        #expect(failures().first?.contains("database or disk is full") == true)
    }
}
