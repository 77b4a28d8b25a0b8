#if canImport(Glibc)
import Glibc
#else
import Darwin
#endif

/// A value that threads share, reachable only while its pthread mutex is held.
///
/// It has the shape of `Synchronization.Mutex`. We keep our own because on Linux that Mutex locks with raw futex
/// system calls, which ThreadSanitizer does not intercept: every access under it reads as a data race and a real race
/// hides among the false ones. ThreadSanitizer does see `pthread_mutex_lock`, so `scripts/sanitize thread` can give a
/// verdict. Uncontended, both cost one atomic operation.
///
/// Threads may also wait for the value to reach a state (`wait(timeout:until:)`), woken by `notifyAll()`: a
/// condition variable on the same mutex, so waiting never polls.
public final class LockedValue<Value: ~Copyable>: @unchecked Sendable {
    // Safe to share: `value` is read and written only inside `withLock` and `wait`, between lock and unlock of
    // `mutex` (a condition wait releases and retakes it atomically).
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var value: Value

    /// Guards `value`, which from now on belongs to the lock.
    public init(_ value: consuming sending Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        // Deadlines on the monotonic clock: a change of the wall clock neither shortens nor stretches a wait.
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        let conditionStatus = pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        precondition(conditionStatus == 0, "pthread_cond_init failed: \(conditionStatus)")
        self.value = value
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Blocks until `predicate` holds for the value, or until `timeout` seconds have passed (nil: no limit); returns
    /// whether it holds. The predicate runs with the lock held, each time `notifyAll` is called. Blocking: call it
    /// from a thread that may block, never from an event loop.
    public func wait(timeout: Double? = nil, until predicate: (inout sending Value) -> Bool) -> Bool {
        var deadline = timespec()
        if let timeout {
            clock_gettime(CLOCK_MONOTONIC, &deadline)
            let nanoseconds = Int(deadline.tv_nsec) + Int((max(0, timeout) * 1e9).rounded())
            deadline.tv_sec += nanoseconds / 1_000_000_000
            deadline.tv_nsec = nanoseconds % 1_000_000_000
        }
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !predicate(&value) {
            if timeout == nil {
                pthread_cond_wait(condition, mutex)
            } else if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT {
                return predicate(&value)
            }
        }
        return true
    }

    /// Wakes every thread blocked in `wait`, so each looks at the value again; call it after a change they wait for.
    public func notifyAll() {
        pthread_mutex_lock(mutex)
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Wakes one thread blocked in `wait`: for a change that one waiter can take (an item queued for one of many).
    public func notifyOne() {
        pthread_mutex_lock(mutex)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Runs `body` with exclusive access to the value if no other thread holds it now; nil (and `body` not run)
    /// when one does.
    public func withLockIfAvailable<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return .some(try body(&value))
    }

    /// Runs `body` with exclusive access to the value; keep it short and never block inside.
    public func withLock<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
