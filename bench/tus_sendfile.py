"""A lean tus client for bench/tus.sh: one keep-alive connection, each 8 MiB PATCH body sent with sendfile(2), so the
client costs about what curl -T costs the plain upload and the ratio measures the server.

  tus_sendfile.py HOST PORT FILE CHUNK   prints the upload's id
"""
import base64
import os
import socket
import sys

host, port, path, chunk = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
size = os.path.getsize(path)
sock = socket.create_connection((host, port))
reader = sock.makefile("rb")


def exchange(head, body_offset=None, body_length=0):
    sock.sendall(head.encode())
    if body_length:
        with open(path, "rb") as source:
            sent = 0
            while sent < body_length:
                sent += os.sendfile(sock.fileno(), source.fileno(), body_offset + sent, body_length - sent)
    status = reader.readline().split()[1]
    headers = {}
    while True:
        line = reader.readline().strip()
        if not line:
            break
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    if length:
        reader.read(length)
    return int(status), headers


name = base64.b64encode(os.path.basename(path).encode()).decode()
status, headers = exchange(f"POST /v1/tus HTTP/1.1\r\nHost: {host}\r\nTus-Resumable: 1.0.0\r\nUpload-Length: {size}\r\n"
                           f"Upload-Metadata: filename {name}\r\nContent-Length: 0\r\n\r\n")
assert status == 201, status
location = headers["location"]
offset = 0
while offset < size:
    count = min(chunk, size - offset)
    status, headers = exchange(f"PATCH {location} HTTP/1.1\r\nHost: {host}\r\nTus-Resumable: 1.0.0\r\n"
                               f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: {offset}\r\n"
                               f"Content-Length: {count}\r\n\r\n", offset, count)
    assert status == 204, (status, headers)
    offset = int(headers["upload-offset"])
print(location.rsplit("/", 1)[1])
