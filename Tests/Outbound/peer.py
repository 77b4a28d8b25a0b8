"""The other end of the server's outbound requests, for the tests: a webhook receiver that verifies every delivery
with the `standardwebhooks` package (an independent implementation of the signature) and records it, and a media
server for inputs fetched by URL, with the misbehaviours the tests need.

  peer.py SECRET RECORDS MEDIA_DIR PORT_FILE [PORT]

POST /hooks/ok      200            POST /hooks/flaky   500, 500, then 200 (per webhook-id)
POST /hooks/gone    410            POST /hooks/busy    503 with Retry-After: 5 once per webhook-id, then 200
POST /hooks/down    500 always       POST /hooks/limited 429 with Retry-After: 0 twice per webhook-id, then 200
POST /hooks/slow-body  200 at once, its 10-byte body 20 s later
POST /hooks/picky   400 to job.running (it takes how jobs end only), 200 to the rest
POST /hooks/deploying  400 to job.running's first attempt, its next answered 200 after 8 s (recorded then); 200 to the rest
POST /hooks/hang    200 after 60 s (past any attempt's timeout): a receiver that hangs
GET /media/NAME     a file of MEDIA_DIR         GET /missing   404
GET /slow-media/NAME  the same in 20 pieces over about 3 s
GET /late-media/NAME  the same, answered 8 s after the request
GET /flaky-media/NAME  503 to the first request for NAME, then the file (named AS by Content-Disposition with ?as=AS)
GET /busy-media/NAME  503 with Retry-After: 16 for 16 s after the first request for NAME, then the file
GET /redirect?to=U  302 to U                    GET /stall     a 1 MB body that stops after 1000 bytes
GET /big            3 MB of zeros, with Content-Length       GET /big-chunked   the same, chunked
GET /silent         a 1 MB body's head, then nothing
GET /error-stall    503 with a 1 MB body that stops after 100,000 bytes
GET /trickle?bytes=N&every=S  a 1 MB body sent N bytes every S seconds; when the fetcher hangs up, a record
                    with path /trickle-closed says so
Every request is appended to RECORDS as one JSON object per line.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from standardwebhooks.webhooks import Webhook

secret, records, media, port_file = sys.argv[1:5]
webhook = Webhook(secret)
lock = threading.Lock()
seen = {}


def record(entry):
    with lock:
        with open(records, "a") as out:
            out.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            payload = webhook.verify(body, headers)
            verified = True
        except Exception as error:  # any refusal of the signature or the timestamp
            payload, verified = json.loads(body or b"null"), False
            print(f"verification failed: {error}", file=sys.stderr)
        behaviour = urlparse(self.path).path.rsplit("/", 1)[-1]
        key = (behaviour, headers.get("webhook-id"))
        with lock:
            seen[key] = seen.get(key, 0) + 1
            count = seen[key]
        extra = ()
        if behaviour == "ok":
            status = 200
        elif behaviour == "flaky":
            status = 500 if count <= 2 else 200
        elif behaviour == "gone":
            status = 410
        elif behaviour == "busy":
            status, extra = (503, (("Retry-After", "5"),)) if count == 1 else (200, ())
        elif behaviour == "limited":
            status, extra = (429, (("Retry-After", "0"),)) if count <= 2 else (200, ())
        elif behaviour == "hang":
            status = 200
        elif behaviour == "picky":
            status = 400 if isinstance(payload, dict) and payload.get("type") == "job.running" else 200
        elif behaviour == "deploying":
            running = isinstance(payload, dict) and payload.get("type") == "job.running"
            status = 400 if running and count == 1 else 200
            if running and count > 1:
                time.sleep(8)
        else:
            status = 500
        data = payload.get("data", {}) if isinstance(payload, dict) else {}
        if behaviour == "slow-body":
            status = 200
        record({"path": self.path, "id": headers.get("webhook-id"), "timestamp": headers.get("webhook-timestamp"),
                "verified": verified, "type": payload.get("type") if isinstance(payload, dict) else None,
                "payloadTimestamp": payload.get("timestamp") if isinstance(payload, dict) else None,
                "job": data.get("id"), "state": data.get("state"), "received": time.time(), "answered": status})
        if behaviour == "slow-body":
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.flush()
            time.sleep(20)
            return
        if behaviour == "hang":
            time.sleep(60)
        self.answer(status, b"{}", extra)

    def do_GET(self):
        url = urlparse(self.path)
        record({"path": self.path, "received": time.time()})
        if url.path.startswith("/media/") and os.path.isfile(os.path.join(media, os.path.basename(url.path))):
            name = os.path.basename(url.path)
            with open(os.path.join(media, name), "rb") as source:
                body = source.read()
            self.answer(200, body, (("Content-Type", "video/mp4"), ("Content-Disposition", f'attachment; filename="{name}"')))
        elif url.path.startswith("/flaky-media/"):
            name = os.path.basename(url.path)
            with lock:
                seen[("flaky-media", name)] = seen.get(("flaky-media", name), 0) + 1
                count = seen[("flaky-media", name)]
            if count == 1:
                self.answer(503, b"busy")
            else:
                named = parse_qs(url.query).get("as")
                extra = (("Content-Disposition", f'attachment; FileName="{named[0]}"'),) if named else ()
                with open(os.path.join(media, name), "rb") as source:
                    self.answer(200, source.read(), (("Content-Type", "video/mp4"),) + extra)
        elif url.path.startswith("/busy-media/"):
            name = os.path.basename(url.path)
            with lock:
                first = seen.setdefault(("busy-media", name), time.time())
            if time.time() - first < 16:
                self.answer(503, b"busy", (("Retry-After", "16"),))
            else:
                with open(os.path.join(media, name), "rb") as source:
                    self.answer(200, source.read(), (("Content-Type", "video/mp4"),))
        elif url.path.startswith("/late-media/"):
            time.sleep(8)
            with open(os.path.join(media, os.path.basename(url.path)), "rb") as source:
                self.answer(200, source.read(), (("Content-Type", "video/mp4"),))
        elif url.path.startswith("/slow-media/"):
            with open(os.path.join(media, os.path.basename(url.path)), "rb") as source:
                body = source.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            piece = len(body) // 20 + 1
            for start in range(0, len(body), piece):
                self.wfile.write(body[start:start + piece])
                self.wfile.flush()
                time.sleep(0.15)
        elif url.path == "/redirect":
            self.answer(302, b"", (("Location", parse_qs(url.query)["to"][0]),))
        elif url.path == "/stall":
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            self.wfile.write(b"\0" * 1000)
            self.wfile.flush()
            time.sleep(60)
        elif url.path == "/error-stall":
            self.send_response(503)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            self.wfile.write(b"busy " * 20_000)
            self.wfile.flush()
            time.sleep(60)
        elif url.path == "/silent":
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            self.wfile.flush()
            time.sleep(60)
        elif url.path == "/trickle":
            query = parse_qs(url.query)
            size, every = int(query["bytes"][0]), float(query["every"][0])
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                for _ in range(1_000_000 // size):
                    self.wfile.write(b"\0" * size)
                    self.wfile.flush()
                    time.sleep(every)
            except OSError:
                record({"path": "/trickle-closed", "received": time.time()})
        elif url.path == "/big":
            self.answer(200, b"\0" * 3_000_000)
        elif url.path == "/big-chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(30):
                self.wfile.write(b"%x\r\n" % 100_000 + b"\0" * 100_000 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.answer(404, b"not here")


ThreadingHTTPServer.allow_reuse_address = True
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[5]) if len(sys.argv) > 5 else 0), Handler)
server.daemon_threads = True
with open(port_file + ".tmp", "w") as out:
    out.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
