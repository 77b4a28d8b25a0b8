"""Fuzzes a running transcoderd with malformed and hostile HTTP/1.1 requests (hypothesis).

Usage: python http_fuzz.py PORT SECONDS
Each example sends raw bytes on a fresh connection. The server must answer with a well-formed status line and never
with a 5xx for a client's mistake, or close the connection; and it must still answer GET /healthz afterwards.
Exits non-zero with the failing example printed.
"""
import socket
import sys
import time

from hypothesis import HealthCheck, given, settings, strategies as st

PORT = int(sys.argv[1])
SECONDS = float(sys.argv[2])
DEADLINE = time.monotonic() + SECONDS

methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "TRACE", "PATCH", "FOO", "G ET", ""])
paths = st.one_of(
    st.sampled_from(["/", "/healthz", "/v1/jobs", "/v1/uploads", "/v1/uploads/x.mp4", "/v1/jobs/../../etc/passwd",
                     "/v1/jobs/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/v1/jobs/%00", "//etc/passwd", "*", "http://x/",
                     "/v1/jobs?limit=-1", "/v1/jobs?state=%ff", "/%", "/v1/jobs/" + "a" * 5000]),
    st.text(min_size=0, max_size=60).map(lambda text: "/" + text),
)
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "http/1.1", "HTTP/9", ""])
header_names = st.one_of(st.sampled_from(["Host", "Content-Length", "Transfer-Encoding", "Expect", "Content-Type",
                                          "Connection", "Range", "Authorization", "X-A"]),
                         st.text(min_size=0, max_size=20))
header_values = st.one_of(st.sampled_from(["chunked", "gzip, chunked", "100-continue", "-1", "0", "5", "99999999999999999999",
                                           "multipart/form-data", "multipart/form-data; boundary=x", "bytes=0-1,2-3",
                                           "close", "keep-alive"]),
                          st.text(min_size=0, max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
headers = st.lists(st.tuples(header_names, header_values), max_size=8)
bodies = st.one_of(st.just(b""), st.binary(max_size=300),
                   st.sampled_from([b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\n", b"--x\r\n\r\n--x--",
                                    b"--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--x--\r\n",
                                    b'{"input": 1}', b"{"]))
folded = st.booleans()


class Hang(AssertionError):
    """The server neither answered nor closed the connection in time."""


def exchange(data: bytes) -> bytes:
    """Sends `data`, says no more is coming (half-close), and reads until the server closes. A server that does
    neither answer nor close within 5 s hangs: that fails the example. A reset after the answer is not a failure."""
    with socket.create_connection(("127.0.0.1", PORT), timeout=5) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        received = b""
        try:
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        except socket.timeout:
            raise Hang(f"no answer and no close within 5 s to {data[:120]!r}; got {received[:120]!r}")
        except ConnectionResetError:
            pass
        return received


def healthy() -> bool:
    answer = exchange(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    return answer.startswith(b"HTTP/1.1 200")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(methods, paths, versions, headers, bodies, folded)
def test_server_survives(method, path, version, header_list, body, fold):
    lines = [f"{method} {path} {version}"]
    for name, value in header_list:
        lines.append(f"{name}: {value}")
        if fold:
            lines.append(" folded")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body
    answer = exchange(raw)
    if answer:
        assert answer.startswith(b"HTTP/1.1 "), answer[:80]
        statuses = [int(part[9:12]) for part in answer.split(b"\r\n") if part.startswith(b"HTTP/1.1 ") and part[9:12].isdigit()]
        assert statuses, answer[:120]
        assert all(code < 500 or code in (503, 507) for code in statuses), (raw[:200], answer[:200])
    assert healthy(), raw[:200]


if __name__ == "__main__":
    rounds = 0
    # Rounds of 200 fresh examples until the time is up: bounded in time, whatever the machine's speed.
    while time.monotonic() < DEADLINE:
        test_server_survives()
        rounds += 1
    print(f"http fuzz: {rounds * 200} examples in {SECONDS:.0f} s, no failure")
