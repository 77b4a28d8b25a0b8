#!/usr/bin/env python3
"""Serves a page that plays an HLS master playlist from another origin in a <video> element, and records what the
browser reports about the playback.

Usage: play_page.py PORT_FILE RESULT_FILE
Writes the port it listens on (127.0.0.1, any free port) to PORT_FILE; the page (`/?src=<master playlist URL>`)
POSTs its report to /report, whose body is written to RESULT_FILE. Runs until killed.
"""
import http.server
import json
import sys

port_file, result_file = sys.argv[1:3]

PAGE = """<!doctype html>
<html><body>
<video id="player" muted autoplay playsinline crossorigin="anonymous"></video>
<script>
const video = document.getElementById("player");
const support = video.canPlayType("application/vnd.apple.mpegurl");
let sent = false;
function report(fields) {
  if (sent) return;
  sent = true;
  fetch("/report", {method: "POST", body: JSON.stringify(Object.assign({support}, fields))});
}
video.addEventListener("error", () => report({error: video.error ? video.error.code : -1, message: video.error ? video.error.message : ""}));
// Played to the end: every segment of (at least) one variant and of the audio was fetched and decoded.
video.addEventListener("ended", () => {
  report({ended: true, duration: video.duration, width: video.videoWidth, height: video.videoHeight, time: video.currentTime});
});
setTimeout(() => report({timeout: true, time: video.currentTime, readyState: video.readyState}), 40000);
video.src = new URLSearchParams(location.search).get("src");
video.play().catch((error) => {});
</script>
</body></html>
"""


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(length)
        with open(result_file, "wb") as handle:
            handle.write(data)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file, "w") as handle:
    handle.write(str(server.server_address[1]))
server.serve_forever()
