import Foundation
@testable import Pipeline
import Testing
import TestSupport

/// The checkpoint's journal: each finished segment is one appended line (the manifest is not written again), and
/// a later attempt reads the manifest with the journal's complete lines after it, whatever moment the process died.
@Suite struct CheckpointJournalTests {
    private func open(_ path: String, fingerprint: String = "settings") throws -> Checkpoint {
        try Checkpoint(path: path, fingerprint: fingerprint, segmentSeconds: 2)
    }

    /// Writes segment `number`'s file and returns its record.
    private func segment(_ number: Int, in path: String) throws -> CheckpointManifest.Segment {
        let name = String(format: "video_%05d.pkt", number)
        try Data(repeating: UInt8(number), count: 1000 + number).write(to: URL(fileURLWithPath: path + "/" + name))
        let file = CheckpointManifest.File(name: name, bytes: 1000 + number, sha256: SHA256Hasher.file(atPath: path + "/" + name)!,
                                           packets: 60)
        return .init(number: number, file: file, start: Double(number - 1) * 2, end: Double(number) * 2,
                     lastPresentation: Int64(number) * 30720 - 512)
    }

    private func contents(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    @Test func segmentsGoToTheJournalAndAreThereAfterReopening() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        let manifest = contents(path + "/manifest.json")
        for number in 1...3 { try checkpoint!.append(.video(segment: try segment(number, in: path))) }
        #expect(contents(path + "/manifest.json") == manifest, "the manifest was written again for a segment")
        let lines = String(decoding: contents(path + "/journal.jsonl"), as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 3)
        #expect(checkpoint!.manifest.segments.map(\.number) == [1, 2, 3])
        checkpoint = nil

        checkpoint = try open(path)
        #expect(checkpoint!.manifest.segments.map(\.number) == [1, 2, 3])
        #expect(checkpoint!.manifest.segments == (try (1...3).map { try segment($0, in: path) }))
        // Opening folded the journal into the manifest and emptied it.
        #expect(contents(path + "/journal.jsonl").isEmpty)
        let stored = try JSONDecoder().decode(CheckpointManifest.self, from: contents(path + "/manifest.json"))
        #expect(stored.segments.count == 3 && stored.journalSequence == 3)
        try checkpoint!.append(.video(segment: try segment(4, in: path)))
        checkpoint = nil
        #expect(try open(path).manifest.segments.map(\.number) == [1, 2, 3, 4])
    }

    /// A folder whose manifest is no checkpoint's (torn, or damaged on disk) is refused when a user gave it (its
    /// files may be someone's), and cleared for a fresh start when it is the caller's own (a server's folder for
    /// the job): refused there, the job failed for good, telling to give another folder.
    @Test func anUnreadableManifestIsClearedOnlyInAFolderOfTheCallersOwn() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        try checkpoint!.append(.video(segment: try segment(1, in: path)))
        checkpoint = nil
        var manifest = contents(path + "/manifest.json")
        manifest[manifest.startIndex] = UInt8(ascii: "X")
        try manifest.write(to: URL(fileURLWithPath: path + "/manifest.json"))
        let refused = #expect(throws: MediaError.self) { try open(path) }
        #expect(refused?.code == "invalid_checkpoint")
        #expect(FileManager.default.fileExists(atPath: path + "/video_00001.pkt"), "left alone")
        let owned = try Checkpoint(path: path, fingerprint: "settings", segmentSeconds: 2, owned: true)
        #expect(owned.manifest.segments.isEmpty, "started over")
        #expect(!FileManager.default.fileExists(atPath: path + "/video_00001.pkt"))
        #expect(Checkpoint.isCheckpoint(path))
    }

    /// A number changed on disk with the JSON still valid (one bit: a resume point, a byte of the encoder's
    /// parameters) is caught by the record's own checksum: a journal line so changed ends the journal, a manifest
    /// so changed is not used. Taken as they were, the job resumed from the wrong place and succeeded with seconds
    /// missing.
    @Test func aRecordChangedOnDiskIsNotTaken() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        for number in 1...3 { try checkpoint!.append(.video(segment: try segment(number, in: path))) }
        checkpoint = nil
        // The second line's last presentation time, 61440 - 512 = 60928, made 70928: one digit.
        let journal = String(decoding: contents(path + "/journal.jsonl"), as: UTF8.self)
        try #require(journal.contains("\"lastPresentation\":60928"))
        try Data(journal.replacingOccurrences(of: "\"lastPresentation\":60928", with: "\"lastPresentation\":70928").utf8)
            .write(to: URL(fileURLWithPath: path + "/journal.jsonl"))
        checkpoint = try open(path)
        #expect(checkpoint!.manifest.segments.map(\.number) == [1], "the journal ends at the changed line")
        for number in 2...3 { try checkpoint!.append(.video(segment: try segment(number, in: path))) }
        try checkpoint!.update { $0.videoComplete = true }
        checkpoint = nil
        let manifest = String(decoding: contents(path + "/manifest.json"), as: UTF8.self)
        try #require(manifest.contains("\"lastPresentation\":60928"))
        try Data(manifest.replacingOccurrences(of: "\"lastPresentation\":60928", with: "\"lastPresentation\":70928").utf8)
            .write(to: URL(fileURLWithPath: path + "/manifest.json"))
        let reopened = try open(path).manifest
        #expect(reopened.segments.isEmpty && !reopened.videoComplete, "the manifest is not used")
    }

    @Test func aLineCutShortEndsTheJournalAndItsFileIsRemoved() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        for number in 1...2 { try checkpoint!.append(.video(segment: try segment(number, in: path))) }
        checkpoint = nil
        // A whole, valid record whose newline never made it to disk: not a complete line, so not trusted.
        let third = try #require(CheckpointManifest.JournalLine(sequence: 3, entry: .video(segment: try segment(3, in: path))).sealed())
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + "/journal.jsonl"))
        try handle.seekToEnd()
        try handle.write(contentsOf: try JSONEncoder().encode(third))
        try handle.close()
        #expect(try open(path).manifest.segments.map(\.number) == [1, 2])
        #expect(!FileManager.default.fileExists(atPath: path + "/video_00003.pkt"), "a segment no record lists is removed")
    }

    /// The process stopped after writing a manifest that includes the journal, before emptying the journal.
    @Test func linesTheManifestIncludesAreNotAddedTwice() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        for number in 1...2 { try checkpoint!.append(.video(segment: try segment(number, in: path))) }
        let journal = contents(path + "/journal.jsonl")
        try checkpoint!.update { $0.videoComplete = true }
        #expect(contents(path + "/journal.jsonl").isEmpty, "a whole write of the manifest empties the journal")
        checkpoint = nil
        try journal.write(to: URL(fileURLWithPath: path + "/journal.jsonl"))
        let reopened = try open(path).manifest
        #expect(reopened.segments.map(\.number) == [1, 2] && reopened.videoComplete)
    }

    @Test func aGapInTheNumbersEndsTheJournal() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        try checkpoint!.append(.video(segment: try segment(1, in: path)))
        checkpoint = nil
        let skipped = try #require(CheckpointManifest.JournalLine(sequence: 3, entry: .video(segment: try segment(2, in: path))).sealed())
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path + "/journal.jsonl"))
        try handle.seekToEnd()
        try handle.write(contentsOf: try JSONEncoder().encode(skipped) + Data("\n".utf8))
        try handle.close()
        #expect(try open(path).manifest.segments.map(\.number) == [1])
    }

    @Test func anotherJobsJournalIsNotRead() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        for number in 1...2 { try checkpoint!.append(.video(segment: try segment(number, in: path))) }
        checkpoint = nil
        // The new manifest cannot be written (a folder stands where its temporary file goes): the other job's
        // journal must already be empty by then, or its lines would follow this job's manifest after a crash.
        try FileManager.default.createDirectory(atPath: path + "/manifest.json.tmp", withIntermediateDirectories: false)
        #expect(throws: MediaError.self) { try open(path, fingerprint: "other settings") }
        #expect(contents(path + "/journal.jsonl").isEmpty, "the other job's journal is still there")
        try FileManager.default.removeItem(atPath: path + "/manifest.json.tmp")
        #expect(try open(path, fingerprint: "other settings").manifest.segments.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: path + "/video_00001.pkt"))
    }

    /// A node that took the job over renamed the folder to its own claim: the old holder can no longer record.
    @Test func aFolderTakenOverRefusesTheOldHoldersRecords() throws {
        let scratch = try Media.scratch()
        let path = scratch.appendingPathComponent("job.1").path
        let checkpoint = try open(path)
        try checkpoint.append(.video(segment: try segment(1, in: path)))
        let claimed = scratch.appendingPathComponent("job.2").path
        #expect(rename(path, claimed) == 0)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        let late = try segment(2, in: path)
        #expect(throws: MediaError.self) { try checkpoint.append(.video(segment: late)) }
        #expect(String(decoding: contents(claimed + "/journal.jsonl"), as: UTF8.self).split(separator: "\n").count == 1)
        #expect(try open(claimed).manifest.segments.map(\.number) == [1])
    }

    @Test func aLaddersSegmentsAreJournaledByTrack() throws {
        let path = try Media.scratch().appendingPathComponent("checkpoint").path
        var checkpoint: Checkpoint? = try open(path)
        let record = CheckpointManifest.LadderTrackRecord(order: 0, codecs: "avc1.64001f", width: 1280, height: 720,
                                                          frameRate: [30, 1], timescale: 15360, offset: 0)
        try checkpoint!.update { $0.ladder["720p"] = record }
        let first = SegmentedOutput.Segment(number: 1, path: "720p/segment_00001.m4s", start: 0, duration: 61440, bytes: 5000, keyFrames: [])
        try checkpoint!.append(.ladder(folder: "720p", segment: first, lastPresentation: 60928))
        checkpoint = nil
        let track = try #require(try open(path).manifest.ladder["720p"])
        #expect(track.segments == [first] && track.lastPresentation == [60928])
    }
}
