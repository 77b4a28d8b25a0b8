import Foundation
import Jobs
import Locks
import Pipeline
import Testing
import TestSupport

/// A real cluster on one machine: a PostgreSQL server, one API node (`serve --workers 0`) and worker processes
/// (`work`), all on one data directory, as on shared storage. Jobs go in through the API only.
@Suite(.serialized) struct ClusterTests {
    struct Cluster {
        let uri: String
        let data: URL
        let api: TestServer
        var workers: [WorkerNode]
        /// The store as a node sees it, for looking at leases and attempts.
        let store: PostgresJobStore

        init(workers count: Int, lease: Int = 20, database: String? = nil, options: [String] = []) throws {
            let uri = try database ?? PostgresServer.shared().makeDatabase()
            let data = try Media.scratch().appendingPathComponent("data")
            self.uri = uri
            self.data = data
            api = try TestServer(["--workers", "0", "--store", uri] + options, data: data)
            workers = try (0..<count).map { _ in try WorkerNode(data: data, store: uri, ["--lease-seconds", String(lease)] + options) }
            store = try PostgresJobStore(uri: uri, root: data.path)
        }

        func upload(_ path: String) throws -> String {
            let (status, object) = try api.json("/v1/uploads/", ["-T", path])
            guard status == 201, let id = object["id"] as? String else { throw ShellError(message: "upload: \(status) \(object)") }
            return id
        }

        func submit(_ input: String, settings: String) throws -> String {
            let (status, object) = try api.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                             #"{"input": "\#(input)", "settings": \#(settings)}"#])
            guard status == 201, let id = object["id"] as? String else { throw ShellError(message: "submit: \(status) \(object)") }
            return id
        }

        func job(_ id: String) throws -> [String: Any] { try api.json("/v1/jobs/\(id)").object }

        /// Runs `command` in the cluster's database with psql, as its administrator would.
        func psql(_ command: String) throws {
            let database = uri.split(separator: "?").first?.split(separator: "/").last.map(String.init) ?? ""
            _ = try Shell.check("psql", ["-X", "-q", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", database, "-c", command])
        }

        /// The worker node whose process holds the job's lease now.
        func holder(of id: String) throws -> WorkerNode? {
            guard let lease = try store.job(id: id)?.lease else { return nil }
            return workers.first { lease.contains("/\($0.pid)-") }
        }

        /// How many times each node's log says it started `id`.
        func starts(of id: String) -> Int {
            workers.reduce(0) { $0 + $1.entries("job started").filter { $0["job_id"] as? String == id }.count }
        }
    }

    /// A job slow enough to be caught running: 8 s of 720p at x264's medium preset.
    static let slowSettings = #"{"video": {"preset": "medium"}}"#
    static let smallSettings = #"{"video": {"width": 320, "preset": "ultrafast"}}"#

    /// A job given by URL with a webhook, through the API node: a worker node fetches and transcodes it, the API
    /// node sends its events (the outbox rows come from PostgreSQL's trigger), verified by the receiver.
    @Test func aJobByURLRunsOnAWorkerAndItsWebhooksGoOutFromTheAPINode() throws {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        let peer = try OutboundPeer(secret: secret)
        try FileManager.default.copyItem(atPath: try Media.path(.standard), toPath: peer.media.appendingPathComponent("clip.mp4").path)
        let cluster = try Cluster(workers: 1, options: ["--allow-private-urls", "127.0.0.0/8", "--webhook-secret", secret])
        let body = #"{"input": {"url": "\#(peer.base)/media/clip.mp4"}, "settings": \#(Self.smallSettings), "#
            + #""webhook": {"url": "\#(peer.base)/hooks/ok", "events": ["job.running", "job.succeeded"]}}"#
        let created = try cluster.api.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d", body])
        let id = try #require(created.object["id"] as? String, "\(created.object)")
        let succeeded = try eventually(120) { try cluster.job(id)["state"] as? String == "succeeded" }
        let final = try cluster.job(id)
        #expect(succeeded, "\(final)")
        #expect(eventually(30) { peer.deliveries(job: id).count == 2 })
        let deliveries = peer.deliveries(job: id)
        #expect(deliveries.map { $0["type"] as? String } == ["job.running", "job.succeeded"] && deliveries.allSatisfy { $0["verified"] as? Bool == true },
                "\(deliveries)")
        #expect(cluster.starts(of: id) == 1 && cluster.workers[0].entries("input fetched").count == 1)
    }

    @Test func thirtyJobsThroughOneAPINodeRunExactlyOnceOnThreeWorkersWithLiveProgress() throws {
        let cluster = try Cluster(workers: 3)
        let small = try cluster.upload(try Media.path(.standard))
        let long = try cluster.upload(try Media.path(.long))
        // A live stream on the API node of a job that runs on a worker.
        let watched = try cluster.submit(long, settings: Self.slowSettings)
        let stream = LockedValue<String?>(nil)
        let streamDone = DispatchSemaphore(value: 0)
        Thread {
            let output = try? Shell.run("curl", ["-s", "-N", "--max-time", "120", cluster.api.base + "/v1/jobs/\(watched)/events"])
            stream.withLock { $0 = output?.stdout }
            streamDone.signal()
        }.start()
        var ids = [watched]
        for _ in 0..<29 { ids.append(try cluster.submit(small, settings: Self.smallSettings)) }
        let finished = try eventually(240) {
            try ids.allSatisfy { ["succeeded", "failed", "canceled"].contains(try cluster.job($0)["state"] as? String) }
        }
        #expect(finished)
        for id in ids {
            let job = try cluster.job(id)
            #expect(job["state"] as? String == "succeeded" && job["attempts"] as? Int == 1, "\(job)")
            #expect(cluster.starts(of: id) == 1, "job \(id) was started \(cluster.starts(of: id)) times across the nodes")
        }
        let ranOn = cluster.workers.map { worker in worker.entries("job started").count }
        #expect(ranOn.reduce(0, +) == 30 && ranOn.filter { $0 > 0 }.count >= 2, "jobs per worker: \(ranOn)")
        // The outputs are real, read where the workers wrote them through the paths the API node lists.
        for id in [watched, ids[1]] {
            let done = try #require(try cluster.store.job(id: id))
            let probe = try Probe.read(try #require(done.outputPath))
            #expect(probe.streams.contains { $0.codec_type == "video" } && probe.format.durationSeconds > 3.5)
            let download = try cluster.api.curl("/v1/jobs/\(id)/output", ["-L", "-o", "/dev/null"])
            #expect(download.status == 200)
        }
        #expect(streamDone.wait(timeout: .now() + 30) == .success)
        let events = stream.withLock { $0 } ?? ""
        #expect(events.contains("event: progress"), "progress of a job on a worker reached the API node's stream: \(events.prefix(2000))")
        #expect(events.contains("\"state\":\"running\"") && events.contains("\"state\":\"succeeded\""))
    }

    @Test func aKilledWorkersJobIsTakenOverAndSucceedsOnAnotherNode() throws {
        let lease = 5
        let cluster = try Cluster(workers: 2, lease: lease)
        // 16 s of 720p: after the first segment is saved, the rest takes long enough for the kill to land well
        // before the end (with 8 s, a run once finished between the check below and the kill).
        let clip = try Media.scratch().appendingPathComponent("sixteen.mkv").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "testsrc2=s=1280x720:r=30:d=16", "-f", "lavfi", "-i", "sine=f=300:d=16",
                          "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", clip])
        let input = try cluster.upload(clip)
        let id = try cluster.submit(input, settings: Self.slowSettings)
        // Well past the 2 s segments up to 4 s, so they are durable (the flusher writes them a little after the
        // encoder): the node that takes the job over continues from at least there.
        #expect(try eventually(90) { (try cluster.store.job(id: id)?.progressTime ?? 0) > 6.5 })
        let victim = try #require(try cluster.holder(of: id))
        let killed = Date()
        victim.kill()
        #expect(try eventually(Double(lease) + 60) { try cluster.job(id)["state"] as? String == "succeeded" })
        let done = try #require(try cluster.store.job(id: id))
        #expect(done.attempts == 2 && done.leaseToken == 2, "attempts \(done.attempts), token \(done.leaseToken)")
        let takenOver = try #require(done.startedAt) - killed.timeIntervalSince1970
        #expect(takenOver < Double(lease) + 10, "taken over \(takenOver) s after the kill")
        let probe = try Probe.read(try #require(done.outputPath))
        #expect(abs(probe.format.durationSeconds - 16) < 0.1)
        #expect(probe.streams.filter { $0.codec_type == "video" }.count == 1)
        let leftovers = Media.files(in: cluster.data.appendingPathComponent("outputs"))
        #expect(leftovers == ["\(id).2"], "only the result, nothing of the killed attempt: \(leftovers)")
        let heir = try #require(cluster.workers.first { $0 !== victim })
        let resumed = heir.entries("job resumed from its checkpoint").first { $0["job_id"] as? String == id }
        let seconds = try #require(resumed?["seconds"] as? Double, "the node that took the job over resumed it: \(heir.log.suffix(2000))")
        #expect(seconds >= 4 - 0.1, "from the killed node's checkpoint at \(seconds) s")
        try Media.ffmpeg(["-xerror", "-i", try #require(done.outputPath), "-f", "null", "-"])
        #expect(try SeamCheck.videoPackets(try #require(done.outputPath)).count == 480, "every frame of 16 s at 30 fps")
        // Removed just after the end is recorded: a poll can see the end first.
        #expect(eventually(10) { Media.files(in: cluster.data.appendingPathComponent("checkpoints")).isEmpty },
                "the checkpoint went with the job's end")
    }

    /// `work --exit-when-idle` on a cluster waits while another node runs a job: it left at once, and had the other
    /// node died, its job would have gone back to the queue with no worker left to take it. It leaves once the job
    /// is done.
    @Test func anIdleWorkerStaysWhileAnotherNodeRunsAJob() throws {
        let cluster = try Cluster(workers: 1)
        let id = try cluster.submit(try cluster.upload(try Media.path(.tenSeconds)), settings: Self.slowSettings)
        #expect(try eventually(30) { try cluster.job(id)["state"] as? String == "running" })
        let idle = try WorkerNode(data: cluster.data, store: cluster.uri, ["--exit-when-idle"])
        // Every reading while the job runs finds the idle worker still there (at least one, past its first count).
        var readings = 0
        let deadline = Date().addingTimeInterval(90)
        while Date() < deadline, let state = try cluster.job(id)["state"] as? String, state == "running" || state == "queued" {
            Thread.sleep(forTimeInterval: 0.25)
            guard try cluster.job(id)["state"] as? String == "running" else { continue }
            readings += 1
            #expect(idle.process.isRunning, "stayed while the job ran: \(idle.log.suffix(500))")
            if !idle.process.isRunning { break }
        }
        #expect(readings >= 4, "the job was seen running \(readings) times")
        #expect(try cluster.job(id)["state"] as? String == "succeeded")
        #expect(eventually(10) { !idle.process.isRunning }, "left once the job was done")
        if !idle.process.isRunning { #expect(idle.process.terminationStatus == 0) }
    }

    /// A batch worker (`--exit-when-idle`) whose only queued job is one it leaves to others (its settings are a newer
    /// version's) exits: the job is not its work. It waited a day for the job's grace, then failed it.
    @Test func aBatchWorkerExitsWhenItsOnlyQueuedJobIsLeftToOthers() throws {
        let cluster = try Cluster(workers: 0)
        let id = try cluster.submit(try cluster.upload(try Media.path(.audioOnly)), settings: #"{"container": "m4a"}"#)
        try cluster.psql(#"UPDATE jobs SET settings = '{"video": {"aKeyOfANewerVersion": true}}' WHERE id = '\#(id)'"#)
        let batch = try WorkerNode(data: cluster.data, store: cluster.uri, ["--exit-when-idle"])
        #expect(eventually(20) { !batch.process.isRunning }, "\(batch.log.suffix(500))")
        if !batch.process.isRunning { #expect(batch.process.terminationStatus == 0) }
        let job = try cluster.job(id)
        #expect(job["state"] as? String == "queued" && (job["error"] is NSNull || job["error"] == nil), "left for a node that reads it: \(job)")
    }

    @Test func aPausedWorkerThatComesBackIsFencedOffAndGivesTheJobUp() throws {
        let lease = 4
        let cluster = try Cluster(workers: 2, lease: lease)
        let input = try cluster.upload(try Media.path(.long))
        let id = try cluster.submit(input, settings: Self.slowSettings)
        #expect(try eventually(60) { (try cluster.store.job(id: id)?.progressTime ?? 0) > 0.5 })
        let paused = try #require(try cluster.holder(of: id))
        paused.signal(SIGSTOP)
        #expect(try eventually(Double(lease) + 90) { try cluster.job(id)["state"] as? String == "succeeded" })
        let done = try #require(try cluster.store.job(id: id))
        #expect(done.leaseToken == 2 && done.attempts == 2)
        paused.signal(SIGCONT)
        let gaveUp = eventually(30) {
            paused.entries("job given up: its lease moved on to another worker, which owns the job and its result now; "
                           + "this attempt's output was discarded").contains { $0["job_id"] as? String == id }
                || paused.entries("stopping a job this node no longer holds").contains { $0["job_id"] as? String == id }
        }
        #expect(gaveUp, "the resumed node says why it dropped the job: \(paused.log.suffix(3000))")
        // Whatever the resumed node did since, the result is the other node's and intact.
        #expect(eventually(30) { paused.entries("job given up: its lease moved on to another worker, which owns the job and its result now; "
                                                + "this attempt's output was discarded").count == 1 })
        let after = try #require(try cluster.store.job(id: id))
        #expect(after == done, "the stored job is unchanged after the paused node resumed")
        let probe = try Probe.read(try #require(after.outputPath))
        #expect(abs(probe.format.durationSeconds - 8) < 0.1)
        #expect(paused.process.isRunning, "the resumed node keeps serving")
    }

    /// An API node starting on the shared data directory leaves the uploads other nodes are receiving alone. It
    /// removed every partial upload there, as a lone server does at start after a crash: the upload in progress on
    /// the other node failed at its end.
    @Test func anAPINodeStartingLeavesAnotherNodesUploadInProgressAlone() throws {
        let cluster = try Cluster(workers: 0)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: try Media.path(.standard)))
        let client = try RawClient(port: cluster.api.port)
        client.send("PUT /v1/uploads/clip.mp4 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(bytes.count)\r\nConnection: close\r\n\r\n")
        client.send(bytes.prefix(bytes.count / 2))
        let uploads = cluster.data.appendingPathComponent("uploads")
        #expect(eventually(10) { Media.files(in: uploads).contains { $0.hasPrefix(".upload-") && $0.hasSuffix(".partial") } })
        let second = try TestServer(["--workers", "0", "--store", cluster.uri], data: cluster.data)
        defer { _ = second.stop() }
        #expect(try second.curl("/healthz").status == 200)
        client.send(bytes.suffix(from: bytes.count / 2))
        let answer = client.read(until: "}", timeout: 30)
        #expect(answer.hasPrefix("HTTP/1.1 201"), "\(answer.prefix(300))")
    }

    /// A resumable upload begun through one API node and finished through another (a load balancer sends each
    /// request where it likes): the second node sees the first's offset, takes the rest where it left off, hashes
    /// the whole file (the running hash is the first node's, in its memory: read again from the shared file), and
    /// the job its settings ask for runs on a worker.
    @Test func aResumableUploadGoesOnThroughAnotherAPINode() throws {
        let cluster = try Cluster(workers: 1)
        let second = try TestServer(["--workers", "0", "--store", cluster.uri], data: cluster.data)
        defer { _ = second.stop() }
        let source = try Media.path(.standard)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let half = bytes.count / 2
        let folder = try Media.scratch()
        let first = folder.appendingPathComponent("first.bin"), rest = folder.appendingPathComponent("rest.bin")
        try bytes.prefix(half).write(to: first)
        try bytes.suffix(from: half).write(to: rest)
        let tus = ["-H", "Tus-Resumable: 1.0.0"], chunk = ["-H", "Content-Type: application/offset+octet-stream"]
        let settings = Data(#"{"container": "m4a"}"#.utf8).base64EncodedString()
        let created = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST", "-H", "Upload-Length: \(bytes.count)",
                                             "-H", "Upload-Metadata: filename Y2xpcC5tcDQ=,settings \(settings)"] + tus
                                      + [cluster.api.base + "/v1/tus"]).stdout
        let path = try #require(created.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("location: ") }
            .map { String($0.dropFirst(10)) }, "\(created)")
        let firstPatch = try cluster.api.curl(path, ["-X", "PATCH", "-T", first.path, "-H", "Upload-Offset: 0"] + tus + chunk)
        #expect(firstPatch.status == 204, "\(firstPatch)")
        let offset = try Shell.run("curl", ["-s", "-I"] + tus + [second.base + path]).stdout
        #expect(offset.contains("Upload-Offset: \(half)\r\n"), "the other node sees the first's offset: \(offset)")
        let last = try Shell.run("curl", ["-s", "-o", "/dev/null", "-D", "-", "-X", "PATCH", "-T", rest.path, "-H", "Upload-Offset: \(half)"]
                                   + tus + chunk + [second.base + path]).stdout
        #expect(last.replacingOccurrences(of: "HTTP/1.1 100 Continue\r\n\r\n", with: "").hasPrefix("HTTP/1.1 204"), "\(last)")
        let job = try #require(last.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("transcoder-job: ") }
            .map { String($0.dropFirst(16)).split(separator: "/").last.map(String.init) ?? "" }, "the completion made the job: \(last)")
        let id = try #require(path.split(separator: "/").last.map(String.init))
        let upload = try cluster.api.json("/v1/uploads/\(id)")
        #expect(upload.object["sha256"] as? String == String(try Shell.check("sha256sum", [source]).prefix(64))
                && upload.object["size"] as? Int == bytes.count, "\(upload.object)")
        var state: [String: Any] = [:]
        #expect(try eventually(60) {
            state = try cluster.job(job)
            return state["state"] as? String == "succeeded"
        }, "\(state)")
    }

    /// A node whose shared folder goes away (its mount: here a link made to point at an empty folder) says it is not
    /// ready, so a load balancer sends it no more uploads (they failed, or landed where no other node looks), and
    /// ready again once the folder is back. /readyz said 200 throughout.
    @Test func aNodeWithoutTheSharedFolderIsNotReady() throws {
        let cluster = try Cluster(workers: 0)
        let scratch = try Media.scratch()
        let link = scratch.appendingPathComponent("mount").path
        let empty = scratch.appendingPathComponent("empty").path
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: cluster.data.path)
        func point(at target: String) throws {
            try? FileManager.default.removeItem(atPath: link + ".new")
            try FileManager.default.createSymbolicLink(atPath: link + ".new", withDestinationPath: target)
            #expect(rename(link + ".new", link) == 0)
        }
        let node = try TestServer(["--workers", "0", "--store", cluster.uri], data: URL(fileURLWithPath: link))
        defer { _ = node.stop() }
        #expect(try node.json("/readyz").status == 200)
        try point(at: empty)
        var answer: (status: Int, object: [String: Any]) = (0, [:])
        #expect(try eventually(20) {
            answer = try node.json("/readyz")
            return answer.status == 503
        }, "\(answer)")
        #expect((answer.object["error"] as? [String: Any])?["code"] as? String == "data_directory_missing", "\(answer.object)")
        try point(at: cluster.data.path)
        #expect(try eventually(20) { try node.json("/readyz").status == 200 })
    }

    /// Deleting a job deletes its input upload too, unless another job still uses it: PostgreSQL refuses that with a
    /// foreign key violation, which the API must take for "keep it", as SQLite's refusal, not for a store failure.
    @Test func deletingOneOfTwoJobsOnAnUploadKeepsTheUploadForTheOther() throws {
        let cluster = try Cluster(workers: 0)
        let input = try cluster.upload(try Media.path(.standard))
        let first = try cluster.submit(input, settings: Self.smallSettings)
        let second = try cluster.submit(input, settings: Self.smallSettings)
        let deleted = try cluster.api.curl("/v1/jobs/\(first)", ["-X", "DELETE"])
        #expect(deleted.status == 204, "\(deleted)")
        #expect(try cluster.api.curl("/v1/uploads/\(input)").status == 200, "the other job's input is kept")
        #expect(try cluster.api.curl("/v1/jobs/\(second)").status == 200)
        let last = try cluster.api.curl("/v1/jobs/\(second)", ["-X", "DELETE"])
        #expect(last.status == 204, "\(last)")
        #expect(try cluster.api.curl("/v1/uploads/\(input)").status == 404, "the last job's input goes with it")
        #expect(try cluster.store.upload(id: input) == nil)
    }

    /// A job whose input cannot be read for a moment (a failover between the two reads; here its table renamed
    /// away) is answered as a store that failed, not without its input: that document was cached, and served until the job changed (for
    /// good once it had ended), and a webhook's body made from it went out signed on every try.
    @Test func aJobWhoseInputCannotBeReadIsNotShownWithoutIt() throws {
        let cluster = try Cluster(workers: 0)
        let input = try cluster.upload(try Media.path(.standard))
        let id = try cluster.submit(input, settings: Self.smallSettings)
        try cluster.psql("ALTER TABLE uploads RENAME TO uploads_away")
        let single = try cluster.api.json("/v1/jobs/\(id)")
        let list = try cluster.api.json("/v1/jobs")
        try cluster.psql("ALTER TABLE uploads_away RENAME TO uploads")
        #expect(single.status >= 500 && (single.object["error"] as? [String: Any])?["code"] as? String == "store_error", "\(single)")
        #expect(list.status >= 500, "\(list)")
        let shown = try cluster.api.json("/v1/jobs/\(id)").object["input"] as? [String: Any]
        #expect(shown?["filename"] as? String != nil && !(shown?["tracks"] as? [Any] ?? []).isEmpty, "\(shown ?? [:])")
    }

    /// A DELETE whose job is gone but whose input cannot be removed with it (its table renamed away for a moment)
    /// answers 204: the job is deleted. It answered 503, and the client that asked again was told 404. A cancel
    /// meanwhile, likewise, answers with the job canceled.
    @Test func aJobDeletedWhoseInputCannotGoIsStillDeleted() throws {
        let cluster = try Cluster(workers: 0)
        let input = try cluster.upload(try Media.path(.standard))
        let id = try cluster.submit(input, settings: Self.smallSettings)
        try cluster.psql("ALTER TABLE uploads RENAME TO uploads_away")
        // A cancel meanwhile is done and says so (it answered 503, and asked again, 409: the job had finished).
        let canceled = try cluster.api.json("/v1/jobs/\(id)/cancel", ["-X", "POST"])
        #expect([200, 202].contains(canceled.status) && canceled.object["state"] as? String == "canceled", "\(canceled)")
        let deleted = try cluster.api.curl("/v1/jobs/\(id)", ["-X", "DELETE"])
        try cluster.psql("ALTER TABLE uploads_away RENAME TO uploads")
        #expect(deleted.status == 204, "\(deleted)")
        #expect(try cluster.api.curl("/v1/jobs/\(id)").status == 404)
        #expect(try cluster.api.curl("/v1/uploads/\(input)").status == 200, "its input stays, for retention")
        #expect(cluster.api.log.contains("removing a deleted job's input upload failed"))
    }

    /// A job deleted by another node (which deletes a queued job's row as it cancels it: this node may never read
    /// its last state) ends this node's event streams for it: they waited for a state that never came, on
    /// heartbeats, for ever. Here the row goes and the change is announced as another node would, with psql.
    @Test func anEventStreamEndsWhenAnotherNodeDeletesItsJob() throws {
        let cluster = try Cluster(workers: 0)
        let id = try cluster.submit(try cluster.upload(try Media.path(.standard)), settings: Self.smallSettings)
        let output = try Media.scratch().appendingPathComponent("events.txt")
        let stream = Process()
        stream.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        stream.arguments = ["-s", "-N", "-m", "40", "-o", output.path, cluster.api.base + "/v1/jobs/\(id)/events"]
        try stream.run()
        #expect(eventually(10) { ((try? String(contentsOf: output, encoding: .utf8)) ?? "").contains("event: state") }, "the snapshot came")
        let database = try #require(cluster.uri.split(separator: "?").first?.split(separator: "/").last)
        try Shell.check("psql", ["-X", "-q", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", String(database), "-c",
                                 "DELETE FROM jobs WHERE id = '\(id)'; SELECT pg_notify('transcoderd_changed', '\(id)')"])
        #expect(eventually(10) { !stream.isRunning }, "the stream ended")
        if stream.isRunning { kill(stream.processIdentifier, SIGKILL) }
        stream.waitUntilExit()
        #expect(stream.terminationStatus == 0, "ended by the server, not by curl's timeout")
        #expect(try cluster.api.curl("/v1/jobs/\(id)/events").status == 404, "and a reconnecting EventSource is told it is gone")
    }

    /// `/metrics` while the store does not answer: `transcoderd_store_up 0` and none of the store's figures, not
    /// zeros an alert or an autoscaler would read as an empty queue.
    @Test func metricsLeaveOutWhatAStoreThatDoesNotAnswerCannotTell() throws {
        let cluster = try Cluster(workers: 0)
        _ = try cluster.submit(try cluster.upload(try Media.path(.audioOnly)), settings: "{}")
        let before = try cluster.api.curl("/metrics")
        #expect(before.body.contains("\ntranscoderd_store_up 1\n") && before.body.contains("\ntranscoderd_queue_depth 1\n"), "\(before.body.prefix(600))")
        cluster.store.close()
        let database = try #require(cluster.uri.split(separator: "?").first?.split(separator: "/").last)
        try Shell.check("psql", ["-X", "-q", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", "postgres", "-c",
                                 "DROP DATABASE \(database) WITH (FORCE)"])
        let after = try cluster.api.curl("/metrics")
        #expect(after.status == 200 && after.body.contains("\ntranscoderd_store_up 0\n"), "\(after.body.prefix(600))")
        #expect(!after.body.contains("transcoderd_queue_depth") && !after.body.contains("transcoderd_jobs{")
                && !after.body.contains("transcoderd_webhook_deliveries{"), "\(after.body.prefix(600))")
        #expect(after.body.contains("\ntranscoderd_jobs_running 0\n"), "what the node itself knows is still there")
    }

    /// A DELETE whose row the store refuses to delete leaves the job as it was, its output still served: the row goes
    /// first, the files after it. The output went first, and the job went on saying `succeeded` with nothing to serve.
    @Test func aDeleteTheStoreRefusesLeavesTheOutputServed() throws {
        let cluster = try Cluster(workers: 1)
        let id = try cluster.submit(try cluster.upload(try Media.path(.standard)), settings: Self.smallSettings)
        #expect(try eventually(60) { try cluster.job(id)["state"] as? String == "succeeded" })
        let database = try #require(cluster.uri.split(separator: "?").first?.split(separator: "/").last)
        try Shell.check("psql", ["-X", "-q", "-h", PostgresServer.shared().directory, "-U", "postgres", "-d", String(database), "-c", """
            CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'deleting is refused'; END $$;
            CREATE TRIGGER refuse_delete BEFORE DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION refuse_delete();
            """])
        let deleted = try cluster.api.curl("/v1/jobs/\(id)", ["-X", "DELETE"])
        #expect(deleted.status >= 500, "\(deleted)")
        #expect(try cluster.job(id)["state"] as? String == "succeeded")
        let output = try cluster.api.curl("/v1/jobs/\(id)/output", ["-o", "/dev/null"])
        #expect(output.status == 200, "the output is still served: \(output)")
    }

    @Test func deletingAJobOnTheAPINodeStopsItOnItsWorkerAtOnce() throws {
        let cluster = try Cluster(workers: 1)
        let input = try cluster.upload(try Media.path(.long))
        let id = try cluster.submit(input, settings: Self.slowSettings)
        #expect(try eventually(60) { (try cluster.store.job(id: id)?.progressTime ?? 0) > 0.2 })
        let asked = Date()
        let deleted = try cluster.api.curl("/v1/jobs/\(id)", ["-X", "DELETE"])
        #expect(deleted.status == 204, "\(deleted)")
        #expect(Date().timeIntervalSince(asked) < 3, "the worker stopped the job and the API node saw it end in \(Date().timeIntervalSince(asked)) s")
        #expect(try cluster.api.curl("/v1/jobs/\(id)").status == 404)
        #expect(try cluster.store.job(id: id) == nil)
        let worker = try #require(cluster.workers.first)
        #expect(eventually(5) { worker.entries("job ended").contains { $0["job_id"] as? String == id && $0["state"] as? String == "canceled" } },
                "\(worker.log.suffix(2000))")
        #expect(eventually(5) { Media.files(in: cluster.data.appendingPathComponent("outputs")).isEmpty })
    }

    @Test func aPostgreSQLRestartInTheMiddleOfARunLosesNothing() throws {
        let server = try PostgresServer() // its own: the restart must not disturb other tests' databases
        let cluster = try Cluster(workers: 2, database: try server.makeDatabase())
        let input = try cluster.upload(try Media.path(.standard))
        var ids: [String] = []
        for _ in 0..<8 { ids.append(try cluster.submit(input, settings: Self.smallSettings)) }
        #expect(try eventually(60) { try cluster.store.counts()[.succeeded] ?? 0 >= 1 })
        let counts = try cluster.store.counts()
        #expect((counts[.queued] ?? 0) + (counts[.running] ?? 0) >= 4, "the restart comes in the middle of the run: \(counts)")
        try server.stop()
        Thread.sleep(forTimeInterval: 2)
        let readiness = try cluster.api.curl("/readyz")
        #expect(readiness.status == 503, "the API node is not ready without its database: \(readiness)")
        let reason = (try? JSONSerialization.jsonObject(with: Data(readiness.body.utf8))) as? [String: Any]
        #expect((reason?["error"] as? [String: Any])?["code"] as? String == "store_unavailable", "an error answer: \(readiness.body)")
        // An API call meanwhile is "later" (503, Retry-After), not "a bug" (500), and tells no one where the
        // database is (the log does).
        let headers = try Shell.run("curl", ["-s", "-D", "-", "-o", "/dev/null", cluster.api.base + "/v1/jobs/\(ids[0])"]).stdout
        let call = try cluster.api.curl("/v1/jobs/\(ids[0])")
        #expect(call.status == 503 && call.body.contains(#""code":"store_unavailable""#), "\(call)")
        #expect(headers.lowercased().contains("retry-after: 2\r\n"), "\(headers)")
        let database = try #require(cluster.uri.split(separator: "?").first?.split(separator: "/").last.map(String.init))
        for body in [call.body, readiness.body] {
            #expect(!body.lowercased().contains("postgres") && !body.contains(server.directory) && !body.contains(database), "\(body)")
        }
        let logged = cluster.api.log.split(separator: "\n").filter { $0.contains(#""message":"the job store is out of reach""#) }
        #expect(logged.contains { $0.contains(server.directory) || $0.contains(database) }, "the API call's detail is in the log: \(logged.prefix(2))")
        #expect(cluster.api.log.contains("not listening to the store"), "the listener's trouble is in the log too")
        try server.start()
        #expect(try eventually(120) {
            try ids.allSatisfy { ["succeeded", "failed", "canceled"].contains(try cluster.job($0)["state"] as? String) }
        })
        for id in ids {
            let job = try cluster.job(id)
            // The outage is shorter than a lease: every job ran once, nothing was taken over or run again.
            #expect(job["state"] as? String == "succeeded" && job["attempts"] as? Int == 1, "\(job)")
            #expect(cluster.starts(of: id) == 1, "job \(id) started \(cluster.starts(of: id)) times")
        }
        #expect(try cluster.api.curl("/readyz").status == 200)
        // The server's FATAL notice to each session it ended went to stderr as a bare line, amid the JSON log.
        for log in [cluster.api.log] + cluster.workers.map(\.log) {
            let bare = log.split(separator: "\n").filter { !$0.hasPrefix("{") }
            #expect(bare.isEmpty, "lines that are not JSON: \(bare.prefix(3))")
        }
    }
}
