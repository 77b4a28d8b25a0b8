import CProcess
import Foundation
import Glibc
@testable import Jobs
import Locks
import Testing
import TestSupport

/// A job's output goes whole, whatever its child left in it.
@Suite struct OutputRemovalTests {
    /// A tree nested past PATH_MAX (made level by level with `mkdirat`, as a child taken over by a hostile file
    /// did: 3,000 levels, a file at the bottom) is removed: by full paths it could not be ("The file name is
    /// invalid"), a DELETE answered 204 and the files stayed on disk for good. A link in it is removed, not followed.
    @Test func aTreeNestedPastThePathLimitIsRemovedWhole() throws {
        let scratch = try Media.scratch()
        let output = scratch.appendingPathComponent("output").path
        let outside = scratch.appendingPathComponent("outside.txt").path
        try Data("keep".utf8).write(to: URL(fileURLWithPath: outside))
        #expect(mkdir(output, 0o755) == 0)
        try Data("main".utf8).write(to: URL(fileURLWithPath: output + "/output.mp4"))
        #expect(symlink(outside, output + "/link") == 0)
        var folder = open(output, O_RDONLY | O_DIRECTORY)
        try #require(folder >= 0)
        for level in 0..<3000 {
            let name = "level-\(level)"
            try #require(mkdirat(folder, name, 0o755) == 0, "level \(level): \(String(cString: strerror(errno)))")
            let inner = openat(folder, name, O_RDONLY | O_DIRECTORY)
            close(folder)
            try #require(inner >= 0)
            folder = inner
        }
        let file = openat(folder, "deep.bin", O_WRONLY | O_CREAT, 0o644)
        #expect(file >= 0 && write(file, "x", 1) == 1)
        close(file)
        close(folder)
        #expect(OutputRemoval.remove(output) == nil)
        #expect(access(output, F_OK) != 0, "the output is gone")
        #expect(try String(contentsOfFile: outside, encoding: .utf8) == "keep", "the link's target stays")
    }

    /// Folders the child left unreadable (0300, a megabyte inside), unwritable (0500) or closed (000) are given back
    /// their owner's rights and removed: the first stopped the removal, and the whole output stayed on disk (the
    /// server runs as the user every file of its children belongs to). Run on a thread without capabilities
    /// (they are a thread's own), as the suite runs as root, where modes bind nobody.
    @Test func foldersTheChildLeftClosedAreRemovedAllTheSame() throws {
        let output = try Media.scratch().appendingPathComponent("output").path
        #expect(mkdir(output, 0o755) == 0)
        for (name, mode) in [("unreadable", 0o300), ("unwritable", 0o500), ("closed", 0o000)] {
            let folder = output + "/" + name
            #expect(mkdir(folder, 0o700) == 0)
            try Data(count: 1 << 20).write(to: URL(fileURLWithPath: folder + "/blob"))
            #expect(chmod(folder, mode_t(mode)) == 0)
        }
        try Data("main".utf8).write(to: URL(fileURLWithPath: output + "/output.m4a"))
        let outcome = LockedValue<(dropped: Int32, problem: String?)?>(nil)
        NamedThread.start("without capabilities") {
            let dropped = tc_drop_capabilities(0)
            let problem = OutputRemoval.remove(output)
            outcome.withLock { $0 = (dropped, problem) }
            outcome.notifyAll()
        }
        #expect(outcome.wait(timeout: 30) { $0 != nil })
        let result = try #require(outcome.withLock { $0 })
        try #require(result.dropped == 0, "capabilities dropped on the thread")
        #expect(result.problem == nil, "\(result.problem ?? "")")
        #expect(access(output, F_OK) != 0, "the output is gone")
    }
}
