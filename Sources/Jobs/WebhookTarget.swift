import Foundation
import Outbound

/// What a job's state changes are announced as.
public enum WebhookEvent: String, Sendable, Codable, CaseIterable {
    case running = "job.running"
    case succeeded = "job.succeeded"
    case failed = "job.failed"
    case canceled = "job.canceled"

    /// What a job's webhook hears unless it names its events: how the job ended.
    public static let terminal: [WebhookEvent] = [.succeeded, .failed, .canceled]
}

/// A job's own webhook: the URL its events are posted to and which events.
public struct WebhookTarget: Sendable, Codable, Equatable {
    public var url: String
    public var events: [WebhookEvent]
    /// The URL answered 410 Gone: nothing more is sent to it for this job.
    public var disabled = false

    public init(url: String, events: [WebhookEvent] = WebhookEvent.terminal) {
        self.url = url
        self.events = events
    }

    /// The URL deliveries post to, in its ASCII form (`URLFetcher.fetchable`), when it is an absolute http or https
    /// URL with a host, of at most 2048 bytes; else nil.
    public static func validURL(_ url: String) -> String? { URLFetcher.fetchable(url) }
}

/// The webhooks a new job's state changes go to: its own, and the server-wide URL of the node that accepted it.
public struct JobWebhooks: Sendable, Equatable {
    public var target: WebhookTarget?
    public var serverURL: String?

    public init(target: WebhookTarget? = nil, serverURL: String? = nil) {
        self.target = target
        self.serverURL = serverURL
    }
}
