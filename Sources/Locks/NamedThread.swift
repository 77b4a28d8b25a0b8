#if canImport(Glibc)
import Foundation
import Glibc

/// Starts threads whose names the kernel knows, so `top -H`, `/proc/PID/task/*/comm`, strace and debuggers show
/// them: on Linux, Foundation's `Thread.name` names only the Foundation object.
public enum NamedThread {
    /// Starts `body` on a new thread named `name` (the kernel keeps at most 15 bytes of it).
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            setKernelName(name)
            body()
        }
        thread.name = name
        thread.start()
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
