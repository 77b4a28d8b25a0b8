import Foundation
import Outbound

/// Parses a `multipart/form-data` body as it streams: the part named `file` goes to disk through a `FileSink`,
/// the few other parts the route takes (such as `settings`) are kept in memory, within `Limits` and the server's
/// `BodyMemory`. A part the route does not take is refused as soon as its headers arrive, before its body.
final class MultipartSink: BodySink {
    /// Bounds on the parts held in memory (every part but `file`).
    struct Limits: Sendable {
        /// Parts in one body, `file` included.
        var parts = 16
        /// Bytes of one part.
        var partBytes = 1024 * 1024
        /// Bytes of all parts together.
        var totalBytes = 2 * 1024 * 1024
    }

    private enum State {
        case preamble
        case partHeaders
        case partData
        case afterDelimiter
        case epilogue
    }

    private let delimiter: [UInt8]
    private let makeFileSink: () throws(HTTPError) -> FileSink
    private let fieldNames: [String]
    private let limits: Limits
    private let reservation: BodyMemory.Reservation
    private var state: State = .preamble
    private var pending: [UInt8] = []
    /// Spaces and tabs allowed between a boundary and its CRLF (RFC 2046's transport padding, which nobody sends).
    static let maxPadding = 1024
    private var fileSink: FileSink?
    private var fileFinished: UploadBody?
    private var partCount = 0
    /// The part being read into memory: its name and bytes.
    private var field: (name: String, data: Data)?
    private var fields: [String: Data] = [:]
    /// Bytes of the current part's headers already searched for their end: a search resumes there. Searched from
    /// their start on every write, a 16 KiB head sent a byte at a time (1-byte chunks) cost 134 million comparisons on
    /// the event loop, for a part, per request.
    private var headersSearched = 0
    /// Bytes every search so far looked at (for tests: the parse stays linear in the body).
    private(set) var bytesSearched = 0

    /// `contentType` is the request's header; it must name a boundary. `fields` are the part names the route takes
    /// besides `file`.
    init(contentType: String, fields: [String], limits: Limits, memory: BodyMemory,
         makeFileSink: @escaping () throws(HTTPError) -> FileSink) throws(HTTPError) {
        guard let boundary = HeaderParameter.value("boundary", in: contentType), !boundary.isEmpty, boundary.utf8.count <= 70 else {
            throw HTTPError(.badRequest, "invalid_multipart", "multipart/form-data needs a boundary parameter of 1 to 70 characters.",
                            closeConnection: true)
        }
        // The first delimiter may open the body without a CRLF before it: start as if one had been seen.
        delimiter = Array("\r\n--\(boundary)".utf8)
        pending = [13, 10]
        fieldNames = fields
        self.limits = limits
        reservation = BodyMemory.Reservation(memory)
        self.makeFileSink = makeFileSink
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) {
        pending.append(contentsOf: bytes)
        do {
            try process()
        } catch {
            abort()
            throw error
        }
    }

    private func process() throws(HTTPError) {
        var index = 0
        defer { pending.removeFirst(index) }
        while true {
            switch state {
            case .preamble:
                guard let found = find(delimiter, from: index) else {
                    index = max(index, pending.count - delimiter.count)
                    return
                }
                index = found + delimiter.count
                state = .afterDelimiter
            case .afterDelimiter:
                guard pending.count - index >= 2 else { return }
                if pending[index] == UInt8(ascii: "-") && pending[index + 1] == UInt8(ascii: "-") {
                    state = .epilogue
                    index = pending.count
                    return
                }
                // Transport padding (spaces, tabs) may follow a delimiter before its CRLF; a little of it (kept in
                // `pending` until the CRLF comes, and scanned again with each write).
                var cursor = index
                while cursor < pending.count, pending[cursor] == 0x20 || pending[cursor] == 0x09 { cursor += 1 }
                if cursor - index > Self.maxPadding {
                    throw HTTPError(.badRequest, "invalid_multipart", "A multipart boundary is followed by more than \(Self.maxPadding) bytes of padding.",
                                    closeConnection: true)
                }
                guard pending.count - cursor >= 2 else { return }
                guard pending[cursor] == 13 && pending[cursor + 1] == 10 else {
                    throw HTTPError(.badRequest, "invalid_multipart", "A multipart boundary is not followed by CRLF.", closeConnection: true)
                }
                index = cursor + 2
                state = .partHeaders
            case .partHeaders:
                guard let end = find([13, 10, 13, 10], from: index + max(0, headersSearched - 3)) else {
                    if pending.count - index > 16 * 1024 {
                        throw HTTPError(.badRequest, "invalid_multipart", "A multipart part's headers exceed 16 KiB.", closeConnection: true)
                    }
                    headersSearched = pending.count - index
                    return
                }
                headersSearched = 0
                try startPart(headers: String(decoding: pending[index..<end], as: UTF8.self))
                index = end + 4
                state = .partData
            case .partData:
                if let found = find(delimiter, from: index) {
                    try emit(index..<found)
                    try endPart()
                    index = found + delimiter.count
                    state = .afterDelimiter
                } else {
                    // Keep the tail that could be the start of a delimiter.
                    let safe = max(index, pending.count - delimiter.count + 1)
                    try emit(index..<safe)
                    index = safe
                    return
                }
            case .epilogue:
                index = pending.count
                return
            }
        }
    }

    private func startPart(headers: String) throws(HTTPError) {
        partCount += 1
        guard partCount <= limits.parts else {
            throw HTTPError(.contentTooLarge, "too_many_parts",
                            "A multipart body may have at most \(limits.parts) parts.", closeConnection: true)
        }
        var disposition: String?
        var contentType: String?
        for line in headers.components(separatedBy: "\r\n") {
            let pair = line.split(separator: ":", maxSplits: 1)
            guard pair.count == 2 else { continue }
            let value = pair[1].trimmingCharacters(in: .whitespaces)
            if String(pair[0]).caseInsensitiveEquals("Content-Disposition") { disposition = value }
            if String(pair[0]).caseInsensitiveEquals("Content-Type") { contentType = value }
        }
        guard let disposition, let name = HeaderParameter.value("name", in: disposition) else {
            throw HTTPError(.badRequest, "invalid_multipart", "Every multipart part needs Content-Disposition: form-data; name=\"...\".",
                            closeConnection: true)
        }
        if name == "file" {
            guard fileSink == nil && fileFinished == nil else {
                throw HTTPError(.badRequest, "duplicate_part", "The multipart body has more than one part named file.", closeConnection: true)
            }
            let sink = try makeFileSink()
            sink.filename = HeaderParameter.value("filename", in: disposition)
            sink.contentType = contentType
            fileSink = sink
        } else {
            guard fieldNames.contains(name) else {
                let expected = (["file"] + fieldNames).joined(separator: ", ")
                throw HTTPError(.badRequest, "unknown_part",
                                "\(Self.printable(name)): unknown multipart part; expected \(expected).", closeConnection: true)
            }
            guard fields[name] == nil else {
                throw HTTPError(.badRequest, "duplicate_part", "The multipart body has more than one part named \(name).", closeConnection: true)
            }
            field = (name, Data())
        }
    }

    /// A part name for a message: at most 64 characters, control characters replaced.
    private static func printable(_ name: String) -> String {
        let cleaned = String(name.unicodeScalars.prefix(64).map { $0.value < 0x20 || $0.value == 0x7F ? "?" : Character($0) })
        return "\"\(cleaned)\""
    }

    private func emit(_ range: Range<Int>) throws(HTTPError) {
        guard !range.isEmpty else { return }
        if field != nil {
            try appendField(range)
            return
        }
        try pending.withUnsafeBytes { bytes -> Result<Void, HTTPError> in
            do throws(HTTPError) {
                try fileSink?.write(UnsafeRawBufferPointer(rebasing: bytes[range]))
                return .success(())
            } catch {
                return .failure(error)
            }
        }.get()
    }

    private func appendField(_ range: Range<Int>) throws(HTTPError) {
        guard let (name, data) = field else { return }
        guard data.count + range.count <= limits.partBytes else {
            throw HTTPError(.contentTooLarge, "part_too_large",
                            "The multipart part \(name) may be at most \(limits.partBytes) bytes.", closeConnection: true)
        }
        guard reservation.bytes + range.count <= limits.totalBytes else {
            throw HTTPError(.contentTooLarge, "parts_too_large",
                            "The multipart parts other than file may be at most \(limits.totalBytes) bytes together.",
                            closeConnection: true)
        }
        try reservation.grow(by: range.count)
        field?.data.append(contentsOf: pending[range])
    }

    private func endPart() throws(HTTPError) {
        if let sink = fileSink {
            fileFinished = try sink.finishFile()
            fileSink = nil
        } else if let (name, data) = field {
            fields[name] = data
            field = nil
        }
    }

    private func find(_ pattern: [UInt8], from start: Int) -> Int? {
        bytesSearched += max(0, pending.count - start)
        return pending.withUnsafeBytes { RequestParser.find(pattern, in: $0, from: start) }
    }

    func finish() throws(HTTPError) -> Request.Body {
        guard case .epilogue = state else {
            abort()
            throw HTTPError(.badRequest, "invalid_multipart", "The multipart body ended without its closing boundary.")
        }
        return .multipart(file: fileFinished, fields: fields)
    }

    func whenReady(_ resume: @escaping @Sendable () -> Void) -> Bool {
        fileSink?.whenReady(resume) ?? true
    }

    func abort() {
        fileSink?.abort()
        fileSink = nil
        fileFinished?.discard()
        fileFinished = nil
        fields = [:]
        field = nil
        reservation.releaseAll()
    }
}
