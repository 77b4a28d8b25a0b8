import Foundation
import Outbound

/// When a failed webhook attempt is tried again: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 24 h after attempts 1 to 7
/// (each ±10 % so receivers coming back are not hit by every sender at once), then never; `scale` multiplies it all
/// (tests run the schedule in seconds). A longer `Retry-After` on 429 or 503 is honoured instead, up to 24 h.
public struct RetrySchedule: Sendable, Equatable {
    public static let delays: [Double] = [5, 300, 1800, 7200, 18_000, 36_000, 86_400]
    public var scale: Double

    public init(scale: Double = 1) { self.scale = scale }

    /// Seconds to wait after attempt `attempt` (1-based) failed, nil when it was the last one. `jitter` in [-1, 1].
    public func delay(after attempt: Int, jitter: Double = Double.random(in: -1...1)) -> Double? {
        guard attempt >= 1, attempt <= Self.delays.count else { return nil }
        return Self.delays[attempt - 1] * scale * (1 + 0.1 * jitter)
    }

    /// Seconds a `Retry-After` value asks for (a number of seconds, or an HTTP date after `now`), at most 24 h.
    public static func retryAfter(_ value: String?, now: Double) -> Double? { HTTPDate.retryAfter(value, now: now) }
}
