/// Inbound bytes of a connection: appended at the end after reads, consumed from the front by the parser.
struct ByteBuffer {
    private(set) var storage: [UInt8] = []
    private var start = 0

    var count: Int { storage.count - start }
    var isEmpty: Bool { count == 0 }

    /// Appends bytes that were read from the socket.
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if start > 0 && start >= storage.count / 2 { compact() }
        storage.append(contentsOf: bytes)
    }

    /// Calls `body` with the unconsumed bytes.
    func withBytes<T>(_ body: (UnsafeRawBufferPointer) throws(HTTPError) -> T) throws(HTTPError) -> T {
        try storage.withUnsafeBytes { bytes -> Result<T, HTTPError> in
            do throws(HTTPError) {
                return .success(try body(UnsafeRawBufferPointer(rebasing: bytes[start...])))
            } catch {
                return .failure(error)
            }
        }.get()
    }

    mutating func consume(_ count: Int) {
        start += count
        if start == storage.count {
            // Empty, it keeps a little room: an idle connection kept alive held whatever its largest read had taken.
            storage.removeAll(keepingCapacity: storage.capacity <= 16 * 1024)
            start = 0
        }
    }

    private mutating func compact() {
        storage.removeFirst(start)
        start = 0
    }
}
