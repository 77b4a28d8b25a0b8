import Foundation
import Outbound
import Testing

/// HTTP's dates: written as IMF-fixdate, read in the three forms RFC 9110 §5.6.7 has a recipient accept.
@Suite struct HTTPDateTests {
    /// RFC 9110's example instant, Sunday 6 November 1994, 08:49:37 UTC.
    private let example = 784_111_777.0

    @Test func writesIMFFixdate() {
        #expect(HTTPDate.format(example) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(example + 0.99) == "Sun, 06 Nov 1994 08:49:37 GMT", "whole seconds")
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(4_102_444_799) == "Thu, 31 Dec 2099 23:59:59 GMT")
    }

    @Test func readsTheThreeForms() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == example)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT", now: example) == example)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == example)
        #expect(HTTPDate.parse("Wed Nov 16 08:49:37 1994") == example + 10 * 86_400)
        for time in stride(from: 0.0, to: 4_000_000_000, by: 86_400 * 97 + 3_671) {
            #expect(HTTPDate.parse(HTTPDate.format(time)) == time)
        }
    }

    /// A two-digit year is the one at most 50 years after now: in 2026, 76 is 2076 and 77 is 1977.
    @Test func anRFC850YearIsTheNearestNotFiftyYearsAhead() throws {
        let now = try #require(HTTPDate.parse("Sat, 05 Dec 2026 00:00:00 GMT"))
        #expect(HTTPDate.parse("Wednesday, 01-Jan-76 00:00:00 GMT", now: now) == HTTPDate.parse("Wed, 01 Jan 2076 00:00:00 GMT"))
        #expect(HTTPDate.parse("Thursday, 01-Jan-76 00:00:00 GMT", now: now) == nil, "2076 begins on a Wednesday (1976 on a Thursday)")
        #expect(HTTPDate.parse("Saturday, 01-Jan-77 00:00:00 GMT", now: now) == HTTPDate.parse("Sat, 01 Jan 1977 00:00:00 GMT"))
        #expect(HTTPDate.parse("Saturday, 05-Dec-26 00:00:00 GMT", now: now) == now)
        // By the date, not the year: the last day of 2076 is more than 50 years ahead, so 76 is 1976 there.
        #expect(HTTPDate.parse("Friday, 31-Dec-76 00:00:00 GMT", now: now) == HTTPDate.parse("Fri, 31 Dec 1976 00:00:00 GMT"))
    }

    @Test func refusesWhatIsNotADate() {
        for text in [
            "", "yesterday", "784111777",
            "Mon, 06 Nov 1994 08:49:37 GMT",    // the wrong weekday
            "Wed, 31 Feb 2027 08:49:37 GMT",    // no such day (timegm would make it 3 March)
            "Sun, 6 Nov 1994 08:49:37 GMT",     // the day unpadded
            "Sun, 06 Nov 1994 08:49:37 UTC",    // another zone's name
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Thu, 31 Dec 2099 +1:00:00 GMT",    // a sign
            "Sun, 06 Nov 1994 08:49:60 GMT",    // a leap second, never sent
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",    // names are case-sensitive
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",      // RFC 850 takes the weekday's full name
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",          // asctime pads the day with a space
            "Sun Nov  6 08:49:37 1994 GMT",
            "Mon Nov  6 08:49:37 1994",          // asctime's weekday is checked too
            "Sun, 06 Nov 1994 08:49:37 GMT ",
        ] {
            #expect(HTTPDate.parse(text, now: example) == nil, "\(text)")
        }
    }
}
