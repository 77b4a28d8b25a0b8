import CSystem
import Glibc
import Locks

/// An epoll loop on one dedicated thread. Other threads hand it work with `execute`, which wakes it through an
/// eventfd; everything else about it (registrations, connections) lives on its thread.
final class EventLoop: Sendable {
    let epoll: Int32
    private let wakeFD: Int32
    private let pending = LockedValue<[@Sendable (ServerLoop) -> Void]>([])
    /// epoll data value reserved for the wake-up eventfd.
    static let wakeToken: UInt64 = .max

    init() throws(IOError) {
        epoll = tc_epoll_create()
        try Posix.check(epoll, "epoll_create1")
        wakeFD = tc_eventfd()
        try Posix.check(wakeFD, "eventfd")
        try Posix.check(tc_epoll_ctl(epoll, tc_epoll_add(), wakeFD, tc_epoll_in, Self.wakeToken), "epoll_ctl(eventfd)")
    }

    /// Runs `task` on the loop's thread, soon.
    func execute(_ task: @escaping @Sendable (ServerLoop) -> Void) {
        let wasEmpty = pending.withLock { tasks in
            tasks.append(task)
            return tasks.count == 1
        }
        if wasEmpty {
            var one: UInt64 = 1
            _ = withUnsafeBytes(of: &one) { Glibc.write(wakeFD, $0.baseAddress, 8) }
        }
    }

    /// Drains the eventfd and returns the tasks queued so far.
    func takeTasks() -> [@Sendable (ServerLoop) -> Void] {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { Glibc.read(wakeFD, $0.baseAddress, 8) }
        return pending.withLock { tasks in
            defer { tasks.removeAll(keepingCapacity: true) }
            return tasks
        }
    }

    func register(_ fd: Int32, token: UInt64, events: UInt32) throws(IOError) {
        try Posix.check(tc_epoll_ctl(epoll, tc_epoll_add(), fd, events, token), "epoll_ctl(add)")
    }

    func modify(_ fd: Int32, token: UInt64, events: UInt32) {
        _ = tc_epoll_ctl(epoll, tc_epoll_mod(), fd, events, token)
    }

    func unregister(_ fd: Int32) {
        _ = tc_epoll_ctl(epoll, tc_epoll_del(), fd, 0, 0)
    }

    deinit {
        Posix.close(wakeFD)
        Posix.close(epoll)
    }
}
