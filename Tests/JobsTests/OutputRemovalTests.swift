import Foundation
import Glibc
@testable import Jobs
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
}
