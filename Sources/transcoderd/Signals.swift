import Foundation
import Glibc
import Locks

/// SIGTERM, SIGINT and SIGHUP (`terminating`), taken by a thread of their own with `sigtimedwait`.
///
/// `block()` runs first thing in a command that handles them, while the process has one thread: every thread made
/// afterwards inherits the block, so a signal sent at any moment from then on waits, pending, until `onTerminate`'s
/// thread takes it. (The Dispatch signal sources used before set the signal to `SIG_IGN` first, which discards a
/// pending one: a SIGTERM sent just as the server said it was listening could be lost, and the server ran on.)
enum Signals {
    static func block() {
        var set = terminating
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Calls `handler` on the signal thread for each SIGTERM, SIGINT or SIGHUP until the returned waiter is cancelled.
    static func onTerminate(_ handler: @escaping @Sendable () -> Void) -> SignalWaiter {
        SignalWaiter(handler)
    }

    /// The first signal calls `stop` (a graceful stop: running jobs get their grace); a second calls `hurry`, which
    /// ends the grace (the running jobs go back to the queue at once, as a stop does with them at its grace's end);
    /// a third ends the process at once, exit status 1. A second that ended the process left its jobs recorded as
    /// running, which the next start counted as a crash (an attempt each), and a job stopped so three times failed.
    static func onTerminateThenExit(_ stop: @escaping @Sendable () -> Void, hurry: @escaping @Sendable () -> Void) -> SignalWaiter {
        let count = LockedValue(0)
        return onTerminate {
            let received = count.withLock { value in
                value += 1
                return value
            }
            switch received {
            case 1: stop()
            case 2: hurry()
            default: _exit(1)
            }
        }
    }

    /// SIGTERM; SIGINT; and SIGHUP, a closed terminal or a dropped ssh session, stopped as cleanly (its default
    /// killed at once, leaving a transcode's `.partial` or a server's claimed jobs to the next start). Not SIGINT or
    /// SIGHUP when the process was started ignoring them (`nohup`, `cmd &` from a script): a blocked signal is taken
    /// by `sigtimedwait` whatever its disposition, so a server started with `nohup … &` stopped when its terminal
    /// closed. Decided once, at the first use (`block`), from the dispositions the process was started with.
    static let terminating: sigset_t = {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        for signal in [SIGINT, SIGHUP] where !startedIgnoring(signal) { sigaddset(&set, signal) }
        return set
    }()

    /// Whether `signal`'s disposition is to be ignored (`SIG_IGN`, 1, a macro Swift does not import).
    private static func startedIgnoring(_ signal: Int32) -> Bool {
        var current = sigaction()
        guard sigaction(signal, nil, &current) == 0 else { return false }
        return unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == 1
    }
}

/// The thread that takes the terminating signals for `Signals.onTerminate`.
final class SignalWaiter: Sendable {
    private let cancelled = LockedValue(false)

    init(_ handler: @escaping @Sendable () -> Void) {
        let cancelled = self.cancelled
        NamedThread.start("signals") {
            var set = Signals.terminating
            var timeout = timespec(tv_sec: 0, tv_nsec: 200_000_000)
            while !cancelled.withLock({ $0 }) {
                if sigtimedwait(&set, nil, &timeout) > 0 { handler() }
            }
        }
    }

    func cancel() {
        cancelled.withLock { $0 = true }
    }
}
