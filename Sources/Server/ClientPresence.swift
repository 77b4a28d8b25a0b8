import Locks

/// Whether the client of a request is still connected, for a handler that works long on its behalf (a download
/// from a URL): the connection says when it closes, and the handler stops rather than finish work nobody awaits.
public final class ClientPresence: Sendable {
    private let left = LockedValue(false)

    public init() {}

    /// The connection closed (the client went away, or the server dropped it).
    func leave() { left.withLock { $0 = true } }

    public var hasLeft: Bool { left.withLock { $0 } }
}
