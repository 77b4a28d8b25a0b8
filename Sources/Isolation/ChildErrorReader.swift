import Foundation
import Glibc
import Locks

/// The one thread that reads every child's standard error (`ChildErrorOutput`), polling their pipes: a thread per
/// child grew the server by a thread for each job and probe under way, where its threads are a fixed number.
final class ChildErrorReader: Sendable {
    static let shared = ChildErrorReader()

    /// One child's pipe. Its lines' state is the reading thread's alone.
    final class Source: @unchecked Sendable {
        let descriptor: Int32
        let output: ChildErrorOutput
        let lines: @Sendable (_ line: String, _ task: String) -> Void
        var splitter = ChildErrorOutput.Lines()

        init(descriptor: Int32, output: ChildErrorOutput, lines: @escaping @Sendable (_ line: String, _ task: String) -> Void) {
            self.descriptor = descriptor
            self.output = output
            self.lines = lines
        }

        func hand(_ found: [String]) {
            guard !found.isEmpty else { return }
            let task = output.task.withLock { $0 }
            for line in found { lines(line, task) }
        }
    }

    private let sources = LockedValue<[Source]>([])
    /// A pipe whose byte wakes the thread's poll (a source added, a child ended).
    private let wakeRead: Int32
    private let wakeWrite: Int32

    private init() {
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            for end in ends {
                _ = fcntl(end, F_SETFD, FD_CLOEXEC)
                _ = fcntl(end, F_SETFL, O_NONBLOCK)
            }
        }
        (wakeRead, wakeWrite) = (ends[0], ends[1])
        NamedThread.start("child-stderr") { [self] in run() }
    }

    func add(_ source: Source) {
        sources.withLock { $0.append(source) }
        wake()
    }

    /// Has the thread look at its sources now (a full wake pipe already wakes it).
    func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private func run() {
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let current = sources.withLock { $0 }
            var polled = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
                + current.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN), revents: 0) }
            if poll(&polled, nfds_t(polled.count), 250) < 0 {
                if errno != EINTR { usleep(10_000) }
                continue
            }
            if polled[0].revents != 0 { while read(wakeRead, &chunk, chunk.count) > 0 {} }
            let now = ProcessInfo.processInfo.systemUptime
            var ended: [ObjectIdentifier] = []
            for (index, source) in current.enumerated() {
                var done = false
                if polled[index + 1].revents != 0 {
                    // One read each round: a child that writes without end cannot keep the others waiting.
                    let count = read(source.descriptor, &chunk, chunk.count)
                    if count > 0 {
                        source.hand(source.splitter.add(chunk[0..<count]))
                        done = source.output.isOverdue(at: now, factor: 2) // a writer that never stops
                    } else if count == 0 || (errno != EINTR && errno != EAGAIN) {
                        done = true
                    }
                } else {
                    done = source.output.isOverdue(at: now, factor: 1)
                }
                guard done else { continue }
                source.hand(source.splitter.finish().map { [$0] } ?? [])
                close(source.descriptor)
                ended.append(ObjectIdentifier(source))
            }
            if !ended.isEmpty {
                sources.withLock { list in list.removeAll { ended.contains(ObjectIdentifier($0)) } }
            }
        }
    }
}
