import Testing
@testable import Outbound

/// The form a URL is fetched or posted to in: as given when ASCII, else with its host in IDNA and every other byte
/// outside ASCII percent-encoded, escapes already there left as they are.
@Suite struct URLFetcherTests {
    @Test func aURLOutsideASCIIIsSentInItsASCIIFormWithItsEscapesKept() {
        let cases: [(String, String?)] = [
            ("http://Example.COM/A%20b?x=1", "http://Example.COM/A%20b?x=1"),
            ("https://éxample.com/x", "https://xn--xample-9ua.com/x"),
            ("http://bücher.example:8080/p", "http://xn--bcher-kva.example:8080/p"),
            // Escapes beside characters outside ASCII stay single: URLComponents made `%2520` of `%20`, and a
            // signed URL's query named something else.
            ("http://127.0.0.1:9/vidéo%20x.mp4", "http://127.0.0.1:9/vid%C3%A9o%20x.mp4"),
            ("https://éxample.com/clip.mp4?sig=a%2Bb%3D&n=é", "https://xn--xample-9ua.com/clip.mp4?sig=a%2Bb%3D&n=%C3%A9"),
            ("http://user:pä@éx.com/a", "http://user:p%C3%A4@xn--x-9fa.com/a"),
            ("http://[::1]:8080/é", "http://[::1]:8080/%C3%A9"),
            // What is refused in ASCII is refused here too (a space was accepted once encoded).
            ("http://é.com/a b", nil),
            ("ftp://é.com/a", nil),
        ]
        for (given, expected) in cases {
            #expect(URLFetcher.fetchable(given) == expected, "\(given)")
        }
    }
}
