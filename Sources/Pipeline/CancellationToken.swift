import Synchronization

/// Lets another thread ask a running transcode to stop; the session checks it between samples.
public final class CancellationToken: Sendable {
    private let flag = Atomic<Bool>(false)

    public init() {}

    /// Asks the transcode to stop; it stops within a frame's work and deletes its partial output.
    public func cancel() { flag.store(true, ordering: .releasing) }

    public var isCanceled: Bool { flag.load(ordering: .acquiring) }
}
