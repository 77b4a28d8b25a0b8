import Foundation
import Testing
import TestSupport
import Outbound
@testable import Server

/// The multipart parser's bounds, fed bytes directly (no socket): the part count, each part's size and all parts'
/// size together, each checked as the bytes arrive.
@Suite struct MultipartSinkTests {
    private static let boundary = "b0undary"

    private func sink(fields: [String], memory: BodyMemory = BodyMemory(limit: 64 << 20)) throws -> MultipartSink {
        try MultipartSink(contentType: "multipart/form-data; boundary=\(Self.boundary)", fields: fields, limits: .init(),
                          memory: memory) { () throws(HTTPError) -> FileSink in
            throw HTTPError(.internalServerError, "no_files", "This test sends no file.")
        }
    }

    private func part(_ name: String, _ size: Int) -> Data {
        Data("--\(Self.boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n".utf8)
            + Data(repeating: 0x61, count: size) + Data("\r\n".utf8)
    }

    private func write(_ data: Data, to sink: MultipartSink) throws(HTTPError) {
        try data.withUnsafeBytes { bytes -> Result<Void, HTTPError> in
            do throws(HTTPError) {
                try sink.write(bytes)
                return .success(())
            } catch {
                return .failure(error)
            }
        }.get()
    }

    /// A part's headers sent a byte at a time (a chunked body in 1-byte chunks) are searched once, not again from
    /// their start with every byte: 16 000 bytes of them cost 128 million comparisons on the event loop.
    @Test func headersArrivingAByteAtATimeAreSearchedOnce() throws {
        let sink = try sink(fields: ["settings"])
        let head = Data("--\(Self.boundary)\r\nContent-Disposition: form-data; name=\"settings\"\r\nX-Pad: ".utf8)
            + Data(repeating: 0x61, count: 16_000) + Data("\r\n\r\n{}\r\n--\(Self.boundary)--\r\n".utf8)
        for byte in head { try write(Data([byte]), to: sink) }
        guard case .multipart(_, let fields) = try sink.finish() else {
            Issue.record("not a multipart body")
            return
        }
        #expect(fields["settings"] == Data("{}".utf8))
        #expect(sink.bytesSearched < 10 * head.count, "\(sink.bytesSearched) bytes searched for a body of \(head.count)")
    }

    /// A quoted parameter may hold `;` and backslash escapes (curl -F 'file=@in.mov;filename="a;b.mov"'): before,
    /// the value was cut at the `;` and the download was named after `"a`.
    @Test func quotedParametersKeepTheirSemicolonsAndEscapes() {
        let disposition = #"form-data; name="file"; filename="a;b \"c\".mov""#
        #expect(HeaderParameter.value("name", in: disposition) == "file")
        #expect(HeaderParameter.value("filename", in: disposition) == #"a;b "c".mov"#)
        #expect(HeaderParameter.value("boundary", in: "multipart/form-data; boundary=abc;charset=x") == "abc")
        #expect(HeaderParameter.value("boundary", in: #"multipart/form-data; charset="x;y"; boundary="q r""#) == "q r")
        #expect(HeaderParameter.value("filename", in: "form-data; name=file") == nil)
    }

    @Test func theSeventeenthPartIsRefusedAsSoonAsItsHeadersArrive() throws {
        // A route taking 10,000 names: the count, not the names, stops it.
        let names = (0..<10_000).map { "p\($0)" }
        let sink = try sink(fields: names)
        var refusedAt: Int?
        for (index, name) in names.enumerated() {
            do {
                try write(part(name, 1), to: sink)
            } catch {
                #expect(error.code == "too_many_parts" && error.status.code == 413)
                refusedAt = index + 1
                break
            }
        }
        #expect(refusedAt == 17)
    }

    @Test func eachPartAndAllPartsTogetherAreBounded() throws {
        // The closing delimiter after each body lets the parser see the part's end.
        let closing = Data("--\(Self.boundary)--\r\n".utf8)
        let big = try sink(fields: ["a"])
        let tooBig = try #require(throws: HTTPError.self) { try write(part("a", 1024 * 1024 + 1) + closing, to: big) }
        #expect(tooBig.code == "part_too_large")
        let fits = try sink(fields: ["a"])
        try write(part("a", 1024 * 1024) + closing, to: fits)
        let many = try sink(fields: ["a", "b", "c"])
        try write(part("a", 1024 * 1024) + part("b", 1024 * 1024), to: many)
        let error = try #require(throws: HTTPError.self) { try write(part("c", 1) + closing, to: many) }
        #expect(error.code == "parts_too_large")
    }

    /// Transport padding after a boundary is allowed, a little of it: endless spaces grew the parser's buffer, and
    /// its scans, without bound (nothing else counts them).
    @Test func paddingAfterABoundaryIsBounded() throws {
        func body(padding: Int) -> Data {
            Data("--\(Self.boundary)".utf8) + Data(repeating: 0x20, count: padding)
                + Data("\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--\(Self.boundary)--\r\n".utf8)
        }
        let padded = try sink(fields: ["a"])
        // In pieces, as it may arrive: the padding is kept until its CRLF comes.
        let most = body(padding: MultipartSink.maxPadding)
        try write(most.prefix(600), to: padded)
        try write(most.dropFirst(600), to: padded)
        guard case .multipart(_, let fields) = try padded.finish() else { Issue.record("not a multipart body"); return }
        #expect(fields["a"] == Data("x".utf8))
        let endless = try sink(fields: ["a"])
        let error = try #require(throws: HTTPError.self) { try write(body(padding: MultipartSink.maxPadding + 1), to: endless) }
        #expect(error.code == "invalid_multipart" && error.status.code == 400)
    }

    @Test func anUnknownPartIsRefusedBeforeItsBody() throws {
        let sink = try sink(fields: ["settings"])
        let headers = Data("--\(Self.boundary)\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\n".utf8)
        let error = try #require(throws: HTTPError.self) { try write(headers, to: sink) }
        #expect(error.code == "unknown_part" && error.message.contains("\"other\""))
    }

    @Test func partsCountAgainstTheServersBodyMemory() throws {
        let memory = BodyMemory(limit: 1000)
        let sink = try sink(fields: ["settings"], memory: memory)
        // 600 bytes of a part that has not ended yet: held, and counted.
        let head = Data("--\(Self.boundary)\r\nContent-Disposition: form-data; name=\"settings\"\r\n\r\n".utf8)
        try write(head + Data(repeating: 0x61, count: 600), to: sink)
        #expect((500..<700).contains(memory.inUse), "the held bytes are reserved: \(memory.inUse)")
        let other = try self.sink(fields: ["settings"], memory: memory)
        let error = try #require(throws: HTTPError.self) { try write(part("settings", 500), to: other) }
        #expect(error.code == "server_busy" && error.status.code == 503)
        other.abort()
        sink.abort()
        #expect(memory.inUse == 0, "an aborted body gives its memory back")
        let after = try self.sink(fields: ["settings"], memory: memory)
        try write(part("settings", 900), to: after)
    }
}
