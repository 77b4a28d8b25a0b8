import Locks
import Synchronization

/// Lets another thread ask a running transcode to stop; the session checks it between samples, and FFmpeg's
/// interrupt callback checks it inside blocking calls (opening, reading).
///
/// Whoever runs the work elsewhere (a child process) registers `whenCanceled` to pass the request on.
public final class CancellationToken: Sendable {
    private struct Handlers {
        var list: [@Sendable (Bool) -> Void] = []
        var immediate = false
    }

    private let flag = Atomic<Bool>(false)
    private let external: (@Sendable () -> Bool)?
    private let handlers = LockedValue(Handlers())

    /// A token canceled by `cancel`, and also whenever `external` says so (a signal handler's flag in a child).
    public init(external: (@Sendable () -> Bool)? = nil) {
        self.external = external
    }

    /// Asks the transcode to stop; it stops within a frame's work and deletes its partial output. `immediately`:
    /// there is no point waiting for it (it has stalled), so whoever runs it elsewhere may kill it at once. Each call
    /// reaches every handler, so a later immediate cancel escalates an earlier patient one.
    public func cancel(immediately: Bool = false) {
        let (list, immediate) = handlers.withLock { state -> ([@Sendable (Bool) -> Void], Bool) in
            state.immediate = state.immediate || immediately
            flag.store(true, ordering: .releasing)
            return (state.list, state.immediate)
        }
        for handler in list { handler(immediate) }
    }

    public var isCanceled: Bool { flag.load(ordering: .acquiring) || (external?() ?? false) }

    /// Calls `handler` on every `cancel` (with whether to be immediate), and at once if the token is already
    /// canceled.
    public func whenCanceled(_ handler: @escaping @Sendable (Bool) -> Void) {
        let already = handlers.withLock { state -> Bool? in
            state.list.append(handler)
            return flag.load(ordering: .acquiring) ? state.immediate : nil
        }
        if let already { handler(already) }
    }
}
