import Foundation

/// HTTP's dates (RFC 9110 §5.6.7), in whole seconds since 1970: written as IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), read in all three forms a recipient must accept: IMF-fixdate, the obsolete
/// RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) and C's asctime form (`Sun Nov  6 08:49:37 1994`). Here for the
/// server (`Date`, `Last-Modified`, `If-Modified-Since`, tus's `Upload-Expires`) and the webhook sender
/// (`Retry-After`) alike.
public enum HTTPDate {
    private static let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longWeekdays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Seconds a `Retry-After` value asks for (a number of seconds, or an HTTP date after `now`), at most 24 h.
    public static func retryAfter(_ value: String?, now: Double) -> Double? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        // delay-seconds is digits only (RFC 9110 §10.2.3): not `1e3`, `0x10`, `inf` or `5.5`.
        if value.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }), let seconds = Double(value) {
            return min(seconds, 86_400)
        }
        guard let date = parse(value, now: now) else { return nil }
        return min(max(0, date - now), 86_400)
    }

    /// `time` (seconds since 1970, the fraction dropped) as an IMF-fixdate.
    public static func format(_ time: Double) -> String {
        var seconds = time_t(time.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(weekdays[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// The date `text` states, in seconds since 1970; nil for anything else than one of the three forms, a wrong
    /// weekday or an impossible day (31 February) included. An RFC 850 date's two-digit year is taken in `now`'s
    /// century, or the one before when that puts the date more than 50 years after `now` (RFC 9110's rule).
    public static func parse(_ text: String, now: Double = Date().timeIntervalSince1970) -> Double? {
        let words = text.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let weekday: Int?, day: Int?, month: Int?, year: Int?, clock: String
        var twoDigitYear = false
        if words.count == 6, words[0].hasSuffix(","), words[5] == "GMT" {
            // IMF-fixdate
            weekday = weekdays.firstIndex(of: String(words[0].dropLast()))
            (day, month, year, clock) = (number(words[1], 2...2), months.firstIndex(of: words[2]), number(words[3], 4...4), words[4])
        } else if words.count == 4, words[0].hasSuffix(","), words[3] == "GMT" {
            // RFC 850, whose two-digit year is taken in this century for now, the last one below if that is more
            // than 50 years ahead (below, once the date is known).
            let date = words[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
            guard date.count == 3, let short = number(date[2], 2...2) else { return nil }
            weekday = longWeekdays.firstIndex(of: String(words[0].dropLast()))
            twoDigitYear = true
            (day, month, year, clock) = (number(date[0], 2...2), months.firstIndex(of: date[1]), calendarYear(of: now) / 100 * 100 + short, words[2])
        } else if words.count == 5 || words.count == 6 {
            // asctime: the day is padded with a space to two characters.
            let padded = words.count == 6 && words[2].isEmpty
            let fields = padded ? [words[0], words[1], words[3], words[4], words[5]] : words
            guard words.count == 5 || padded, fields[2].count == (padded ? 1 : 2) else { return nil }
            weekday = weekdays.firstIndex(of: fields[0])
            (day, month, year, clock) = (number(fields[2], 1...2), months.firstIndex(of: fields[1]), number(fields[4], 4...4), fields[3])
        } else {
            return nil
        }
        let hms = clock.split(separator: ":", omittingEmptySubsequences: false).map { number(String($0), 2...2) }
        guard let weekday, let day, var year, let month, year >= 1900, hms.count == 3,
              let hour = hms[0], let minute = hms[1], let second = hms[2],
              (1...31).contains(day), hour < 24, minute < 60, second < 60 else { return nil }
        func seconds(inYear year: Int) -> time_t {
            var parts = tm()
            parts.tm_year = Int32(year - 1900)
            parts.tm_mon = Int32(month)
            parts.tm_mday = Int32(day)
            parts.tm_hour = Int32(hour)
            parts.tm_min = Int32(minute)
            parts.tm_sec = Int32(second)
            return timegm(&parts)
        }
        var time = seconds(inYear: year)
        // RFC 9110: a two-digit year that would put the date more than 50 years ahead is the century before's.
        if twoDigitYear, Double(time) > now + 50 * 365.2425 * 86_400 {
            year -= 100
            time = seconds(inYear: year)
        }
        // timegm moves 31 February on to March, and sets the weekday: read back, both must be what was written.
        var back = tm()
        gmtime_r(&time, &back)
        guard back.tm_mday == Int32(day), back.tm_mon == Int32(month), back.tm_wday == Int32(weekday) else { return nil }
        return Double(time)
    }

    /// `text` as a number if it is only ASCII digits, as many as `length` allows.
    private static func number(_ text: String, _ length: ClosedRange<Int>) -> Int? {
        guard length.contains(text.utf8.count), text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int(text)
    }

    /// The year (UTC) `time` falls in.
    private static func calendarYear(of time: Double) -> Int {
        var seconds = time_t(time)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return Int(parts.tm_year) + 1900
    }
}
