import Foundation
import Testing
import TestSupport

/// No request makes the server hold its body in memory: multipart parts other than `file` are few and small, an
/// unknown part is refused at its headers, and the rest of a refused body is never kept. Each request here is sent
/// to a fresh server whose resident memory is compared before and after.
@Suite struct RequestMemoryTests {
    private static let boundary = "transcoderd-test-boundary"

    /// One multipart part named `name` holding `size` bytes.
    private static func part(_ name: String, size: Int) -> Data {
        Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n".utf8)
            + Data(repeating: UInt8(ascii: "x"), count: size) + Data("\r\n".utf8)
    }

    /// A multipart `POST /v1/jobs` with a part per name, framed by Content-Length or chunked (a chunk per part).
    private static func post(_ names: [String], size: Int, chunked: Bool) -> (head: String, body: AnySequence<Data>) {
        let closing = Data("--\(boundary)--\r\n".utf8)
        let total = names.count * part("", size: size).count + names.reduce(0) { $0 + $1.utf8.count } + closing.count
        let framing = chunked ? "Transfer-Encoding: chunked" : "Content-Length: \(total)"
        let head = "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + "Content-Type: multipart/form-data; boundary=\(boundary)\r\n\(framing)\r\n\r\n"
        let parts = names.lazy.map { part($0, size: size) } + [closing]
        let body = parts.lazy.map { piece in
            chunked ? Data((String(piece.count, radix: 16) + "\r\n").utf8) + piece + Data("\r\n".utf8) : piece
        }
        return (head, AnySequence(chunked ? Array(body) + [Data("0\r\n\r\n".utf8)] : Array(body)))
    }

    private func expectRefusedInFlatMemory(chunked: Bool) throws {
        let server = try TestServer()
        let before = server.residentMemory
        let client = try RawClient(port: server.port)
        // 400 parts of 1 MiB with distinct names and no file: 400 MiB that used to be kept until the end.
        let (head, body) = Self.post((0..<400).map { "field\($0)" }, size: 1024 * 1024, chunked: chunked)
        let (answer, _) = client.exchange(head: head, body: body)
        #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer.prefix(300))")
        #expect(answer.contains(#""code":"unknown_part""#) && answer.contains("field0"), "\(answer.prefix(300))")
        let growth = server.peakMemory - before
        #expect(growth < 16 * 1024 * 1024, "resident memory grew by \(growth / 1_048_576) MiB")
        #expect(try server.json("/healthz").status == 200, "the server still serves")
    }

    @Test func fourHundredPartsOfAMegabyteAreRefusedAtTheFirstInFlatMemory() throws {
        try expectRefusedInFlatMemory(chunked: false)
    }

    @Test func theSameAsAChunkedBodyIsRefusedInFlatMemory() throws {
        try expectRefusedInFlatMemory(chunked: true)
    }

    @Test func aPartOverItsLimitIsRefusedWithoutReadingTheRestIntoMemory() throws {
        let server = try TestServer()
        let before = server.residentMemory
        let client = try RawClient(port: server.port)
        // settings may be 1 MiB: 64 MiB of it are refused once the first MiB is past.
        let (head, body) = Self.post(["settings"], size: 64 * 1024 * 1024, chunked: true)
        let (answer, _) = client.exchange(head: head, body: body)
        #expect(answer.hasPrefix("HTTP/1.1 413") && answer.contains(#""code":"part_too_large""#), "\(answer.prefix(300))")
        #expect(server.peakMemory - before < 16 * 1024 * 1024)
    }

    @Test func tenThousandTinyPartsAreRefusedEarly() throws {
        let server = try TestServer()
        let client = try RawClient(port: server.port)
        let (head, body) = Self.post((0..<10_000).map { "p\($0)" }, size: 1, chunked: false)
        let (answer, _) = client.exchange(head: head, body: body)
        #expect(answer.hasPrefix("HTTP/1.1 400") && answer.contains(#""code":"unknown_part""#), "\(answer.prefix(300))")
        #expect(answer.contains(#"\"p0\""#) || answer.contains("p0"), "refused at its first part: \(answer.prefix(300))")
        // Known names cannot repeat either: a second settings part is refused as soon as its headers arrive.
        let again = try RawClient(port: server.port)
        let (head2, body2) = Self.post(Array(repeating: "settings", count: 10_000), size: 1, chunked: false)
        let (answer2, _) = again.exchange(head: head2, body: body2)
        #expect(answer2.hasPrefix("HTTP/1.1 400") && answer2.contains(#""code":"duplicate_part""#), "\(answer2.prefix(300))")
    }

    @Test func anUploadTakesNoPartButFile() throws {
        let server = try TestServer()
        let (status, body) = try server.curl("/v1/uploads", ["-F", "file=@" + (try Media.path(.audioOnly)), "-F", "note=hello"])
        #expect(status == 400 && body.contains(#""code":"unknown_part""#), "\(body)")
        #expect(Media.files(in: server.data.appendingPathComponent("uploads")).isEmpty || eventually(5) {
            Media.files(in: server.data.appendingPathComponent("uploads")).isEmpty
        })
    }
}
