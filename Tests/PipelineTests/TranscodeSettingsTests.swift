import Foundation
import Testing
@testable import Pipeline

@Suite struct TranscodeSettingsTests {
    private func parse(_ json: String) throws(SettingsError) -> TranscodeSettings {
        try TranscodeSettings.parse(Data(json.utf8))
    }

    private func error(_ json: String) -> String? {
        do {
            _ = try parse(json)
            return nil
        } catch {
            return error.description
        }
    }

    /// The largest pictures a level holds pass; 8192×8192 fits none (it failed the job as out of memory), but
    /// stored settings asking it still read (a job that ran with more memory is not made unreadable).
    @Test func theLargestPicturesALevelHoldsPass() throws {
        for json in [#"{"video": {"width": 8192, "height": 4352}}"#, #"{"video": {"width": 7680, "height": 4320}}"#,
                     #"{"preset": "1080p", "video": {"width": 8192}}"#] {
            #expect(throws: Never.self, "\(json)") { try TranscodeSettings.parse(Data(json.utf8)).checkAtIntake() }
        }
        #expect(throws: Never.self) { _ = try TranscodeSettings.parse(Data(#"{"video": {"width": 8192, "height": 8192}}"#.utf8)) }
    }

    @Test func emptyObjectMeansDefaults() throws {
        let settings = try parse("{}")
        #expect(settings == TranscodeSettings())
        #expect(settings.container == .mp4)
        #expect(settings.audio.settings?.resolved == AudioEncoding(bitRate: 128_000, sampleRate: 44_100, channels: 2))
    }

    @Test func fullDocumentFromTheIssueIsAccepted() throws {
        let settings = try parse("""
            {"container": "mp4",
             "video": {"codec": "h264", "width": 1280, "height": 720, "scalingMode": "fit", "averageBitRate": 2000000,
                       "maxKeyFrameInterval": 60, "profile": "high", "level": "4.1", "frameRate": 30, "preset": "veryfast"},
             "audio": {"codec": "aac", "bitRate": 128000, "sampleRate": 44100, "channels": 2}}
            """)
        let video = try #require(settings.video.settings)
        #expect(video.width == 1280 && video.height == 720 && video.scalingMode == .fit)
        #expect(video.averageBitRate == 2_000_000 && video.maxKeyFrameInterval == 60 && video.level == "4.1")
        #expect(settings.audio.settings?.sampleRate == 44_100)
    }

    /// Settings are stored as JSON and read again when the job runs: every accepted document must read back as the
    /// same settings. An audio-only container with its video left to the default was stored with `"video": {}`,
    /// which reading refuses (it holds audio only): the job always failed with "stored settings can no longer be read".
    @Test(arguments: [#"{"container": "m4a"}"#, #"{"container": "aac"}"#, #"{"container": "h264"}"#,
                      #"{"preset": "720p", "container": "aac"}"#, #"{"container": "m4a", "video": null}"#,
                      #"{"container": "h264", "audio": null, "video": {"width": 640}}"#, "{}", #""1080p""#,
                      #"{"container": "hls", "renditions": [{"video": {"height": 360}}], "thumbnails": {"count": 3}}"#])
    func storedSettingsReadBackAsTheSame(json: String) throws {
        let settings = try parse(json)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys] // as the stores write them
        let stored = try encoder.encode(settings)
        let read = try TranscodeSettings.parse(stored)
        #expect(read.container == settings.container && read.filters == settings.filters && read.renditions == settings.renditions
                && read.thumbnails == settings.thumbnails, "\(String(decoding: stored, as: UTF8.self))")
        // The tracks the container holds read back as they were; one it cannot hold is dropped (left to its default,
        // it was kept, and refused when the input had one: `{"container": "m4a"}` of a video failed).
        #expect(read.video == settings.video && read.audio == settings.audio)
        if !settings.container.holdsVideo { #expect(settings.video == .drop) }
        if !settings.container.holdsAudio { #expect(settings.audio == .drop) }
        #expect(try encoder.encode(read) == stored, "a second round gives the same text")
    }

    /// What the job would ignore, or could never do whatever its input, is refused as it comes in, naming the key:
    /// it was accepted (201) and ignored, or failed when the job ran.
    @Test func settingsAJobWouldIgnoreOrNeverMeetAreRefusedAtIntake() throws {
        for (json, key) in [
            (#"{"video": null, "filters": {"video": {"grayscale": true}}}"#, "filters.video"),
            (#"{"video": null, "filters": {"video": {"watermark": {"upload": "x"}}}}"#, "filters.video"),
            (#"{"audio": null, "filters": {"audio": {"volume": 2}}}"#, "filters.audio"),
            (#"{"video": "copy", "thumbnails": {"count": 3}}"#, "thumbnails"),
            (#"{"video": null, "thumbnails": {"count": 3}}"#, "thumbnails"),
            (#"{"container": "m4a", "thumbnails": {"count": 3}}"#, "thumbnails"),
            (#"{"container": "h264", "video": "copy", "audio": null}"#, "video"),
            (#"{"container": "hls", "renditions": [{"video": {"maxKeyFrameInterval": 60}}, {"video": {"maxKeyFrameInterval": 30}}]}"#,
             "renditions[1].video.maxKeyFrameInterval"),
            (#"{"container": "hls", "renditions": [{"video": {"maxKeyFrameInterval": 60, "frameRate": 30}}, {"video": {"maxKeyFrameInterval": 60, "frameRate": 25}}]}"#,
             "renditions[1].video.maxKeyFrameInterval"),
            // Sizes no H.264 level holds (they failed as out of memory).
            (#"{"video": {"width": 8192, "height": 8192}}"#, "video"),
            (#"{"preset": "1080p", "video": {"width": 8192, "height": 4416}}"#, "video"),
            (#"{"container": "hls", "renditions": [{"video": {"height": 720}}, {"video": {"width": 8192, "height": 8192}}]}"#, "renditions[1].video"),
        ] {
            let settings = try parse(json)
            #expect(throws: SettingsError.self, "\(json)") { try settings.checkAtIntake() }
            do {
                try settings.checkAtIntake()
            } catch {
                #expect(error.key == key, "\(json): \(error)")
            }
        }
        // Meant and met: a tempo beside a dropped track, key frames at the same instants at different rates, one
        // rung's interval left to the source.
        for json in [#"{"audio": null, "filters": {"audio": {"tempo": 2}}}"#, #"{"video": null, "filters": {"audio": {"volume": 2}}}"#,
                     #"{"container": "hls", "renditions": [{"video": {"maxKeyFrameInterval": 60, "frameRate": 30}}, {"video": {"maxKeyFrameInterval": 50, "frameRate": 25}}]}"#,
                     #"{"container": "hls", "renditions": [{"video": {"maxKeyFrameInterval": 60}}, {"video": {"height": 360}}]}"#,
                     #"{"thumbnails": {"count": 3}}"#] {
            #expect(throws: Never.self, "\(json)") { try parse(json).checkAtIntake() }
        }
    }

    /// A key given twice is refused, named: Foundation kept the first (`{"width": 1280, "width": 641}` ran at 1280,
    /// the odd 641 never checked), where JavaScript and Python keep the last.
    @Test func aKeyGivenTwiceIsRefusedNamed() throws {
        for (json, key) in [(#"{"video": {"width": 1280, "width": 641}}"#, "video.width"),
                            (#"{"container": "mp4", "container": "bogus"}"#, "container"),
                            (#"{"container": "hls", "renditions": [{"video": {}}, {"video": {"height": 360, "height": 720}}]}"#,
                             "renditions[1].video.height")] {
            #expect(error(json) == "\(key): \(JSONValue.givenTwice)", "\(json)")
        }
        // Keys alike in different objects, and braces, commas, quotes and colons inside strings, are no repeats.
        for json in [#"[{"a": 1}, {"a": 2}]"#, #"{"a": {"x": 1}, "b": {"x": 2}, "x": [{"x": 1}]}"#,
                     #"{"a": "{\"a\": 1, \"a\": 2}", "b": "\\", "c": ",{:["}"#, #"{"a\"b": 1, "a": 2}"#] {
            #expect(JSONValue.duplicateKey(in: Data(json.utf8)) == nil, "\(json)")
        }
        #expect(JSONValue.duplicateKey(in: Data(#"{"x": [1, {"y": {"z": 1, "z": 2}}]}"#.utf8)) == "x[1].y.z")
        // Compared as read, escapes decoded: "\u0077idth" is "width" (the decoder kept the first, 64, where Python
        // in front of it read the last, 4000); an escaped quote stays a key of its own.
        #expect(error(#"{"video": {"width": 64, "\u0077idth": 4000}}"#) == "video.width: \(JSONValue.givenTwice)")
        #expect(JSONValue.duplicateKey(in: Data(#"{"webhook": {"url": "a", "\u0075rl": "b"}}"#.utf8)) == "webhook.url")
        #expect(JSONValue.duplicateKey(in: Data(#"{"a\"": 1, "a": 2, "\\": 3, "\/": 4, "/": 5}"#.utf8)) == "/")
        // A comma before a closing bracket is no JSON, though the decoder takes it; inside a string it is text.
        for json in [#"{"container": "mp4",}"#, #"{"renditions": [{"video": {}},], "container": "hls"}"#, "{\"a\": [1 ,\n ]}"] {
            #expect(throws: SettingsError.self, "\(json)") { try JSONValue.parse(Data(json.utf8)) }
        }
        #expect(throws: Never.self) { try JSONValue.parse(Data(#"{"a": ",}", "b": [",]"]}"#.utf8)) }
        // UTF-16 and UTF-32, which the decoder reads too, are looked at as the text they are: a code unit holding
        // the byte of a quote or a backslash (小 is 0F 5C in UTF-16LE) is no quote or backslash.
        let wide = #"{"filters": {"video": {"grayscale": true}}, "b": "小", "c": "", "a": "≜"}"#
        for encoding in [String.Encoding.utf16LittleEndian, .utf16BigEndian, .utf16, .utf32LittleEndian, .utf32BigEndian] {
            let data = try #require(wide.data(using: encoding))
            #expect(JSONValue.duplicateKey(in: JSONValue.utf8(data)) == nil, "\(encoding)")
            let twice = try #require(#"{"video": {"width": 640, "width": 642}, "b": "小"}"#.data(using: encoding))
            #expect(JSONValue.duplicateKey(in: JSONValue.utf8(twice)) == "video.width", "\(encoding)")
        }
    }

    @Test func copyAndNullChooseWhatHappensToATrack() throws {
        let settings = try parse(#"{"video": "copy", "audio": null, "container": "mov"}"#)
        #expect(settings.video == .copy)
        #expect(settings.audio == .drop)
        #expect(settings.container == .mov)
    }

    @Test(arguments: [
        (#"{"vidoe": {}}"#, "vidoe: unknown key"),
        (#"{"video": {"profile": "extreme"}}"#, "video.profile: expected one of baseline, main, high"),
        (#"{"video": {"width": 1281}}"#, "video.width: expected an even number"),
        (#"{"video": {"width": 9000}}"#, "video.width: expected a whole number of pixels from 2 to 8192"),
        (#"{"video": {"height": "720"}}"#, "video.height: expected a whole number"),
        (#"{"video": {"level": "9.9"}}"#, "video.level: expected one of"),
        (#"{"video": {"scalingMode": "zoom"}}"#, "video.scalingMode: expected one of fit, fill, stretch"),
        (#"{"video": {"bitrate": 1}}"#, "video.bitrate: unknown key"),
        (#"{"audio": {"sampleRate": 44000}}"#, "audio.sampleRate: expected one of"),
        (#"{"audio": {"channels": 0}}"#, "audio.channels: expected a whole number of channels from 1 to 8"),
        (#"{"audio": "mute"}"#, "audio: expected an object of settings, \"copy\" or null"),
        (#"{"container": "avi"}"#, "container: expected one of mp4, mov, m4v"),
        (#"{"preset": "4k"}"#, "preset: unknown preset \"4k\""),
        (#"[1, 2]"#, "expected an object"),
        (#"{"video": "#, "not valid JSON"),
    ])
    func invalidSettingsNameTheKey(json: String, expected: String) {
        let message = error(json)
        #expect(message?.contains(expected) == true, "got \(message ?? "no error")")
    }

    @Test func levelMayBeANumber() throws {
        #expect(try parse(#"{"video": {"level": 4.1}}"#).video.settings?.level == "4.1")
        #expect(try parse(#"{"video": {"level": 3}}"#).video.settings?.level == "3")
    }

    @Test func presetsAreNamedAndAddedTo() throws {
        #expect(Preset.names.contains("480p") && Preset.names.contains("720p") && Preset.names.contains("1080p"))
        let audioOnly = try TranscodeSettings(json: .string("audio"))
        #expect(audioOnly.video == .drop)
        #expect(audioOnly.audio.settings?.codec == "aac")
        let tuned = try parse(#"{"preset": "720p", "video": {"averageBitRate": 1000000}}"#)
        let video = try #require(tuned.video.settings)
        #expect(video.width == 1280 && video.height == 720 && video.averageBitRate == 1_000_000)
        // A width alone over a preset's box keeps the aspect ratio instead of the box's height.
        let widthOnly = try #require(try parse(#"{"preset": "720p", "video": {"width": 640}}"#).video.settings)
        #expect(widthOnly.width == 640 && widthOnly.height == nil)
        // A key set to null keeps its default (README): the preset's whole box, and no preset at all.
        let nullWidth = try #require(try parse(#"{"preset": "720p", "video": {"width": null}}"#).video.settings)
        #expect(nullWidth.width == 1280 && nullWidth.height == 720, "\(nullWidth)")
        let nullHeight = try #require(try parse(#"{"preset": "720p", "video": {"width": 640, "height": null}}"#).video.settings)
        #expect(nullHeight.width == 640 && nullHeight.height == nil, "a width given alone, as without the null")
        #expect(try parse(#"{"preset": null, "container": "mov"}"#) == parse(#"{"container": "mov"}"#))
    }

    @Test func settingsRoundTripThroughJSON() throws {
        let settings = try parse(#"{"preset": "1080p", "audio": "copy", "container": "m4v"}"#)
        let data = try JSONEncoder().encode(settings)
        let decoded = try JSONDecoder().decode(TranscodeSettings.self, from: data)
        #expect(decoded == settings)
    }
}
