import Foundation
import Glibc
import Pipeline

/// The resumable uploads of a data directory, as files in `tus/` (shared storage in a cluster, so any API node
/// serves any upload): `<id>.bin` holds the bytes received so far, whose size is the upload's offset, and
/// `<id>.json` the `TusUpload`, replaced whole (written, flushed, renamed). A PATCH in progress holds an exclusive
/// `flock` on the `.bin` file, which a second one finds taken. When bytes last arrived is the `.bin` file's
/// modification time, so a PATCH writes nothing but its bytes.
///
/// Blocking file I/O: call from a pool thread, never from an event loop.
public struct TusUploads: Sendable {
    public let folder: URL
    /// Hours after the last bytes arrived that an unfinished upload is deleted.
    public let expiryHours: Double
    private let directory: DataDirectory

    public init(directory: DataDirectory, expiryHours: Double = 24) {
        folder = directory.tus
        self.directory = directory
        self.expiryHours = expiryHours
    }

    public func dataPath(_ id: String) -> String { folder.appendingPathComponent(id + ".bin").path }
    /// Where the bytes are while they become an upload: renamed here first, so one request completes it.
    public func completingPath(_ id: String) -> String { folder.appendingPathComponent(id + ".completing").path }
    /// Where the bytes go once they are an upload (`DataDirectory.uploadPath`): a completion that died after moving
    /// them there, before the upload was recorded, left them there.
    public func storedPath(_ id: String) -> String { directory.uploadPath(id: id) }
    func infoPath(_ id: String) -> String { folder.appendingPathComponent(id + ".json").path }
    /// Says a chunk with a checksum is being appended, and the offset before it: its bytes count once checked.
    func chunkPath(_ id: String) -> String { folder.appendingPathComponent(id + ".chunk").path }

    /// Whether `id` can name a tus upload (a lowercase UUID): anything else is never a path.
    public static func isValidID(_ id: String) -> Bool {
        id.count == 36 && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) || $0 == 0x2D }
    }

    /// Creates the upload's files: an empty `.bin` and its description, both flushed to disk.
    public func create(_ upload: TusUpload) throws(MediaError) {
        let data = dataPath(upload.id)
        let descriptor = open(data, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            throw MediaError(code: "storage_error", message: "Creating \(data) failed: \(String(cString: strerror(errno))).")
        }
        close(descriptor)
        try save(upload)
    }

    /// Replaces the description whole: a crash leaves the old one or the new one.
    public func save(_ upload: TusUpload) throws(MediaError) {
        let path = infoPath(upload.id)
        let temporary = path + ".\(UInt32.random(in: 0...UInt32.max)).tmp"
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let bytes = try? encoder.encode(upload), FileManager.default.createFile(atPath: temporary, contents: bytes) else {
            throw MediaError(code: "storage_error", message: "Writing \(temporary) failed.")
        }
        do throws(MediaError) {
            try FileDurability.syncFile(atPath: temporary)
            guard rename(temporary, path) == 0 else {
                throw MediaError(code: "storage_error", message: "Renaming \(temporary) failed: \(String(cString: strerror(errno))).")
            }
            try FileDurability.syncDirectory(containing: path)
        } catch {
            unlink(temporary)
            throw error
        }
    }

    /// The upload's description, or nil when there is none (never created, deleted, expired) or it cannot be read
    /// now (`readUpload` tells the two apart).
    public func upload(_ id: String) -> TusUpload? {
        (try? readUpload(id)) ?? nil
    }

    /// The upload's description, or nil when there is none; throws `storage_error` when it is there but cannot be
    /// read now (an I/O error, out of descriptors, a shared file system away) and `upload_damaged` when it does not
    /// decode. A read that failed was "no such upload": a HEAD answered 404, and tus clients start the upload over
    /// from its first byte; the sweep judged its age by whichever of its files it listed first (its description,
    /// written at its creation), and could delete an upload whose bytes were still arriving.
    public func readUpload(_ id: String) throws(MediaError) -> TusUpload? {
        guard Self.isValidID(id) else { return nil }
        let descriptor = open(infoPath(id), O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw MediaError(code: "storage_error", message: "Reading the upload's description failed: \(String(cString: strerror(errno))).")
        }
        defer { close(descriptor) }
        var bytes = Data()
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = read(descriptor, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw MediaError(code: "storage_error", message: "Reading the upload's description failed: \(String(cString: strerror(errno))).")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            guard bytes.count <= 1 << 20 else { throw MediaError(code: "upload_damaged", message: "The upload's description is too long.") }
        }
        do {
            return try JSONDecoder().decode(TusUpload.self, from: bytes)
        } catch {
            throw MediaError(code: "upload_damaged", message: "The upload's description is damaged.")
        }
    }

    /// Bytes received so far: the `.bin` file's size (its length once the bytes became an upload), without a chunk
    /// whose checksum is not checked yet (being appended, or cut short by a crash: see `markChunk`).
    public func offset(of upload: TusUpload) -> Int64 {
        if upload.completedAt != nil { return upload.length ?? 0 }
        if let checked = uncheckedChunkStart(upload.id) { return checked }
        // Moved on into the upload's place (or nowhere: recorded meanwhile) only once all of them were there.
        guard let found = bytesLocation(of: upload), found.path != storedPath(upload.id) else { return upload.length ?? 0 }
        return Int64(found.status.st_size)
    }

    /// Where an unfinished upload's bytes are now, with their file's status: `.bin` while they arrive, aside
    /// (`completingPath`) while a completion has them or since one died with them, or in the upload's place
    /// (`storedPath`) once a completion moved them on and has not recorded it yet. Nil when they are in none.
    public func bytesLocation(of upload: TusUpload) -> (path: String, status: stat)? {
        let places = [dataPath(upload.id), completingPath(upload.id)] + (upload.completedAt == nil ? [storedPath(upload.id)] : [])
        for path in places {
            var status = stat()
            if stat(path, &status) == 0 { return (path, status) }
        }
        return nil
    }

    /// Before a chunk with a checksum is appended at `offset` (holding the `.bin` lock): notes where it starts, so
    /// that if the process dies before the check, the chunk's bytes are taken back (`takeBackUncheckedChunk`) and not
    /// counted meanwhile. Throws when the note cannot be written.
    public func markChunk(_ id: String, at offset: Int64) throws(MediaError) {
        let path = chunkPath(id)
        guard FileManager.default.createFile(atPath: path, contents: Data(String(offset).utf8)) else {
            throw MediaError(code: "storage_error", message: "Writing \(path) failed.")
        }
    }

    /// The chunk was checked (and kept, or taken back): its note goes, before the lock.
    public func clearChunk(_ id: String) { unlink(chunkPath(id)) }

    /// Where an unchecked chunk began, when one is noted.
    func uncheckedChunkStart(_ id: String) -> Int64? {
        FileManager.default.contents(atPath: chunkPath(id)).flatMap { Int64(String(decoding: $0, as: UTF8.self)) }
    }

    /// Holding the `.bin` lock (`descriptor`): cuts the file back to where a noted chunk began, whose request died
    /// with its process before its checksum was checked, and removes the note. False when it cannot.
    @discardableResult
    public func takeBackUncheckedChunk(_ id: String, descriptor: Int32) -> Bool {
        guard access(chunkPath(id), F_OK) == 0 else { return true }
        if let start = uncheckedChunkStart(id) {
            var status = stat()
            guard fstat(descriptor, &status) == 0 else { return false }
            if Int64(status.st_size) > start, ftruncate(descriptor, off_t(start)) != 0 { return false }
        }
        clearChunk(id)
        return true
    }

    /// A HEAD's look: takes back a noted chunk nobody is appending any more (its lock is free). Nothing happens
    /// while a PATCH holds the upload.
    public func recoverChunk(of upload: TusUpload) {
        guard upload.completedAt == nil, access(chunkPath(upload.id), F_OK) == 0 else { return }
        let descriptor = open(dataPath(upload.id), O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { return }
        takeBackUncheckedChunk(upload.id, descriptor: descriptor)
    }

    /// Takes the lock that says a request is completing `id`, before its bytes are renamed to `completingPath` and
    /// until the completion is recorded: an exclusive `flock` on the description, which the completion replaces only
    /// as its last step. The lock goes with the descriptor, so a process that died completing holds nothing. Returns
    /// the descriptor to close, or nil when the upload is gone or (unless `waiting`) another request holds it.
    ///
    /// The lock taken is on the description the path names once it is held: a holder that saved a new one (a
    /// completion given up on a probe timeout keeps the upload going) left a waiter holding the old file, which no
    /// one else would ever open, and the next request locked the new one at once: two completions ran on the same
    /// bytes, the loser's record over the winner's.
    public func lockCompletion(_ id: String, waiting: Bool = false) -> Int32? {
        while true {
            // Open for writing though only locked: on NFS, flock is a byte-range lock, and an exclusive one needs a
            // descriptor open for writing (EBADF otherwise: no upload could complete on shared storage).
            let descriptor = open(infoPath(id), O_RDWR | O_CLOEXEC)
            guard descriptor >= 0 else { return nil }
            var result: Int32
            repeat { result = flock(descriptor, waiting ? LOCK_EX : LOCK_EX | LOCK_NB) } while result != 0 && errno == EINTR
            guard result == 0 else {
                close(descriptor)
                return nil
            }
            var held = stat(), named = stat()
            if fstat(descriptor, &held) == 0, stat(infoPath(id), &named) == 0, held.st_dev == named.st_dev, held.st_ino == named.st_ino {
                return descriptor
            }
            close(descriptor)
            // Replaced while it was waited for (or gone): the lock that counts is the new file's.
            guard waiting, access(infoPath(id), F_OK) == 0 else { return nil }
        }
    }

    /// A completion that nobody is doing any more (its process died between the rename and the end): the bytes go
    /// back to `.bin`, so a PATCH at the length completes the upload again. Nothing happens while one is under way.
    public func recoverCompletion(of upload: TusUpload) {
        guard upload.completedAt == nil, access(dataPath(upload.id), F_OK) != 0,
              access(completingPath(upload.id), F_OK) == 0, let lock = lockCompletion(upload.id) else { return }
        defer { close(lock) }
        // Under the lock, as it is now: a completion that ended meanwhile recorded it, or moved the bytes on.
        guard self.upload(upload.id)?.completedAt == nil, access(dataPath(upload.id), F_OK) != 0 else { return }
        rename(completingPath(upload.id), dataPath(upload.id))
    }

    /// Whether a PATCH holds the upload now (the `.bin` lock is taken).
    public func isHeld(_ id: String) -> Bool {
        let descriptor = open(dataPath(id), O_RDWR | O_CLOEXEC) // for writing: see lockCompletion
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return flock(descriptor, LOCK_EX | LOCK_NB) != 0
    }

    /// The uploads whose bytes have all arrived but that are not recorded as complete: completions that a crash cut
    /// short (or, for a moment, ones under way: completing sorts them out under its lock).
    public func uncompleted() -> [TusUpload] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { $0.hasSuffix(".json") }.compactMap { name in
            guard let upload = upload(String(name.dropLast(".json".count))), upload.completedAt == nil,
                  let length = upload.length, offset(of: upload) == length else { return nil }
            return upload
        }
    }

    /// When bytes last arrived (its creation if none did yet), wherever they are: in `.bin`, or renamed aside by a
    /// completion (under way, or that died with its process and waits for the client's next request to put them
    /// back), or moved on into the upload's place by one not yet recorded: an upload whose last bytes came minutes
    /// ago is not old, whenever it was created.
    public func lastWrite(of upload: TusUpload) -> Double {
        guard let status = bytesLocation(of: upload)?.status else { return upload.createdAt }
        return max(upload.createdAt, Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9)
    }

    /// When the upload is deleted (seconds since 1970): an unfinished one `expiryHours` after its last bytes, a
    /// finished one's description as long after it ended.
    public func expiresAt(_ upload: TusUpload) -> Double {
        (upload.completedAt ?? lastWrite(of: upload)) + expiryHours * 3600
    }

    public func isExpired(_ upload: TusUpload, at time: Double) -> Bool { expiresAt(upload) <= time }

    /// Removes its files (missing ones are fine), unless a PATCH or a completion holds the upload now: then false.
    /// `names`: the upload's names in the folder's listing when the caller has one (a sweep), else it is read.
    @discardableResult
    public func delete(_ id: String, names listed: [String]? = nil) -> Bool {
        guard Self.isValidID(id) else { return true }
        var completion: Int32?
        if access(infoPath(id), F_OK) == 0 {
            // A completion under way records the upload after this: deleting the description now would not stop it.
            completion = lockCompletion(id)
            guard completion != nil else { return false }
        }
        defer { if let completion { close(completion) } }
        let descriptor = open(dataPath(id), O_RDWR | O_CLOEXEC) // for writing: see lockCompletion
        // Held until the files are gone: a PATCH that took the lock between would write into (and a deferred
        // length save a description for) an upload being deleted.
        defer { if descriptor >= 0 { close(descriptor) } }
        if descriptor >= 0, flock(descriptor, LOCK_EX | LOCK_NB) != 0 { return false }
        // The description first: a crash after it leaves files without one, which `sweep` removes; one before the
        // bytes left a description whose bytes were nowhere, which HEAD answered as complete.
        unlink(infoPath(id))
        if descriptor >= 0 { unlink(dataPath(id)) }
        unlink(completingPath(id)) // a completion that died with its process
        unlink(chunkPath(id))
        // A description's new version that a crash left half-saved (`save` writes it aside, then renames it).
        let names = listed ?? (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        for name in names where name.hasPrefix(id + ".json.") && name.hasSuffix(".tmp") {
            unlink(folder.appendingPathComponent(name).path)
        }
        return true
    }

    /// Deletes the uploads that expired by `time`, until `stop` says so; returns their ids. Files without a
    /// description (a crash between the two creations) go once they are as old.
    @discardableResult
    public func sweep(at time: Double, until stop: () -> Bool = { false }) -> [String] {
        // The listing grouped by upload once (an upload has several files: data, description): each upload's names
        // looked for in the whole listing made a sweep of 40,000 bodiless uploads take 9 minutes, and a stop wait
        // for it.
        let byID = Dictionary(grouping: (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []) {
            String($0.prefix { $0 != "." })
        }
        var removed: [String] = []
        for (id, names) in byID {
            guard Self.isValidID(id) else { continue }
            if stop() { break }
            // Not readable (now, or for good: damaged) is judged as files without a description are, by the newest of
            // them: a description unreadable for good (restored under another owner) kept its files for ever.
            let found = try? readUpload(id)
            if let upload = found {
                guard isExpired(upload, at: time) else { continue }
            } else {
                // By its newest file (its bytes, when they are still arriving), not whichever was listed first.
                let newest = names.compactMap { name -> Double? in
                    var status = stat()
                    guard stat(folder.appendingPathComponent(name).path, &status) == 0 else { return nil }
                    return Double(status.st_mtim.tv_sec)
                }.max()
                guard let newest, newest + expiryHours * 3600 <= time else { continue }
            }
            // With the sweep's listing: read again for each, a sweep of E uploads in a folder of N files read E × N
            // names (hours for the day after 100,000 bodiless creations, lease recovery waiting behind it).
            if delete(id, names: names) { removed.append(id) }
        }
        return removed
    }
}
