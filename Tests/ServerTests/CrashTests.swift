import Foundation
import Locks
import Testing
import TestSupport

/// The server is SIGKILLed at random moments while clients upload and submit jobs, 50 times over one data directory.
/// Afterwards every acknowledged upload is intact, every acknowledged job ends (succeeded, or failed with
/// worker_crashed after dying three times), no succeeded job has a broken output, and SQLite's integrity check is ok.
@Suite struct CrashTests {
    struct Acknowledged: Sendable {
        var uploads: [String: String] = [:]
        var jobs: [String] = []
    }

    @Test func fiftyKillsLoseNothingAcknowledged() throws {
        let data = try Media.scratch().appendingPathComponent("data")
        let clip = try Media.path(.standard)
        let sha = String(try Shell.check("sha256sum", [clip]).prefix(64))
        let acknowledged = LockedValue(Acknowledged())
        var generator = SystemRandomNumberGenerator()
        // 50 kills, and more (at most 150) until ten of each were acknowledged: on a busy machine fewer answers come
        // in the same windows.
        for run in 0..<150 {
            let enough = acknowledged.withLock { $0.jobs.count >= 10 && $0.uploads.count >= 10 }
            if run >= 50 && enough { break }
            let server = try TestServer([], data: data)
            let stop = LockedValue(false)
            let clients = DispatchGroup()
            for client in 0..<2 {
                clients.enter()
                Thread {
                    defer { clients.leave() }
                    while !stop.withLock({ $0 }) {
                        // Alternate plain uploads and one-shot jobs; only 201 answers count as acknowledged.
                        if client == 0, let upload = try? server.json("/v1/uploads/", ["-T", clip]), upload.status == 201,
                           let id = upload.object["id"] as? String {
                            acknowledged.withLock { $0.uploads[id] = upload.object["sha256"] as? String }
                        } else if client == 1, let job = try? server.json("/v1/jobs", ["-F", "file=@" + clip, "-F", "settings=480p"]),
                                  job.status == 201, let id = job.object["id"] as? String {
                            acknowledged.withLock { $0.jobs.append(id) }
                            // About two jobs a run: enough to be killed mid-transcode, few enough to finish in time.
                            usleep(500_000)
                        }
                    }
                }.start()
            }
            usleep(UInt32.random(in: 200_000...1_500_000, using: &generator))
            kill(server.process.processIdentifier, SIGKILL)
            server.process.waitUntilExit()
            stop.withLock { $0 = true }
            clients.wait()
            #expect(server.process.terminationReason == .uncaughtSignal, "run \(run) was killed")
        }

        let final = try TestServer([], data: data)
        let known = acknowledged.withLock { $0 }
        #expect(known.jobs.count >= 10 && known.uploads.count >= 10, "work was acknowledged: \(known.jobs.count) jobs, \(known.uploads.count) uploads")
        for (id, reportedSHA) in known.uploads {
            #expect(reportedSHA == sha, "upload \(id) reported the right hash")
            let path = data.appendingPathComponent("uploads").appendingPathComponent(id).path
            #expect(String(try Shell.check("sha256sum", [path]).prefix(64)) == sha, "upload \(id) is intact")
        }
        for id in known.jobs {
            var job: [String: Any] = [:]
            let ended = try eventually(120) {
                job = try final.json("/v1/jobs/\(id)").object
                return ["succeeded", "failed"].contains(job["state"] as? String ?? "")
            }
            #expect(ended, "job \(id) ended: \(job["state"] ?? "missing")")
            if job["state"] as? String == "failed" {
                #expect((job["error"] as? [String: Any])?["code"] as? String == "worker_crashed", "\(job["error"] ?? "")")
            } else if job["state"] as? String == "succeeded" {
                let output = try Media.scratch().appendingPathComponent("out.mp4").path
                #expect(try final.curl("/v1/jobs/\(id)/output", ["-o", output]).status == 200)
                try Media.ffmpeg(["-v", "error", "-xerror", "-i", output, "-f", "null", "-"])
            }
        }
        // Jobs made by a request the kill cut before its answer are not acknowledged but run all the same: while one
        // runs, its stage (`<id>.<n>.partial`) is rightly there. Looked at once nothing is left to run.
        let settled = try eventually(120) {
            try ["queued", "running"].allSatisfy { (try final.json("/v1/jobs?state=\($0)").object["jobs"] as? [Any])?.isEmpty == true }
        }
        #expect(settled, "every job the runs left has ended")
        let outputs = Media.files(in: data.appendingPathComponent("outputs"))
        #expect(!outputs.contains { $0.hasSuffix(".partial") }, "no partial output is left: \(outputs)")
        final.stop()
        let integrity = try Shell.check("sqlite3", [data.appendingPathComponent("transcoderd.sqlite").path, "PRAGMA integrity_check"])
        #expect(integrity.trimmingCharacters(in: .whitespacesAndNewlines) == "ok")
    }
}
