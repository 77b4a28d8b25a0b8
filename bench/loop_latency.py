#!/usr/bin/env python3
"""Event-loop latency under load: p50/p99 of GET /v1/jobs/{id} on keep-alive connections, first while the server is
quiet, then while 50 event streams start at once and a 2 GiB upload is sent and aborted mid-way.

Anything that blocks an event-loop thread (a SQLite read when a stream starts, unlinking the aborted upload, waiting
for a hash buffer) shows up as the poll latency of the connections that loop serves. The quiet phase is the
reference in the same run.

Usage: loop_latency.py PORT JOB_ID [UPLOAD_MIB]
"""
import socket
import sys
import threading
import time

port = int(sys.argv[1])
job = sys.argv[2]
upload_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
POLLERS = 8
# Seconds between two polls of one poller.
INTERVAL = 0.004


def connect():
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock, buffer):
    """Reads one response with a Content-Length body; returns (status, rest of the buffer)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return int(head.split(b" ")[1]), rest[length:]


samples = []  # (start time, seconds)
lock = threading.Lock()
stop = threading.Event()
failures = []


def poll(offset):
    """Polls on a fixed schedule (every INTERVAL seconds) and times each answer from when it was due, not from when
    it was sent: a stalled loop then shows as every poll it delayed, not as one slow poll (coordinated omission)."""
    request = f"GET /v1/jobs/{job} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    try:
        sock = connect()
        buffer = b""
        due = time.monotonic() + offset
        while not stop.is_set():
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            started = due
            due += INTERVAL
            sock.sendall(request)
            status, buffer = read_response(sock, buffer)
            elapsed = time.monotonic() - started
            if status != 200:
                failures.append(f"poll answered {status}")
                return
            with lock:
                samples.append((started, elapsed))
    except Exception as error:  # a failed poller makes the figure meaningless
        failures.append(f"poller: {error!r}")


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def window(start, end):
    return [elapsed for (when, elapsed) in samples if start <= when < end]


def stream(opened):
    try:
        sock = connect()
        sock.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        data = b""
        while b"event: state" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        if b"event: state" in data:
            opened.append(1)
        sock.close()
    except Exception as error:
        failures.append(f"stream: {error!r}")


def upload_and_abort(ready, go):
    sock = connect()
    total = upload_mib * 1024 * 1024
    # Announce one byte more than is sent, so the server is still waiting when the client leaves.
    sock.sendall(f"PUT /v1/uploads/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {total + 1}\r\n\r\n".encode())
    block = bytes(range(256)) * 4096  # 1 MiB, not all zero
    sent = 0
    while sent < total:
        sock.sendall(block)
        sent += len(block)
    ready.set()
    go.wait()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # reset: the server drops the upload and removes its file


pollers = [threading.Thread(target=poll, args=(index * INTERVAL / POLLERS,), daemon=True) for index in range(POLLERS)]
for thread in pollers:
    thread.start()
time.sleep(0.5)
quiet_start = time.monotonic()
time.sleep(3)
quiet_end = time.monotonic()

ready = threading.Event()
go = threading.Event()
uploader = threading.Thread(target=upload_and_abort, args=(ready, go))
uploader.start()
ready.wait()
opened = []
streams = [threading.Thread(target=stream, args=(opened,)) for _ in range(50)]
busy_start = time.monotonic()
go.set()
for thread in streams:
    thread.start()
for thread in streams:
    thread.join()
uploader.join()
time.sleep(2)  # the abort's clean-up happens after the reset
busy_end = time.monotonic()
stop.set()
for thread in pollers:
    thread.join()

if failures:
    print("FAILED:", "; ".join(failures[:5]))
    sys.exit(1)
if len(opened) != 50:
    print(f"FAILED: {len(opened)} of 50 event streams sent their first event")
    sys.exit(1)
quiet = window(quiet_start, quiet_end)
busy = window(busy_start, busy_end)
ms = lambda seconds: f"{seconds * 1000:.2f} ms"
print(f"loop quiet  p50 {ms(percentile(quiet, 0.5))}  p99 {ms(percentile(quiet, 0.99))}  max {ms(max(quiet))}  ({len(quiet)} polls)")
print(f"loop busy   p50 {ms(percentile(busy, 0.5))}  p99 {ms(percentile(busy, 0.99))}  max {ms(max(busy))}  ({len(busy)} polls; "
      f"50 streams started, {upload_mib} MiB uploaded then aborted; target p99 < 20 ms)")
