#!/usr/bin/env bash
# Event-loop latency: p50/p99 of polls on other connections while 50 event streams start at once and a 2 GiB
# upload is aborted (bench/loop_latency.py), against the same polls on the quiet server in the same run.
# Usage: bench/loop.sh [UPLOAD_MIB]   (default 2048; the data directory is on disk, under bench/out/loop)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
mib=${1:-2048}
scripts/deps
scripts/build-release transcoderd
bin=$PWD/.build/release/transcoderd
work=$PWD/bench/out/loop
rm -rf "$work"; mkdir -p "$work"
port=18491
"$bin" serve --data "$work/data" --port $port --log-format text 2>"$work/server.log" &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
clip="$work/clip.mp4"
ffmpeg -v error -y -f lavfi -i testsrc2=s=320x240:d=1 -f lavfi -i sine=d=1 -c:v libx264 -c:a aac "$clip"
job=$(curl -sf -F "file=@$clip" "http://127.0.0.1:$port/v1/jobs" | jq -r .id)
until [ "$(curl -sf "http://127.0.0.1:$port/v1/jobs/$job" | jq -r .state)" = succeeded ]; do sleep 0.2; done
python3 bench/loop_latency.py $port "$job" "$mib"
left=$(find "$work/data/uploads" -name '.upload-*' | wc -l)
[ "$left" = 0 ] || { echo "FAILED: $left partial uploads left behind" >&2; exit 1; }
