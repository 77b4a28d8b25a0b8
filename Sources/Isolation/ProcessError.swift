import Glibc

/// A failed system call about a child process: the errno value and what we were doing.
public struct ProcessError: Error, Sendable, CustomStringConvertible {
    public let errnoCode: Int32
    public let reason: String

    public init(errnoCode: Int32, reason: String) {
        self.errnoCode = errnoCode
        self.reason = reason
    }

    public var description: String { "\(reason): \(String(cString: strerror(errnoCode)))" }
}
