"""A real tus client (tuspy, from PyPI) for the tests.

  tus_client.py upload ENDPOINT FILE CHUNK [METADATA_JSON]   upload it all; prints the upload URL
  tus_client.py slow ENDPOINT FILE CHUNK DELAY               prints the URL, then a chunk every DELAY s, printing
                                                             each new offset (the test kills it mid-way)
  tus_client.py resume UPLOAD_URL FILE CHUNK                 asks the server's offset (HEAD) and uploads the rest;
                                                             prints the offset it resumed from
Headers from TUS_HEADERS (JSON) go on every request (Authorization).
"""
import json
import os
import sys
import time

from tusclient import client

headers = json.loads(os.environ.get("TUS_HEADERS", "{}"))
mode = sys.argv[1]
if mode in ("upload", "slow"):
    endpoint, path, chunk = sys.argv[2], sys.argv[3], int(sys.argv[4])
    metadata = json.loads(sys.argv[5]) if mode == "upload" and len(sys.argv) > 5 else {"filename": os.path.basename(path)}
    # Every chunk with its SHA-1 (Upload-Checksum), as the checksum extension allows.
    uploader = client.TusClient(endpoint, headers=headers).uploader(path, chunk_size=chunk, metadata=metadata,
                                                                    upload_checksum=True)
    if mode == "upload":
        uploader.upload()
        print(uploader.url, flush=True)
    else:
        delay = float(sys.argv[5])
        uploader.set_url(uploader.create_url())
        print(uploader.url, flush=True)
        while uploader.offset < uploader.get_file_size():
            uploader.upload_chunk()
            print(uploader.offset, flush=True)
            time.sleep(delay)
elif mode == "resume":
    url, path, chunk = sys.argv[2], sys.argv[3], int(sys.argv[4])
    endpoint = url.rsplit("/", 1)[0]
    uploader = client.TusClient(endpoint, headers=headers).uploader(path, chunk_size=chunk, url=url)
    print(uploader.offset, flush=True)
    uploader.upload()
else:
    sys.exit("unknown mode " + mode)
