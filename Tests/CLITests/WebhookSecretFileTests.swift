import Foundation
import Jobs
import Locks
import Testing
import TestSupport
@testable import transcoderd

/// The secret a server keeps in its data directory when it is given none: on shared storage, API nodes that start
/// at once must all sign with the same one.
@Suite struct WebhookSecretFileTests {
    @Test func nodesStartingAtOnceAllReadTheSameSecret() throws {
        for _ in 0..<20 {
            let folder = try Media.scratch()
            let found = LockedValue<[String]>([])
            let arrived = LockedValue(0)
            let done = DispatchGroup()
            for _ in 0..<8 {
                done.enter()
                Thread {
                    // All at once: each waits until every one is there.
                    arrived.withLock { $0 += 1 }
                    while arrived.withLock({ $0 }) < 8 { sched_yield() }
                    let text: String
                    do {
                        text = try Configuration().webhookSettings(directory: DataDirectory(path: folder.path)).secret.text
                    } catch {
                        text = "failed: \(error)"
                    }
                    found.withLock { $0.append(text) }
                    done.leave()
                }.start()
            }
            done.wait()
            let texts = found.withLock { $0 }
            #expect(texts.count == 8 && Set(texts).count == 1 && texts[0].hasPrefix("whsec_"), "\(texts)")
            let path = folder.appendingPathComponent("webhook-secret").path
            #expect(try String(contentsOfFile: path, encoding: .utf8) == texts[0] + "\n")
            #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["webhook-secret"], "nothing left aside")
            #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
            try FileManager.default.removeItem(at: folder) // a secret: not left in the scratch space
        }
    }
}
