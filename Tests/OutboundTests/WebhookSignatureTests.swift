import Foundation
import Outbound
import Testing
import Webhooks

/// Signatures and the retry schedule, as values.
@Suite struct WebhookSignatureTests {
    /// The Standard Webhooks libraries' published vector (libraries/python/tests/test_webhooks.py, test_sign_function).
    @Test func theSpecificationsTestVectorSignsAsPublished() throws {
        let secret = try #require(WebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
        #expect(secret.key.count == 24)
        let signature = secret.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: Data(#"{"test": 2432232314}"#.utf8))
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(secret.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_331, body: Data(#"{"test": 2432232314}"#.utf8)) != signature)
    }

    @Test func secretsAreWhsecAndTwentyFourToSixtyFourBytes() {
        #expect(WebhookSecret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == nil, "the prefix is required")
        #expect(WebhookSecret("whsec_" + Data(count: 23).base64EncodedString()) == nil)
        #expect(WebhookSecret("whsec_" + Data(count: 65).base64EncodedString()) == nil)
        #expect(WebhookSecret("whsec_not base64!") == nil)
        let fresh = WebhookSecret.generate()
        #expect(fresh.key.count == 32 && WebhookSecret(fresh.text) == fresh && fresh != WebhookSecret.generate())
    }

    @Test func theScheduleGrowsThenEndsAndScales() {
        let schedule = RetrySchedule()
        #expect((1...7).map { schedule.delay(after: $0, jitter: 0) } == [5, 300, 1800, 7200, 18_000, 36_000, 86_400])
        #expect(schedule.delay(after: 8, jitter: 0) == nil && schedule.delay(after: 0) == nil)
        #expect(schedule.delay(after: 1, jitter: 1) == 5.5 && schedule.delay(after: 1, jitter: -1) == 4.5)
        #expect(RetrySchedule(scale: 0.01).delay(after: 2, jitter: 0) == 3)
    }

    @Test func retryAfterIsSecondsOrADateAndCapped() {
        #expect(RetrySchedule.retryAfter("2", now: 0) == 2)
        #expect(RetrySchedule.retryAfter("999999", now: 0) == 86_400)
        #expect(RetrySchedule.retryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now: 784_111_767) == 10)
        #expect(RetrySchedule.retryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now: 784_111_800) == 0)
        // The obsolete forms a recipient must read too (RFC 9110 §5.6.7).
        #expect(RetrySchedule.retryAfter("Sunday, 06-Nov-94 08:49:37 GMT", now: 784_111_767) == 10)
        #expect(RetrySchedule.retryAfter("Sun Nov  6 08:49:37 1994", now: 784_111_767) == 10)
        // The two-digit year is read against the time given: in 1994, 50 is 1950 (a Sunday), in the past.
        #expect(RetrySchedule.retryAfter("Sunday, 01-Jan-50 00:00:00 GMT", now: 784_111_767) == 0)
        #expect(RetrySchedule.retryAfter("soon", now: 0) == nil && RetrySchedule.retryAfter(nil, now: 0) == nil)
        // delay-seconds is digits only (RFC 9110 §10.2.3).
        for value in ["1e3", "0x10", "inf", "5.5", "-1", "+5", "nan"] {
            #expect(RetrySchedule.retryAfter(value, now: 0) == nil, "\(value)")
        }
        #expect(RetrySchedule.retryAfter(String(repeating: "9", count: 400), now: 0) == 86_400)
    }

    /// What logs and the API show of a URL: no credentials, in the user part, the query, a token-like path
    /// segment (Slack's and Discord's webhook URLs hold theirs there) or the fragment.
    @Test func urlsAreShownWithoutTheirSecrets() {
        let shown = [
            "https://user:pw@h.example/in.mp4?X-Amz-Signature=abc&v=2",
            "https://hooks.slack.com/services/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",
            "https://discord.com/api/webhooks/123456789012345678/aBcDeF-gHiJkL_mNoPqRsTuVwXyZ0123456789",
            "https://h.example/cb#access_token=abc123",
            "https://h.example/cb?pass=hunter2&jwt=eyJ&hmac=ff",
        ].map(RedactedURL.text)
        for (text, secret) in zip(shown, ["pw", "Xy9Zk2LmN4pQ7rS1tU3vW5aB", "aBcDeF-gHiJkL_mNoPqRsTuVwXyZ0123456789", "abc123", "hunter2"]) {
            #expect(!text.contains(secret), "\(text)")
        }
        #expect(shown[0] == "https://REDACTED@h.example/in.mp4?X-Amz-Signature=REDACTED&v=2")
        #expect(shown[1] == "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D4E/REDACTED")
        // A secret that happens to hold no digit (one Slack secret in 70) is one too: of a thousand random ones of
        // 24 letters (a fixed sequence), at most one in a hundred is shown (the rule's cost: CamelCase names kept).
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let letters = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        var shownSecrets = 0
        for _ in 0..<1000 {
            let secret = String((0..<24).map { _ -> Character in
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                return letters[Int(state % 52)]
            })
            if RedactedURL.text("https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D4E/\(secret)").contains(secret) { shownSecrets += 1 }
        }
        #expect(shownSecrets <= 10, "\(shownSecrets) of 1000 shown")
        for kept in ["https://cdn.example/videos/2024_summer_holiday_clip01.mp4?v=3", "https://cdn.example/big-buck-bunny-1080p/index",
                     "https://cdn.example/AnnualReportPresentation/clip.mp4",
                     "https://h.example/jobs/0b9e6f1c-4f0e-4a39-9c57-2d7f3c1e8a10/done"] {
            #expect(RedactedURL.text(kept) == kept, "names and lower-case ids are kept")
        }
        // Teams' and Make's secrets are 32 small letters and digits.
        let teams = "https://contoso.webhook.office.com/webhookb2/0b9e6f1c-4f0e-4a39-9c57-2d7f3c1e8a10@72f988bf-86f1-41af-91ab-2d7cd011db47"
            + "/IncomingWebhook/3f9a1c0e7b2d4e6f8a1b3c5d7e9f0a2b/0b9e6f1c-4f0e-4a39-9c57-2d7f3c1e8a10"
        #expect(RedactedURL.text(teams) == teams.replacingOccurrences(of: "3f9a1c0e7b2d4e6f8a1b3c5d7e9f0a2b", with: "REDACTED"))
        #expect(RedactedURL.text("https://hook.eu1.make.com/k2v9x4m7q1w8e5r3t6y0u2i9o4p7a1s3") == "https://hook.eu1.make.com/REDACTED")
        #expect(RedactedURL.text("https://cdn.example/videos/summerholidayfinalversion/clip.mp4")
                == "https://cdn.example/videos/summerholidayfinalversion/clip.mp4", "letters alone are a name")
        #expect(RedactedURL.text("https://f.azurewebsites.net/api/hook?code=s3cr3tKey&countrycode=nl")
                == "https://f.azurewebsites.net/api/hook?code=REDACTED&countrycode=nl")
        // A token after a colon (Telegram's bot URLs, for files and for messages) and a JSON Web Token in the path.
        #expect(RedactedURL.text("https://api.telegram.org/file/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/videos/file_1.mp4")
                == "https://api.telegram.org/file/REDACTED/videos/file_1.mp4")
        #expect(RedactedURL.text("https://api.telegram.org/file/bot123456789%3AAAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/file_1.mp4")
                == "https://api.telegram.org/file/REDACTED/file_1.mp4", "a colon percent-encoded")
        #expect(RedactedURL.text("https://api.telegram.org/bot7654321:AAHdqTcvCHvGWJxfSeofSAsKPALDsawxyzQ/sendMessage")
                == "https://api.telegram.org/REDACTED/sendMessage", "a secret that happens to hold no digit")
        #expect(RedactedURL.text("https://h.example/hooks/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqb2IifQ.c2lnbmF0dXJl/done")
                == "https://h.example/hooks/REDACTED/done")
        #expect(RedactedURL.text("https://cdn.example/2024:summer/clip-01:final.mp4") == "https://cdn.example/2024:summer/clip-01:final.mp4",
                "names with colons are kept")
        // An input's name comes from its URL's last segment, and is shown as it is: never a token.
        #expect(URLFetcher.filename(disposition: nil, url: "https://files.example/dl/Xy7kQ9pL2mN4rT8vW1zA") == nil)
        // A Content-Disposition is read as a header's parameters: any case, quotes that hold `;` and escapes.
        #expect(URLFetcher.filename(disposition: #"attachment; FileName="clip; final \"cut\".mp4""#, url: "https://h.example/x")
                == #"clip; final "cut".mp4"#)
        #expect(URLFetcher.filename(disposition: "attachment; filename=plain.mp4", url: "https://h.example/x") == "plain.mp4")
        #expect(URLFetcher.filename(disposition: nil, url: "https://files.example/dl/Xy7kQ9pL2mN4rT8vW1zA/clip%20one.mp4") == "clip one.mp4")
        // Nor any other segment the redaction hides: a JWT, a bot's token (they were the input's name, shown whole).
        #expect(URLFetcher.filename(disposition: nil, url: "https://h.example/dl/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.SflKxwRJSMeKKF2QT4fw") == nil)
        #expect(URLFetcher.filename(disposition: nil, url: "https://h.example/bot7654321:AAHdqTcvCHvGWJxfSeofSAsKPALDsawxyzQ") == nil)
        // A URL libcurl would read with credentials in it, `scheme:` without `//`, is not fetched.
        for url in ["http:/user:pw@127.0.0.1:9/x", "http:user:pw@127.0.0.1:9/x"] {
            #expect { _ = try CurlTransfer().perform(OutboundRequest(url: url, method: "GET", headers: [], body: nil, maxRedirects: 0, timeout: 5),
                                                     policy: AddressPolicy()) } throws: {
                ($0 as? OutboundError)?.code == "invalid_url" && ($0 as? OutboundError)?.message == "Only http and https URLs can be fetched."
            }
        }
    }
}
