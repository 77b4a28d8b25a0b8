/// Where a job is in its life: queued → running → succeeded | failed | canceled, or queued → canceled.
///
/// A running job also goes back to queued when its process died or shut down before it finished (recovery).
public enum JobState: String, Sendable, Codable, CaseIterable {
    case queued, running, succeeded, failed, canceled

    /// Whether the job has ended for good.
    public var isTerminal: Bool { self == .succeeded || self == .failed || self == .canceled }

    /// Whether the store allows moving from this state to `next`.
    public func canMove(to next: JobState) -> Bool {
        switch (self, next) {
        case (.queued, .running), (.queued, .canceled): true
        case (.running, .succeeded), (.running, .failed), (.running, .canceled), (.running, .queued): true
        default: false
        }
    }
}
