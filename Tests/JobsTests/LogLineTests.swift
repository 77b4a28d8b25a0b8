import Logging
import Testing

/// The text log keeps one record to a line whatever its fields hold.
@Suite struct LogLineTests {
    /// A field with line breaks (libpq's messages have them), quotes or control characters is quoted and escaped
    /// as in JSON: it went out as it was, one record over three lines.
    @Test func aTextRecordIsOneLineWhateverItsFieldsHold() throws {
        let logger = Logger(format: .text, minimumLevel: .info) { _ in }
        let line = try #require(logger.line(.warning, "store failed", [
            "error": "connection to server failed\nFATAL:  too many connections\n", "plain": "word", "quote": "say \"hi\"",
            "empty": "", "count": 3,
        ]))
        #expect(line.hasSuffix("\n") && line.dropLast().allSatisfy { $0 != "\n" && $0 != "\r" }, "\(line)")
        #expect(line.contains(#"error="connection to server failed\nFATAL:  too many connections\n""#), "\(line)")
        #expect(line.contains(" plain=word ") && line.contains(#" quote="say \"hi\"""#) && line.contains(#" empty="""#)
                && line.hasSuffix(" count=3\n"), "\(line)")
    }
}
