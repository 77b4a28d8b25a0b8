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
public final class LockedValue<Value: ~Copyable>: @unchecked Sendable {
    // Safe to share: `value` is read and written only inside `withLock`, between lock and unlock of `mutex`.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    /// Guards `value`, which from now on belongs to the lock.
    public init(_ value: consuming sending Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        self.value = value
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
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
