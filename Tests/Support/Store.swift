import Foundation
import Jobs
import Pipeline

/// Which job store a test runs against: the same tests run on both (the conformance suite).
public enum StoreBackend: String, Sendable, CaseIterable {
    case sqlite, postgres
}

/// A fresh data directory with a real store for one test: a SQLite file in it, or a new database on the test
/// process's PostgreSQL server.
public struct StoreFixture: Sendable {
    public let directory: DataDirectory
    public let store: any JobStore
    public let backend: StoreBackend
    /// The PostgreSQL URI of the fixture's database (nil for SQLite).
    public let uri: String?

    /// `server`: the PostgreSQL server of a `.postgres` fixture (by default the test process's shared one).
    public init(_ backend: StoreBackend = .sqlite, on server: PostgresServer? = nil) throws {
        self.backend = backend
        directory = DataDirectory(path: try Media.scratch().path)
        try directory.prepare()
        switch backend {
        case .sqlite:
            uri = nil
            store = try SQLiteJobStore(path: directory.databasePath)
        case .postgres:
            let uri = try (server ?? PostgresServer.shared()).makeDatabase()
            self.uri = uri
            store = try PostgresJobStore(uri: uri, root: directory.root.path)
        }
    }

    /// A second store on the same data (another connection, as another process would open).
    public func reopen() throws -> any JobStore {
        if let uri { return try PostgresJobStore(uri: uri, root: directory.root.path) }
        return try SQLiteJobStore(path: directory.databasePath)
    }

    /// Copies `source` into the uploads folder and records it, as the HTTP API would.
    public func upload(_ source: String) throws -> Upload {
        let id = UUID().uuidString.lowercased()
        let path = directory.uploadPath(id: id)
        try FileManager.default.copyItem(atPath: source, toPath: path)
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        let sha = String(try Shell.check("sha256sum", [path]).prefix(64))
        let tracks = try TranscodeSession.probe(path: path)
        let upload = Upload(id: id, filename: URL(fileURLWithPath: source).lastPathComponent, contentType: nil, size: size,
                            sha256: sha, path: path, tracks: tracks, createdAt: Date().timeIntervalSince1970)
        try store.insert(upload)
        return upload
    }

    /// Files in the outputs folder.
    public var outputFiles: [String] { Media.files(in: directory.outputs) }
}
