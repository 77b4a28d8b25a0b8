import Foundation
@testable import Pipeline
import Testing
import TestSupport

@Suite struct OutputDirectoryTests {
    static let shared = "/dev/shm"

    /// Whether `/dev/shm` is another file system than the tests' scratch folders (it is a tmpfs of its own).
    static var sharedIsElsewhere: Bool {
        var sharedStatus = stat(), scratchStatus = stat()
        guard let scratch = try? Media.scratch() else { return false }
        return stat(shared, &sharedStatus) == 0 && stat(scratch.path, &scratchStatus) == 0 && sharedStatus.st_dev != scratchStatus.st_dev
    }

    /// A file on another file system (a checkpoint folder elsewhere) is copied in whole, bytes only: a job's child
    /// may not change a file's mode or owner, which a library's copy does after it (a read-only source's mode came
    /// with it).
    @Test(.enabled(if: sharedIsElsewhere)) func aFileOnAnotherFileSystemIsCopiedIn() throws {
        let shared = Self.shared
        let scratch = try Media.scratch()
        let source = shared + "/transcoderd-copy-\(UUID().uuidString)"
        let bytes = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: source))
        defer { unlink(source) }
        // Read-only, as a checkpoint's file may be: a copy that set the source's mode (Foundation's) made the output's
        // read-only too; bytes only, it is the output's own.
        #expect(chmod(source, 0o400) == 0)
        let folder = try OutputDirectory(path: scratch.appendingPathComponent("out").path)
        try folder.adopt(file: source, as: "video/segment.m4s")
        try folder.commit()
        let copied = scratch.appendingPathComponent("out/video/segment.m4s").path
        #expect(try Data(contentsOf: URL(fileURLWithPath: copied)) == bytes)
        var copiedStatus = stat()
        #expect(stat(copied, &copiedStatus) == 0 && copiedStatus.st_mode & 0o200 != 0, "mode \(String(copiedStatus.st_mode & 0o777, radix: 8))")
    }
}
