/// Inbound bytes of a connection: appended at the end by reads, consumed from the front by the parser.
struct ByteBuffer {
    private(set) var storage: [UInt8] = []
    private var start = 0

    var count: Int { storage.count - start }
    var isEmpty: Bool { count == 0 }

    /// Reads into free space at the end with `fill`, which returns how many bytes it wrote.
    mutating func append(upTo capacity: Int, _ fill: (UnsafeMutableRawBufferPointer) throws(IOError) -> Int) throws(IOError) -> Int {
        if start > 0 && (start >= storage.count / 2 || storage.count + capacity > storage.capacity) { compact() }
        let oldCount = storage.count
        storage.append(contentsOf: repeatElement(0, count: capacity))
        let result = storage.withUnsafeMutableBytes { bytes -> Result<Int, IOError> in
            do throws(IOError) {
                return .success(try fill(UnsafeMutableRawBufferPointer(rebasing: bytes[oldCount...])))
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let written):
            storage.removeLast(capacity - written)
            return written
        case .failure(let error):
            storage.removeLast(capacity)
            throw error
        }
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
            storage.removeAll(keepingCapacity: storage.capacity <= 256 * 1024)
            start = 0
        }
    }

    private mutating func compact() {
        storage.removeFirst(start)
        start = 0
    }
}
