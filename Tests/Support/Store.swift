import Foundation
import Jobs
import Pipeline

/// A fresh data directory with a real SQLite store for one test.
public struct StoreFixture: Sendable {
    public let directory: DataDirectory
    public let store: JobStore

    public init() throws {
        directory = DataDirectory(path: try Media.scratch().path)
        try directory.prepare()
        store = try JobStore(path: directory.databasePath)
    }

    /// Copies `source` into the uploads folder and records it, as the HTTP API would.
    public func upload(_ source: String) throws -> Upload {
        let id = UUID().uuidString.lowercased()
        let path = directory.uploadPath(id: id)
        try FileManager.default.copyItem(atPath: source, toPath: path)
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        let sha = String(try Shell.check("sha256sum", [path]).prefix(64))
        let tracks = (try? TranscodeSession.probe(path: path)) ?? []
        let upload = Upload(id: id, filename: URL(fileURLWithPath: source).lastPathComponent, contentType: nil, size: size,
                            sha256: sha, path: path, tracks: tracks, createdAt: Date().timeIntervalSince1970)
        try store.insert(upload)
        return upload
    }

    /// Files in the outputs folder.
    public var outputFiles: [String] { Media.files(in: directory.outputs) }
}
