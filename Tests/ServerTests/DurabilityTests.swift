import Foundation
import Testing
import TestSupport

/// What a 201 or a `succeeded` promises survives a power cut: the server flushes a file's data before renaming it
/// into place and then flushes the folder that holds the new name. A crash cannot be staged here, so the order
/// of the system calls is read with strace while a real upload and a real job go through.
@Suite struct DurabilityTests {
    /// One traced call: `fsync` of a descriptor's path, or `rename` from one path to another.
    private enum Call: Equatable {
        case fsync(String)
        case rename(String, String)
    }

    @Test func uploadsAndOutputsAreFlushedThenRenamedThenTheirFolderFlushed() throws {
        let folder = try Media.scratch()
        let trace = folder.appendingPathComponent("strace.log").path
        let server = try TestServer([], data: folder.appendingPathComponent("data"), wrapper: [
            "strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-o", trace, "--",
        ])
        defer { server.stop() }
        let upload = try server.json("/v1/uploads/standard.mp4", ["-T", try Media.path(.standard)])
        #expect(upload.status == 201, "\(upload.object)")
        let uploadID = try #require(upload.object["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(uploadID)", "settings": "480p"}"#])
        let jobID = try #require(created.object["id"] as? String)
        #expect(eventually(60) { (try? server.json("/v1/jobs/\(jobID)"))?.object["state"] as? String == "succeeded" })
        let ladder = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                  #"{"input": "\#(uploadID)", "settings": {"container": "hls", "segmentDuration": 2}}"#])
        let ladderID = try #require(ladder.object["id"] as? String)
        #expect(eventually(60) { (try? server.json("/v1/jobs/\(ladderID)"))?.object["state"] as? String == "succeeded" })
        server.stop()

        let calls = try Self.calls(in: trace)
        let uploads = server.data.appendingPathComponent("uploads").path
        let outputs = server.data.appendingPathComponent("outputs").path
        // An upload is a file; a job's output is a folder (its files flushed before the folder is renamed).
        for (folder, name) in [(uploads, uploadID), (outputs, jobID), (outputs, ladderID)] {
            let final = folder + "/" + name
            let renamed = try #require(calls.firstIndex { if case .rename(_, final) = $0 { true } else { false } },
                                       "\(name) is renamed into \(folder)")
            guard case .rename(var temporary, _) = calls[renamed] else { continue }
            // A job's child writes its output under a name of its own inside a stage folder and renames it there;
            // the server then moves it into place: its files were flushed under the child's name.
            var limit = renamed
            while let earlier = calls[..<limit].lastIndex(where: { if case .rename(_, temporary) = $0 { true } else { false } }),
                  case .rename(let source, _) = calls[earlier] {
                temporary = source
                limit = earlier
            }
            #expect(calls[..<renamed].contains(.fsync(temporary)), "\(temporary) is flushed before its rename")
            if name == jobID {
                #expect(calls[..<renamed].contains(.fsync(temporary + "/output.mp4")), "the output file is flushed before its folder is renamed")
            }
            if name == ladderID {
                // Every file and sub-folder of a ladder, before the whole folder is renamed.
                for path in ["master.m3u8", "manifest.mpd", "360p", "360p/init.mp4", "360p/segment_00002.m4s", "360p/index.m3u8",
                             "audio", "audio/segment_00001.m4s"] {
                    #expect(calls[..<renamed].contains(.fsync(temporary + "/" + path)), "\(path) is flushed before the ladder's rename")
                }
            }
            #expect(calls[renamed...].contains(.fsync(folder)), "\(folder) is flushed after the rename")
        }
    }

    /// The calls strace logged, in order. With `-y` a descriptor shows its path: `fsync(5</data/uploads>)`.
    private static func calls(in trace: String) throws -> [Call] {
        let text = try String(contentsOfFile: trace, encoding: .utf8)
        return text.split(separator: "\n").compactMap { line -> Call? in
            if let start = line.range(of: "fsync(") ?? line.range(of: "fdatasync("),
               let open = line[start.upperBound...].firstIndex(of: "<"),
               let close = line[open...].firstIndex(of: ">") {
                return .fsync(String(line[line.index(after: open)..<close]))
            }
            guard line.contains("rename") else { return nil }
            let quoted = line.split(separator: "\"", omittingEmptySubsequences: false).enumerated()
                .filter { $0.offset % 2 == 1 }.map { String($0.element) }
            return quoted.count >= 2 ? .rename(quoted[quoted.count - 2], quoted[quoted.count - 1]) : nil
        }
    }
}
