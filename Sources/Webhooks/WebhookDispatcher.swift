import Foundation
import Jobs
import Locks
import Logging
import Outbound

/// Sends the webhook outbox: a few sender threads (webhooks block on the network for up to 15 s), each claiming the
/// next due delivery from the store, posting it signed after the Standard Webhooks specification, and recording the
/// outcome with the retry schedule. Deliveries survive crashes (they are rows, claimed for a minute at a time), so
/// every event is sent at least once; receivers deduplicate on `webhook-id`. Idle senders wake when a job changes
/// state (`wake`), when the next retry is due, and otherwise every `idlePoll` seconds (other nodes' changes).
public final class WebhookDispatcher: Sendable {
    public struct Settings: Sendable {
        public var secret: WebhookSecret
        public var policy: AddressPolicy
        public var schedule: RetrySchedule
        /// Seconds an attempt may take.
        public var timeout = 15.0
        public var senders = 4
        public var idlePoll = 2.0

        public init(secret: WebhookSecret, policy: AddressPolicy, schedule: RetrySchedule) {
            self.secret = secret
            self.policy = policy
            self.schedule = schedule
        }
    }

    private struct State {
        var wakeups = 0
        var stopping = false
        var running = 0
        /// Attempts made by this process, by how they ended (`delivered`, `retry`, `failed`, `disabled`).
        var attempts: [String: Int] = [:]
        /// Attempts under way here, by URL.
        var sending: [String: Int] = [:]
        /// Attempts ended here so far: a sender that found only deliveries to busy URLs waits for the next.
        var ended = 0
    }

    /// Attempts under way to one URL at most (half the senders): a receiver that hangs holds that many senders for
    /// the attempt's timeout, and the rest go on with other URLs. With none, a user's blackholed URL on a few dozen
    /// jobs held every sender 15 s a delivery, and every other webhook, `--webhook-url`'s included, waited minutes.
    var perURL: Int { max(1, settings.senders / 2) }

    let store: any JobStore
    let settings: Settings
    let logger: Logger
    /// A job's JSON as the API shows it; nil when it cannot be made now (the store failed).
    let render: @Sendable (Job) -> Data?
    private let state = LockedValue(State())
    /// Held by the sender claiming (`run`).
    private let claiming = LockedValue(())
    /// Seconds a claim lasts: past an attempt's timeout, so only a sender that died loses its deliveries to another.
    static let claimSeconds = 60.0

    public init(store: any JobStore, settings: Settings, logger: Logger, render: @escaping @Sendable (Job) -> Data?) {
        self.store = store
        self.settings = settings
        self.logger = logger
        self.render = render
    }

    public func start() {
        state.withLock { $0.running = settings.senders }
        for index in 0..<settings.senders {
            NamedThread.start("webhook-\(index)") { [self] in run() }
        }
    }

    /// Something changed: idle senders look for due deliveries now.
    public func wake() {
        state.withLock { $0.wakeups += 1 }
        state.notifyAll()
    }

    /// Stops the senders after their current attempts (waiting at most `timeout` seconds).
    public func stop(timeout: Double = 20) {
        state.withLock { $0.stopping = true }
        state.notifyAll()
        _ = state.wait(timeout: timeout) { $0.running == 0 }
    }

    /// Attempts this process made, by outcome.
    public var attemptCounts: [String: Int] { state.withLock { $0.attempts } }

    private func run() {
        let transfer = CurlTransfer()
        while true {
            let (seen, stopping, ended) = state.withLock { ($0.wakeups, $0.stopping, $0.ended) }
            if stopping { break }
            var claimed: [WebhookDelivery] = []
            var claimFailed = false
            // One sender claims at a time (a statement of a few milliseconds): senders woken together each read
            // the busy URLs before any had counted its claim, and all took the same hanging URL's deliveries.
            let busy = claiming.withLock { _ -> Set<String> in
                let busy = state.withLock { Set($0.sending.filter { $0.value >= perURL }.keys) }
                do throws(StoreError) {
                    claimed = try store.claimDeliveries(limit: 1, claimSeconds: Self.claimSeconds, skippingURLs: busy)
                } catch {
                    claimFailed = true
                    logger.error("claiming webhook deliveries failed", ["error": .string(error.description)])
                }
                if let delivery = claimed.first { state.withLock { $0.sending[delivery.url, default: 0] += 1 } }
                return busy
            }
            if let delivery = claimed.first {
                send(delivery, with: transfer)
                state.withLock { state in
                    state.sending[delivery.url, default: 1] -= 1
                    if state.sending[delivery.url] == 0 { state.sending[delivery.url] = nil }
                    state.ended += 1
                }
                state.notifyAll()
                continue
            }
            // Until a change, the next retry, or the poll for what other nodes did, whichever comes first.
            var wait = settings.idlePoll
            // In the store's time: a node whose clock differs from it neither sends early nor spins on a delivery
            // it takes for due. Not after a failed claim: a store that refuses writes but answers reads (a full
            // disk, a read-only mount) has a delivery due all along, and every sender tried and logged a hundred
            // times a second, holding SQLite's one connection from the API and the workers. Nor while URLs are
            // skipped as busy: what is due may be theirs, and an attempt ending (which frees one) wakes the wait.
            if !claimFailed, busy.isEmpty, let due = try? store.secondsUntilNextDelivery() { wait = min(wait, max(0.01, due)) }
            _ = state.wait(timeout: wait) { $0.stopping || $0.wakeups != seen || (!busy.isEmpty && $0.ended != ended) }
        }
        state.withLock { $0.running -= 1 }
        state.notifyAll()
    }

    /// One attempt: the body (the first attempt's, or made now from the job as the state change left it), signed,
    /// posted, and its outcome recorded.
    func send(_ delivery: WebhookDelivery, with transfer: CurlTransfer) {
        let payload: Data
        if let stored = delivery.payload {
            payload = stored
        } else {
            var job = delivery.job
            do throws(StoreError) {
                if job == nil { job = try store.job(id: delivery.jobID) }
            } catch {
                // A store that fails for a moment is no reason to give the delivery up: it is tried again.
                record(delivery, retryOrFail(delivery, status: nil, error: "Reading the job failed: \(error.message)"), payload: nil)
                return
            }
            guard let job else {
                // No body is kept: one sent again later would have gone out empty, and signed.
                record(delivery, .failed(status: nil, error: "The job no longer exists."), payload: nil)
                return
            }
            guard let rendered = render(job) else {
                // Kept once sent, a body without the job's input went out signed on every try.
                record(delivery, retryOrFail(delivery, status: nil, error: "Reading the job's input failed."), payload: nil)
                return
            }
            payload = Self.payload(delivery, job: rendered)
        }
        let timestamp = Int(Date().timeIntervalSince1970)
        var request = OutboundRequest(url: delivery.url, method: "POST", headers: [
            ("Content-Type", "application/json"), ("webhook-id", delivery.id), ("webhook-timestamp", String(timestamp)),
            ("webhook-signature", settings.secret.signature(id: delivery.id, timestamp: timestamp, body: payload)),
        ], body: payload, maxRedirects: 0, timeout: settings.timeout)
        // Only the status and Retry-After count: a receiver that answers 200 at once and finishes its body later
        // (or never ends it) has taken the delivery; waiting for the body timed it out, and it was sent again.
        request.readsBody = false
        let outcome: DeliveryOutcome
        do {
            let response = try transfer.perform(request, policy: settings.policy)
            outcome = decide(delivery, status: response.status, retryAfter: response.header("retry-after"))
        } catch where error.code == "url_not_allowed" {
            if delivery.scope == .server {
                // Every event of every job goes this way: said as loudly as a 410 (a name that resolves to a private
                // address passes the check at start).
                logger.error("the server-wide webhook URL leads to an address not allowed; fix --webhook-url or --allow-private-urls",
                             ["url": .string(RedactedURL.text(delivery.url)), "delivery": .string(delivery.id), "error": .string(error.message)])
            }
            outcome = .failed(status: nil, error: error.message)
        } catch where error.code == "invalid_url" {
            // libcurl cannot use the URL (what the API's check let through): no retry will change that.
            outcome = .failed(status: nil, error: error.message)
        } catch {
            outcome = retryOrFail(delivery, status: nil, error: error.message)
        }
        record(delivery, outcome, payload: payload)
    }

    /// What an answer means: 2xx delivered; 410 stops (the job's webhook, or this delivery of the server-wide URL,
    /// logged loudly); 429 and 503 wait as long as `Retry-After` says, if that is longer than the schedule; anything
    /// else follows the schedule.
    func decide(_ delivery: WebhookDelivery, status: Int, retryAfter: String?) -> DeliveryOutcome {
        if (200..<300).contains(status) { return .delivered(status: status) }
        if status == 410 {
            if delivery.scope == .job { return .disabled(status: status) }
            logger.error("the server-wide webhook URL answered 410 Gone; it stays configured: fix or remove --webhook-url",
                         ["url": .string(RedactedURL.text(delivery.url)), "delivery": .string(delivery.id)])
            return .failed(status: status, error: "The URL answered 410 Gone.")
        }
        let now = Date().timeIntervalSince1970
        if status == 429 || status == 503, let wait = RetrySchedule.retryAfter(retryAfter, now: now),
           delivery.attempts - delivery.scheduleBase <= RetrySchedule.delays.count {
            // Never sooner than the schedule: each attempt counts, and a `Retry-After` of 0 (or a date its clock
            // has passed) would spend them all within seconds.
            let scheduled = settings.schedule.delay(after: delivery.attempts - delivery.scheduleBase, jitter: 0) ?? 0
            return .retry(after: max(wait, scheduled), status: status, error: "The URL answered \(status); Retry-After: \(retryAfter ?? "").")
        }
        return retryOrFail(delivery, status: status, error: "The URL answered \(status).")
    }

    private func retryOrFail(_ delivery: WebhookDelivery, status: Int?, error: String) -> DeliveryOutcome {
        guard let delay = settings.schedule.delay(after: delivery.attempts - delivery.scheduleBase) else {
            return .failed(status: status, error: error + " No attempts are left.")
        }
        return .retry(after: delay, status: status, error: error)
    }

    private func record(_ delivery: WebhookDelivery, _ outcome: DeliveryOutcome, payload: Data?) {
        let name = switch outcome {
        case .delivered: "delivered"
        case .retry: "retry"
        case .failed: "failed"
        case .disabled: "disabled"
        }
        state.withLock { $0.attempts[name, default: 0] += 1 }
        var error = ""
        if case .retry(_, _, let message) = outcome { error = message }
        if case .failed(_, let message) = outcome { error = message }
        logger.info("webhook attempt", ["job_id": .string(delivery.jobID), "delivery": .string(delivery.id), "event": .string(delivery.event),
                                        "url": .string(RedactedURL.text(delivery.url)), "attempt": .int(delivery.attempts),
                                        "outcome": .string(name), "error": .string(error)])
        do {
            try store.finishDelivery(delivery, outcome, payload: payload)
        } catch {
            // The claim runs out and the delivery is sent again: at least once.
            logger.error("recording a webhook attempt failed", ["delivery": .string(delivery.id), "error": .string(error.description)])
        }
    }

    /// `{"type": …, "timestamp": …, "data": <the job>}`, keys sorted as the API writes them.
    static func payload(_ delivery: WebhookDelivery, job: Data) -> Data {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let timestamp = formatter.string(from: Date(timeIntervalSince1970: delivery.createdAt))
        return Data("{\"data\":".utf8) + job + Data(",\"timestamp\":\"\(timestamp)\",\"type\":\"\(delivery.event)\"}".utf8)
    }
}
