#if canImport(Glibc)
import Foundation
import Glibc

/// Starts threads whose names the kernel knows, so `top -H`, `/proc/PID/task/*/comm`, strace and debuggers show
/// them: on Linux, Foundation's `Thread.name` names only the Foundation object.
public enum NamedThread {
    /// Starts `body` on a new thread named `name` (the kernel keeps at most 15 bytes of it); false when no thread
    /// could be started (`pthread_create` refused: no memory for its stack under a job's data limit, or no
    /// processes left). Foundation's `Thread.start` failed silently there, and a job's process waited for ever on
    /// work that no thread would do.
    @discardableResult
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
        let work = Unmanaged.passRetained(Work(name: name, body: body))
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let result = pthread_create(&thread, &attributes, run, work.toOpaque())
        guard result == 0 else {
            work.release()
            return false
        }
        return true
    }

    /// The new thread's start: names it and runs its work.
    private static let run: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { argument in
        guard let argument else { return nil }
        let work = Unmanaged<Work>.fromOpaque(argument).takeRetainedValue()
        setKernelName(work.name)
        work.body()
        return nil
    }

    private final class Work: Sendable {
        let name: String
        let body: @Sendable () -> Void

        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Names the calling thread through `/proc/thread-self/comm` (what `pthread_setname_np` does; Swift's Glibc
    /// module does not export it, and `prctl` is variadic).
    private static func setKernelName(_ name: String) {
        let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }
}
#endif
