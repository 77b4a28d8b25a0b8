import Foundation
import Testing
import TestSupport

/// `filters.video.watermark` through the API: an uploaded PNG laid over the picture where it was asked for.
@Suite struct WatermarkTests {
    @Test func theImageAppearsInTheChosenCorner() throws {
        let server = try TestServer()
        let folder = try Media.scratch()
        let image = folder.appendingPathComponent("mark.png").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=red:s=64x64", "-frames:v", "1", image])
        let video = folder.appendingPathComponent("blue.mp4").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=blue:s=640x360:d=2", "-c:v", "libx264", "-pix_fmt", "yuv420p", video])
        let mark = try #require(try server.json("/v1/uploads/", ["-T", image]).object["id"] as? String)
        let input = try #require(try server.json("/v1/uploads/", ["-T", video]).object["id"] as? String)

        func run(_ watermark: String) throws -> String {
            let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                       #"{"input": "\#(input)", "settings": {"filters": {"video": {"watermark": \#(watermark)}}}}"#])
            let id = try #require(created.object["id"] as? String, "\(created.object)")
            _ = try eventually { try server.json("/v1/jobs/\(id)").object["state"] as? String == "succeeded" }
            let output = try Media.scratch().appendingPathComponent("out.mp4").path
            #expect(try server.curl("/v1/jobs/\(id)/output", ["-o", output]).status == 200)
            return output
        }

        let corner = try run(#"{"upload": "\#(mark)", "position": "bottomRight", "margin": 16}"#)
        let inside = try Probe.meanColor(corner, x: 640 - 16 - 56, y: 360 - 16 - 56, width: 48, height: 48)
        let elsewhere = try Probe.meanColor(corner, x: 16, y: 16, width: 48, height: 48)
        #expect(inside[0] > 230 && inside[2] < 30, "the watermark's red in the corner: \(inside)")
        #expect(elsewhere[2] > 230 && elsewhere[0] < 30, "blue elsewhere: \(elsewhere)")

        let faint = try run(#"{"upload": "\#(mark)", "position": "topLeft", "margin": 0, "opacity": 0.5}"#)
        let blended = try Probe.meanColor(faint, x: 8, y: 8, width: 48, height: 48)
        #expect(abs(blended[0] - 128) < 30 && abs(blended[2] - 128) < 30, "half red, half blue: \(blended)")

        // A transport stream whose clock starts 2.3 s before it wraps: its first pictures come before zero on the
        // source's clock, where the image (dated 0) was not yet shown.
        let wrapping = folder.appendingPathComponent("wrapping.ts").path
        try Media.ffmpeg(["-f", "lavfi", "-i", "color=blue:s=640x360:r=25:d=4", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                          "-output_ts_offset", "95440", "-f", "mpegts", wrapping])
        let wrapped = try #require(try server.json("/v1/uploads/", ["-T", wrapping]).object["id"] as? String)
        let created = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(wrapped)", "settings": {"filters": {"video": {"watermark": {"upload": "\#(mark)", "position": "topLeft", "margin": 0}}}}}"#])
        let wrappedJob = try #require(created.object["id"] as? String, "\(created.object)")
        #expect(try eventually { try server.json("/v1/jobs/\(wrappedJob)").object["state"] as? String == "succeeded" })
        let early = try Media.scratch().appendingPathComponent("early.mp4").path
        #expect(try server.curl("/v1/jobs/\(wrappedJob)/output", ["-o", early]).status == 200)
        for time in [0.2, 1.0, 3.0] {
            let color = try Probe.meanColor(early, at: time, x: 8, y: 8, width: 48, height: 48)
            #expect(color[0] > 230 && color[2] < 30, "the watermark at \(time) s: \(color)")
        }

        let notAnImage = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                      #"{"input": "\#(input)", "settings": {"filters": {"video": {"watermark": {"upload": "\#(input)"}}}}}"#])
        #expect(notAnImage.status == 422)
        #expect(((notAnImage.object["error"] as? [String: Any])?["message"] as? String)?.hasPrefix("settings.filters.video.watermark.upload:") == true)
        let missing = try server.json("/v1/jobs", ["-H", "Content-Type: application/json", "-d",
                                                   #"{"input": "\#(input)", "settings": {"filters": {"video": {"watermark": {"upload": "nope"}}}}}"#])
        #expect(missing.status == 422)
    }
}
