import Foundation
import Testing
@testable import Server

/// The parser as a value: bytes in, events out, no sockets.
@Suite struct RequestParserTests {
    /// Feeds `text` in pieces of `step` bytes; returns the heads, the body and whether the request ended.
    private func parse(_ text: String, step: Int = .max, limits: RequestParser.Limits = .init()) throws(HTTPError)
        -> (heads: [RequestHead], body: String, ended: Bool) {
        var parser = RequestParser(limits: limits)
        let bytes = Array(text.utf8)
        var buffer: [UInt8] = []
        var heads: [RequestHead] = []
        var body: [UInt8] = []
        var ended = false
        var fed = 0
        while !ended {
            if fed < bytes.count {
                let next = min(bytes.count, fed + step)
                buffer += bytes[fed..<next]
                fed = next
            }
            while true {
                let result = try buffer.withUnsafeBytes { pointer -> Result<(RequestParser.Event, Int), HTTPError> in
                    do throws(HTTPError) { return .success(try parser.next(pointer)) } catch { return .failure(error) }
                }.get()
                let (event, consumed) = result
                switch event {
                case .head(let head): heads.append(head)
                case .body(let range): body += buffer[range]
                case .end: ended = true
                case .needMore: break
                }
                buffer.removeFirst(consumed)
                if ended || (consumed == 0 && { if case .needMore = event { return true } else { return false } }()) { break }
            }
            if fed >= bytes.count && !ended { break }
        }
        return (heads, String(decoding: body, as: UTF8.self), ended)
    }

    private func error(_ text: String) -> HTTPError? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: [1, 3, 1000])
    func aRequestWithALengthParsesInAnyPieces(step: Int) throws {
        let result = try parse("POST /v1/jobs?state=running&x=a%20b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", step: step)
        #expect(result.ended && result.body == "hello")
        let head = try #require(result.heads.first)
        #expect(head.method == "POST" && head.segments == ["v1", "jobs"] && head.query == ["state": "running", "x": "a b"])
        #expect(head.keepAlive)
    }

    @Test(arguments: [1, 7, 1000])
    func chunkedBodiesAreReassembled(step: Int) throws {
        let text = "PUT /v1/uploads/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
            "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: yes\r\n\r\n"
        let result = try parse(text, step: step)
        #expect(result.ended && result.body == "hello world")
    }

    /// Chunk extensions are ignored only when well-formed (RFC 9112 §7.1.1), and trailer lines are checked as header
    /// lines: a bare LF in either ended the line for a lenient proxy in front but not here, and the two framed the
    /// body differently (a request smuggled inside a chunk).
    @Test func chunkExtensionsAndTrailersMustBeWellFormed() throws {
        func chunked(_ body: String) -> String { "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body }
        for size in ["5;a=1", "5 ; a = 1", "5;a;b=c", "5;a=\"q \\\" ;x\"", "5\t;a", "5;a=\"\""] {
            let result = try parse(chunked(size + "\r\nhello\r\n0\r\nT: 1\r\n\r\n"))
            #expect(result.ended && result.body == "hello", "\(size.debugDescription)")
        }
        for size in ["5 garbage", "5;", "5;=1", "5;a=", "5;a=\"open", "5;a b", "5;a=1;", "5;a\n", "5;\nxx", "5;a=\u{1}", "5;a=\"\n\"", "5;a=\"x\u{7f}\""] {
            #expect(error(chunked(size + "\r\nhello\r\n0\r\n\r\n"))?.status.code == 400, "\(size.debugDescription)")
        }
        #expect(error(chunked("2;\nxx\r\n45\r\n0\r\n\r\n"))?.status.code == 400, "the smuggling pattern")
        for trailer in ["\nGET /x HTTP/1.1", "No colon", " folded: x", "T: a\u{0}b", "T: a\nb"] {
            #expect(error(chunked("0\r\n" + trailer + "\r\n\r\n"))?.status.code == 400, "\(trailer.debugDescription)")
        }
    }

    /// A chunk-size line is at most 1 KiB however it arrives: found whole in one read, a 60,000-byte one passed,
    /// refused only when it came in pieces.
    @Test(arguments: [1000, 100_000])
    func aChunkSizeLineIsBoundedInAnyPieces(step: Int) throws {
        let text = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        let long = "5;a=" + String(repeating: "b", count: 2000) + "\r\nhello\r\n0\r\n\r\n"
        #expect(throws: HTTPError.self) { _ = try parse(text + long, step: step) }
        let fits = "5;a=" + String(repeating: "b", count: 1000) + "\r\nhello\r\n0\r\n\r\n"
        #expect(try parse(text + fits, step: step).body == "hello")
        // Exactly 1024 bytes, whichever read its CR and LF come in.
        let whole = "5;a=" + String(repeating: "b", count: 1020) + "\r\nhello\r\n0\r\n\r\n"
        #expect(try parse(text + whole, step: step).body == "hello")
        #expect(try parse(text + whole, step: text.utf8.count + 1025).body == "hello", "a read ending between CR and LF")
    }

    @Test func percentEncodedSegmentsStayInside() throws {
        let head = try #require(try parse("GET /v1/jobs/..%2F..%2Fetc%2Fpasswd HTTP/1.1\r\nHost: x\r\n\r\n").heads.first)
        #expect(head.segments == ["v1", "jobs", "../../etc/passwd"])
    }

    @Test(arguments: [
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\n folded: value\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\nName: a\u{0}b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 400),
        ("GET / FOO\r\nHost: x\r\n\r\n", 400),
        ("GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ])
    func malformedRequestsAreRefused(text: String, status: Int) {
        let failure = error(text)
        #expect(failure?.status.code == status, "\(text.debugDescription): \(String(describing: failure?.message))")
    }

    /// The absolute form a proxy would be sent (which a server must take, RFC 9112 §3.2.2) names the same path, and
    /// an empty line before a request (an extra CRLF after the last body) is passed over (§2.2).
    @Test func absoluteFormAndALeadingEmptyLineAreTaken() throws {
        let head = try #require(try parse("\r\nGET http://x:8080/v1/jobs?state=running HTTP/1.1\r\nHost: x\r\n\r\n").heads.first)
        #expect(head.segments == ["v1", "jobs"] && head.query["state"] == "running" && head.target == "/v1/jobs?state=running")
        #expect(try parse("GET HTTPS://x HTTP/1.1\r\nHost: x\r\n\r\n").heads.first?.target == "/")
        #expect(try parse("GET http://x?a=1 HTTP/1.1\r\nHost: x\r\n\r\n").heads.first?.target == "/?a=1")
        // In any pieces: a read that ended between the empty line's CR and LF took the CR for the head's start, and
        // the request was refused as having an empty request line.
        for step in [1, 2, 3] {
            let split = try parse("\r\nGET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n", step: step)
            #expect(split.heads.first?.segments == ["v1", "jobs"], "in pieces of \(step)")
        }
    }

    /// A head whose lines end with a bare LF (`printf … | nc`; all of them, or the header lines only) is refused as
    /// soon as such a line ends: it never ends with CRLF CRLF, and was held until the header timeout (an unasked
    /// 408 seconds later).
    @Test(arguments: [1, 1000])
    func aHeadOfBareLineFeedsIsRefusedAtOnce(step: Int) {
        for text in ["GET /healthz HTTP/1.1\nHost: x\n\n", "GET /healthz HTTP/1.1\r\nHost: x\n\n"] {
            do {
                let result = try parse(text, step: step)
                Issue.record("\(text.debugDescription) not refused: \(result.heads.count) heads")
            } catch {
                #expect(error.status.code == 400 && error.message.contains("bare LF"), "\(text.debugDescription): \(error.message)")
            }
        }
    }

    @Test func limitsGive431And414() {
        let longHeaders = "GET / HTTP/1.1\r\nHost: x\r\n" + String(repeating: "X-Filler: " + String(repeating: "a", count: 100) + "\r\n", count: 200) + "\r\n"
        #expect(error(longHeaders)?.status.code == 431)
        let longTarget = "GET /" + String(repeating: "a", count: 65536) + " HTTP/1.1\r\nHost: x\r\n\r\n"
        #expect(error(longTarget)?.status.code == 414)
    }

    /// A later HTTP/1.x is answered as 1.1 (RFC 9112 §2.3): it was refused with 400.
    @Test func aLaterMinorVersionIsServedAsOnePointOne() throws {
        let head = try #require(try parse("GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n").heads.first)
        #expect(head.minorVersion == 1 && head.keepAlive)
        #expect(throws: HTTPError.self) { _ = try parse("GET / HTTP/1.x\r\nHost: x\r\n\r\n") }
    }

    @Test func http10ClosesUnlessAskedToKeepAlive() throws {
        #expect(try parse("GET / HTTP/1.0\r\n\r\n").heads.first?.keepAlive == false)
        #expect(try parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").heads.first?.keepAlive == true)
        #expect(try parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").heads.first?.keepAlive == false)
    }

    @Test func byteRangesResolveAgainstTheSize() {
        func describe(_ range: ByteRange) -> String {
            switch range {
            case .full: "full"
            case .partial(let start, let end): "\(start)-\(end)"
            case .unsatisfiable: "416"
            }
        }
        #expect(describe(ByteRange.parse("bytes=0-99", size: 1000)) == "0-99")
        #expect(describe(ByteRange.parse("bytes=900-", size: 1000)) == "900-999")
        #expect(describe(ByteRange.parse("bytes=-100", size: 1000)) == "900-999")
        #expect(describe(ByteRange.parse("bytes=500-5000", size: 1000)) == "500-999")
        #expect(describe(ByteRange.parse("bytes=1000-", size: 1000)) == "416")
        #expect(describe(ByteRange.parse("bytes=0-1,5-6", size: 1000)) == "full")
        #expect(describe(ByteRange.parse(nil, size: 1000)) == "full")
        // Bad syntax on either side of the dash is ignored alike; a zero suffix overlaps nothing; a suffix of an
        // empty file is the (empty) file, since no Content-Range can name a part of nothing.
        #expect(describe(ByteRange.parse("bytes=abc-", size: 1000)) == "full")
        #expect(describe(ByteRange.parse("bytes=-abc", size: 1000)) == "full")
        #expect(describe(ByteRange.parse("bytes=-0", size: 1000)) == "416")
        #expect(describe(ByteRange.parse("bytes=-5", size: 0)) == "full")
        #expect(describe(ByteRange.parse("bytes=0-", size: 0)) == "416")
    }

    /// A request line, a chunk-size line and a trailer sent a byte at a time are searched once over, not once per
    /// byte: each read searched its whole line again, and a 16 KiB trailer cost about 134 million comparisons on the
    /// event loop.
    @Test func linesSentAByteAtATimeAreSearchedOnce() throws {
        let text = "POST /v1/x?" + String(repeating: "q", count: 4000) + " HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "3;ext=" + String(repeating: "e", count: 900) + "\r\nabc\r\n0\r\nX-Pad: " + String(repeating: "a", count: 6000) + "\r\n\r\n"
        var parser = RequestParser()
        var buffer: [UInt8] = []
        var events: [String] = []
        for byte in Array(text.utf8) {
            buffer.append(byte)
            while true {
                let (event, consumed) = try buffer.withUnsafeBytes { pointer -> Result<(RequestParser.Event, Int), HTTPError> in
                    do throws(HTTPError) { return .success(try parser.next(pointer)) } catch { return .failure(error) }
                }.get()
                buffer.removeFirst(consumed)
                switch event {
                case .head: events.append("head")
                case .body: events.append("body")
                case .end: events.append("end")
                case .needMore: break
                }
                if consumed == 0 { break }
            }
        }
        #expect(events.first == "head" && events.last == "end" && events.contains("body"), "\(events)")
        #expect(parser.bytesSearched < 4 * text.utf8.count, "\(parser.bytesSearched) bytes searched for \(text.utf8.count)")
    }

    @Test func tokensCompareInConstantTime() {
        #expect(BearerToken.constantTimeEquals(Array("secret".utf8), Array("secret".utf8)))
        #expect(!BearerToken.constantTimeEquals(Array("secret".utf8), Array("secreT".utf8)))
        #expect(!BearerToken.constantTimeEquals(Array("secret".utf8), Array("secret2".utf8)))
    }
}
