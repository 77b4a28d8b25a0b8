import Foundation

/// An incremental HTTP/1.1 request parser (RFC 9112): request line, header section, and a body framed by
/// `Content-Length` or `Transfer-Encoding: chunked`. It is a value with no I/O: feed it bytes, get events.
struct RequestParser {
    struct Limits {
        /// Largest header section (request line included), in bytes; past it: 431.
        var headerBytes = 16 * 1024
        /// Longest request target, in bytes; past it: 414.
        var targetBytes = 8 * 1024
    }

    enum Event {
        /// More bytes are needed.
        case needMore
        case head(RequestHead)
        /// Body bytes: this range of the bytes just given.
        case body(Range<Int>)
        /// The request (body included) is complete.
        case end
    }

    private enum State {
        case head(scanned: Int)
        case fixed(remaining: Int64)
        /// `scanned`: bytes of the line already searched for its end, as in the others: each read searched the whole
        /// line again, and a line sent a byte at a time cost its length squared on the event loop.
        case chunkSize(scanned: Int)
        case chunkData(remaining: Int64)
        case chunkDataEnd
        case trailers(scanned: Int)
        case done
    }

    private var state: State = .head(scanned: 0)
    let limits: Limits
    /// Body length announced by Content-Length; nil for chunked or no body.
    private(set) var contentLength: Int64?
    private(set) var isChunked = false
    private var trailerBytes = 0
    /// Whether the empty line before this request's head was passed over: one is, a second starts the head.
    private var passedEmptyLine = false
    /// Whether the request line has been found within its limit (it is then not searched for again).
    private var requestLineChecked = false
    /// Bytes searched for line ends so far, for the tests: it grows with the bytes received, not their square.
    private(set) var bytesSearched = 0

    init(limits: Limits = Limits()) { self.limits = limits }

    /// Whether a request is under way (its head has started arriving but it has not ended).
    var inProgress: Bool {
        switch state {
        case .head(let scanned): scanned > 0
        case .done: false
        default: true
        }
    }

    var isDone: Bool { if case .done = state { true } else { false } }

    /// Ends a request that has no body (its head read, nothing to follow): a request refused right after its head
    /// leaves the connection ready for the next one, as one that was answered.
    mutating func endBodiless() {
        if case .fixed(remaining: 0) = state { state = .done }
    }

    /// How many body bytes come next with no framing among them (the rest of a `Content-Length` body, or of one
    /// chunk); nil when framing or a head comes next. Lets a caller read those bytes straight to their destination.
    var bodyRun: Int64? {
        switch state {
        case .fixed(let remaining) where remaining > 0: remaining
        case .chunkData(let remaining): remaining
        default: nil
        }
    }

    /// Readies the parser for the next request on the same connection.
    mutating func reset() {
        state = .head(scanned: 0)
        contentLength = nil
        isChunked = false
        trailerBytes = 0
        passedEmptyLine = false
        requestLineChecked = false
    }

    /// Parses from the start of `bytes`; returns the event and how many bytes it consumed.
    mutating func next(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) -> (Event, consumed: Int) {
        switch state {
        case .head(let scanned):
            // An empty line before the request line (a client ending its last body with an extra CRLF) is passed
            // over, as RFC 9112 §2.2 asks. One: a second starts the head (and its timeout), which an empty request
            // line then refuses; every one passed over, an empty line every few seconds held a connection for ever,
            // past the header and idle timeouts (bytes received count as activity).
            if scanned == 0, !passedEmptyLine, bytes.count >= 2, bytes[0] == 13, bytes[1] == 10 {
                passedEmptyLine = true
                return (.needMore, 2)
            }
            // Its CR alone so far (a read that ended between the two): wait for the LF, which the line above
            // passes over; taken as the head's start, the empty line was refused as a request line.
            if scanned == 0, !passedEmptyLine, bytes.count == 1, bytes[0] == 13 { return (.needMore, 0) }
            // One pass over the bytes new since the last call (those before held no line end past the last one
            // looked at). Each LF must follow a CR: a head whose lines end with a bare LF (`printf … | nc`) never ends
            // with CRLF CRLF, and is refused now rather than held until the header timeout. The first ends the request
            // line, checked first so that an overlong target gets 414 rather than 431; one right after a CRLF ends
            // the head.
            var from = scanned
            while let lineFeed = search(Self.lf, in: bytes, from: from) {
                guard lineFeed > 0, bytes[lineFeed - 1] == 13 else {
                    throw HTTPError.malformed("The head's lines must end with CRLF, not a bare LF.")
                }
                if !requestLineChecked {
                    if lineFeed - 1 > limits.targetBytes + 32 { throw Self.uriTooLong(limits) }
                    requestLineChecked = true
                }
                if lineFeed >= 3, bytes[lineFeed - 2] == 10, bytes[lineFeed - 3] == 13 {
                    let end = lineFeed - 3
                    if end + 4 > limits.headerBytes { throw Self.headersTooLarge(limits) }
                    let head = try parseHead(UnsafeRawBufferPointer(rebasing: bytes[0..<end]))
                    return (.head(head), end + 4)
                }
                from = lineFeed + 1
            }
            if !requestLineChecked, bytes.count > limits.targetBytes + 32 { throw Self.uriTooLong(limits) }
            if bytes.count > limits.headerBytes { throw Self.headersTooLarge(limits) }
            state = .head(scanned: bytes.count)
            return (.needMore, 0)
        case .fixed(let remaining):
            if remaining == 0 {
                state = .done
                return (.end, 0)
            }
            guard !bytes.isEmpty else { return (.needMore, 0) }
            let take = Int(min(Int64(bytes.count), remaining))
            state = .fixed(remaining: remaining - Int64(take))
            return (.body(0..<take), take)
        case .chunkSize(let scanned):
            let found = search(crlf, in: bytes, from: max(0, scanned - 1))
            // At most 1024 bytes however the line arrives: found whole in one read (a longer one passed), or not yet
            // whole (its CR may have come without its LF).
            if (found ?? bytes.count - 1) > 1024 { throw HTTPError.malformed("A chunk-size line is longer than 1024 bytes.") }
            guard let lineEnd = found else {
                state = .chunkSize(scanned: bytes.count)
                return (.needMore, 0)
            }
            let line = bytes[0..<lineEnd]
            let sizeEnd = line.firstIndex { $0 == UInt8(ascii: ";") || $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") } ?? lineEnd
            let digits = bytes[0..<sizeEnd]
            guard !digits.isEmpty, digits.count <= 15, digits.allSatisfy(Self.isHex),
                  let size = Int64(String(decoding: digits, as: UTF8.self), radix: 16) else {
                throw HTTPError.malformed("A chunk size is not a hexadecimal number.")
            }
            // Extensions are ignored, but only well-formed ones: a bare LF or other bytes there would end the line
            // for a proxy in front that reads more leniently, and the two would frame the body differently.
            guard Self.isChunkExtensions(bytes[sizeEnd..<lineEnd]) else {
                throw HTTPError.malformed("A chunk-size line has something else than chunk extensions after the size.")
            }
            state = size == 0 ? .trailers(scanned: 0) : .chunkData(remaining: size)
            return (.needMore, lineEnd + 2)
        case .chunkData(let remaining):
            guard !bytes.isEmpty else { return (.needMore, 0) }
            let take = Int(min(Int64(bytes.count), remaining))
            state = remaining - Int64(take) == 0 ? .chunkDataEnd : .chunkData(remaining: remaining - Int64(take))
            return (.body(0..<take), take)
        case .chunkDataEnd:
            guard bytes.count >= 2 else { return (.needMore, 0) }
            guard bytes[0] == 13 && bytes[1] == 10 else { throw HTTPError.malformed("A chunk is not followed by CRLF.") }
            state = .chunkSize(scanned: 0)
            return (.needMore, 2)
        case .trailers(let scanned):
            guard let lineEnd = search(crlf, in: bytes, from: max(0, scanned - 1)) else {
                if trailerBytes + bytes.count > limits.headerBytes { throw Self.headersTooLarge(limits) }
                state = .trailers(scanned: bytes.count)
                return (.needMore, 0)
            }
            state = .trailers(scanned: 0)
            trailerBytes += lineEnd + 2
            if trailerBytes > limits.headerBytes { throw Self.headersTooLarge(limits) }
            if lineEnd == 0 {
                state = .done
                return (.end, 2)
            }
            _ = try Self.fieldLine(bytes[0..<lineEnd]) // checked as a header line is, then dropped
            return (.needMore, lineEnd + 2)
        case .done:
            return (.needMore, 0)
        }
    }

    private static func uriTooLong(_ limits: Limits) -> HTTPError {
        HTTPError(.uriTooLong, "uri_too_long", "The request target is longer than \(limits.targetBytes) bytes.", closeConnection: true)
    }

    private static func headersTooLarge(_ limits: Limits) -> HTTPError {
        HTTPError(.headersTooLarge, "headers_too_large", "The request header section is larger than \(limits.headerBytes) bytes.",
                  closeConnection: true)
    }

    private mutating func parseHead(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) -> RequestHead {
        var lines: [Slice<UnsafeRawBufferPointer>] = []
        var start = 0
        while start <= bytes.count {
            let end = Self.find(crlf, in: bytes, from: start) ?? bytes.count
            lines.append(bytes[start..<end])
            start = end + 2
        }
        guard let requestLine = lines.first else { throw HTTPError.malformed("The request line is missing.") }
        let parts = requestLine.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, parts[0].allSatisfy(Self.isToken) else {
            throw HTTPError.malformed("The request line must be METHOD SP TARGET SP HTTP-VERSION.")
        }
        let method = String(decoding: parts[0], as: UTF8.self)
        guard parts[1].count <= limits.targetBytes else {
            throw Self.uriTooLong(limits)
        }
        guard !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw HTTPError.malformed("The request target has spaces, control characters or non-ASCII bytes.")
        }
        var target = String(decoding: parts[1], as: UTF8.self)
        // The absolute form (`http://host/path`), which a server must take (RFC 9112 §3.2.2): its path is the target.
        for scheme in ["http://", "https://"] where target.lowercased().hasPrefix(scheme) {
            let rest = target.dropFirst(scheme.count)
            target = rest.firstIndex(where: { $0 == "/" || $0 == "?" }).map { index in
                rest[index] == "?" ? "/" + rest[index...] : String(rest[index...])
            } ?? "/"
        }
        guard target.hasPrefix("/") || (target == "*" && method == "OPTIONS") else {
            throw HTTPError.malformed("The request target must be a path starting with /.")
        }
        let version = String(decoding: parts[2], as: UTF8.self)
        let minor: Int
        switch version {
        case "HTTP/1.1": minor = 1
        case "HTTP/1.0": minor = 0
        // A later 1.x is served as 1.1, the highest this server speaks (RFC 9112 §2.3); it was refused.
        case _ where version.count == 8 && version.hasPrefix("HTTP/1.") && version.last!.isASCII && version.last!.isNumber: minor = 1
        default:
            if version.hasPrefix("HTTP/") && version.count == 8 {
                // A client's choice of version is its mistake, answered with a 4xx (RFC 9110 would allow 505).
                throw HTTPError(.badRequest, "http_version_not_supported", "Only HTTP/1.0 and HTTP/1.1 are served.",
                                closeConnection: true)
            }
            throw HTTPError.malformed("The HTTP version \(version.prefix(16)) is not valid.")
        }
        var headers = HTTPHeaders()
        for line in lines.dropFirst() {
            let (name, value) = try Self.fieldLine(line)
            headers.add(name, value)
        }
        if minor == 1 {
            let hosts = headers.values("Host")
            guard hosts.count == 1 else { throw HTTPError.malformed("An HTTP/1.1 request needs exactly one Host header.") }
        }
        try frameBody(headers, minorVersion: minor)
        let (segments, query) = try Self.splitTarget(target)
        return RequestHead(method: method, target: target, segments: segments, query: query, minorVersion: minor, headers: headers)
    }

    /// Decides how the body is delimited (RFC 9112 §6.3).
    private mutating func frameBody(_ headers: HTTPHeaders, minorVersion: Int) throws(HTTPError) {
        let encodings = headers.values("Transfer-Encoding")
        let lengths = headers.values("Content-Length")
        if !encodings.isEmpty {
            // HTTP/1.0 has no transfer codings: such a message's framing is faulty (RFC 9112 §6.1), and a proxy in
            // front may have framed it otherwise (request smuggling).
            guard minorVersion == 1 else {
                throw HTTPError.malformed("An HTTP/1.0 request cannot have Transfer-Encoding.")
            }
            guard lengths.isEmpty else {
                throw HTTPError.malformed("A request cannot have both Content-Length and Transfer-Encoding.")
            }
            let codings = encodings.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard codings == ["chunked"] else {
                throw HTTPError.malformed("Only Transfer-Encoding: chunked is accepted.")
            }
            isChunked = true
            state = .chunkSize(scanned: 0)
            return
        }
        guard lengths.count <= 1 else { throw HTTPError.malformed("The request has more than one Content-Length.") }
        if let text = lengths.first {
            guard !text.isEmpty, text.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let length = Int64(text) else {
                throw HTTPError.malformed("Content-Length must be a number of bytes.")
            }
            contentLength = length
            state = .fixed(remaining: length)
        } else {
            contentLength = 0
            state = .fixed(remaining: 0)
        }
    }

    static func splitTarget(_ target: String) throws(HTTPError) -> ([String], [String: String]) {
        let bytes = Array(target.utf8)
        let mark = bytes.firstIndex(of: UInt8(ascii: "?"))
        var segments: [String] = []
        for raw in bytes[..<(mark ?? bytes.count)].split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst() {
            guard let decoded = percentDecode(raw, plusIsSpace: false) else {
                throw HTTPError(.badRequest, "malformed_request", "The path has an invalid percent-encoding.")
            }
            segments.append(decoded)
        }
        var query: [String: String] = [:]
        for (name, value) in try queryPairs(of: target) where query[name] == nil { query[name] = value }
        return (segments, query)
    }

    /// The query's parameters in order, percent-decoded, repeats included.
    static func queryPairs(of target: String) throws(HTTPError) -> [(name: String, value: String)] {
        let bytes = Array(target.utf8)
        guard let mark = bytes.firstIndex(of: UInt8(ascii: "?")) else { return [] }
        var pairs: [(name: String, value: String)] = []
        for pair in bytes[(mark + 1)...].split(separator: UInt8(ascii: "&")) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecode(parts[0], plusIsSpace: true),
                  let value = percentDecode(parts.count > 1 ? parts[1] : [], plusIsSpace: true) else {
                throw HTTPError(.badRequest, "malformed_request", "The query has an invalid percent-encoding.")
            }
            pairs.append((name, value))
        }
        return pairs
    }

    /// Decodes `%XX` escapes; nil for a bad escape or bytes that are not UTF-8.
    static func percentDecode(_ text: ArraySlice<UInt8>, plusIsSpace: Bool) -> String? {
        if !text.contains(where: { $0 == UInt8(ascii: "%") || (plusIsSpace && $0 == UInt8(ascii: "+")) }) {
            return String(validating: text, as: UTF8.self)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.count)
        var iterator = text.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            } else if plusIsSpace && byte == UInt8(ascii: "+") {
                bytes.append(0x20)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    private static func isHex(_ byte: UInt8) -> Bool { hexValue(byte) != nil }

    /// A header or trailer field line's name and value (RFC 9112 §5): a token, a colon, and a value without
    /// control characters, its surrounding spaces and tabs dropped. No folding (obs-fold).
    private static func fieldLine(_ line: Slice<UnsafeRawBufferPointer>) throws(HTTPError) -> (name: String, value: String) {
        guard let first = line.first else { throw HTTPError.malformed("An empty line inside the header section.") }
        if first == 0x20 || first == 0x09 { throw HTTPError.malformed("Folded header lines (obs-fold) are not accepted.") }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
            throw HTTPError.malformed("A header line has no colon.")
        }
        let name = line[line.startIndex..<colon]
        guard !name.isEmpty, name.allSatisfy(Self.isToken) else {
            throw HTTPError.malformed("A header name has characters a token cannot have.")
        }
        var value = line[(colon + 1)...]
        while let byte = value.first, byte == 0x20 || byte == 0x09 { value = value.dropFirst() }
        while let byte = value.last, byte == 0x20 || byte == 0x09 { value = value.dropLast() }
        guard value.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
            throw HTTPError.malformed("A header value has a control character (NUL, CR, LF or other).")
        }
        return (String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self))
    }

    /// Whether `bytes` (what follows a chunk's size on its line) is chunk extensions, RFC 9112 §7.1.1:
    /// `*( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )`.
    static func isChunkExtensions(_ bytes: Slice<UnsafeRawBufferPointer>) -> Bool {
        var index = bytes.startIndex
        let end = bytes.endIndex
        func spaces() { while index < end, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 } }
        func token() -> Bool {
            let start = index
            while index < end, isToken(bytes[index]) { index += 1 }
            return index > start
        }
        /// A quoted string: qdtext (tab, space, visible ASCII but `"` and `\`, obs-text) and quoted pairs.
        func quoted() -> Bool {
            index += 1
            while index < end {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return true
                }
                if byte == UInt8(ascii: "\\") { index += 1 }
                guard index < end, bytes[index] == 0x09 || (bytes[index] >= 0x20 && bytes[index] != 0x7F) else { return false }
                index += 1
            }
            return false
        }
        while true {
            spaces()
            if index == end { return true }
            guard bytes[index] == UInt8(ascii: ";") else { return false }
            index += 1
            spaces()
            guard token() else { return false }
            spaces()
            if index < end, bytes[index] == UInt8(ascii: "=") {
                index += 1
                spaces()
                guard index < end, bytes[index] == UInt8(ascii: "\"") ? quoted() : token() else { return false }
            }
        }
    }

    /// RFC 9110 tchar.
    static func isToken(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
             UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"): true
        default: false
        }
    }

    private static let crlf: [UInt8] = [13, 10]
    private static let lf: [UInt8] = [10]
    private var crlf: [UInt8] { Self.crlf }

    /// Index of the first occurrence of `pattern` in `bytes` at or after `start`.
    /// `find`, counted in `bytesSearched`.
    private mutating func search(_ pattern: [UInt8], in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        let found = Self.find(pattern, in: bytes, from: start)
        bytesSearched += max(0, (found.map { $0 + pattern.count } ?? bytes.count) - start)
        return found
    }

    static func find(_ pattern: [UInt8], in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard bytes.count >= pattern.count, start <= bytes.count - pattern.count else { return nil }
        var index = start
        let last = bytes.count - pattern.count
        let first = pattern[0]
        while index <= last {
            if bytes[index] == first {
                var matched = true
                for offset in 1..<pattern.count where bytes[index + offset] != pattern[offset] {
                    matched = false
                    break
                }
                if matched { return index }
            }
            index += 1
        }
        return nil
    }
}
