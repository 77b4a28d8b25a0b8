import Locks

/// Whether the client of a request is still connected, for a handler that works long on its behalf (a download
/// from a URL): the connection says when it closes, and the handler stops rather than finish work nobody awaits.
public final class ClientPresence: Sendable {
    /// Whether the client may have gone (its end of file: a close, or a half-close after its request), and whether
    /// the connection is closed for good.
    private let state = LockedValue((left: false, closed: false, started: false))

    public init() {}

    /// The client's end of file came: it closed, or only stopped sending.
    func leave() { state.withLock { $0.left = true } }

    /// The connection is closed (the client went away, or the server dropped it): no answer can reach it.
    func close() {
        state.withLock { state in
            state.left = true
            state.closed = true
        }
    }

    /// The handler is about to run (on its pool): until then the request may still be dropped.
    func start() -> Bool {
        state.withLock { state in
            state.started = true
            return !state.closed
        }
    }

    /// Whether the handler has started.
    var hasStarted: Bool { state.withLock { $0.started } }

    public var hasLeft: Bool { state.withLock { $0.left } }

    /// Whether the connection is closed: nothing a handler would answer can be delivered.
    public var isClosed: Bool { state.withLock { $0.closed } }
}
