#!/usr/bin/env bash
# Resumable upload benchmark: 1 GiB of real media (an MPEG-TS) through tus in 8 MiB PATCHes against our plain upload
# of the same file (curl -T), same server, same disk, alternating rounds; medians. Two tus clients: a lean one
# (bench/tus_sendfile.py: one keep-alive connection, bodies sent with sendfile(2), about what curl -T costs, so the
# ratio is the server's) and tuspy (the PyPI client, whose Python copies compete with the server for two cores).
# Both end the same way: the file probed, hashed (SHA-256), flushed and recorded as an upload (then deleted).
# Target: tus at least 0.7 of the plain upload's speed. Usage: bench/tus.sh [ROUNDS] [MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/venv
scripts/build-release transcoderd
rounds=${1:-5}; mib=${2:-1024}
work=$PWD/bench/out/tus
rm -rf "$work"; mkdir -p "$work"
port=18601
.build/release/transcoderd serve --data "$work/data" --port $port --max-upload-bytes $((4 << 30)) 2>"$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
ffmpeg -v error -y -f lavfi -i testsrc2=s=1920x1080:r=30:d=10 -f lavfi -i sine=d=10 \
  -c:v libx264 -preset ultrafast -b:v 60M -c:a aac -f mpegts "$work/loop.ts"
ffmpeg -v error -y -stream_loop -1 -i "$work/loop.ts" -c copy -fs $((mib * 1024 * 1024)) -f mpegts "$work/big.ts"
size=$(stat -c %s "$work/big.ts")
now() { date +%s.%N; }
# Each timed run starts with the disk quiet: the previous run's deleted gigabyte is not still being written back.
plain() {
  local start id
  sync
  start=$(now)
  id=$(curl -sf -T "$work/big.ts" "http://127.0.0.1:$port/v1/uploads/big.ts" | jq -r .id)
  awk "BEGIN {print $(now) - $start}"
  curl -sf -X DELETE "http://127.0.0.1:$port/v1/uploads/$id" >/dev/null
}
tus() {
  local start url
  sync
  start=$(now)
  url=$(.venv/bin/python -c '
import sys
from tusclient import client
u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], chunk_size=8 << 20, metadata={"filename": "big.ts"})
u.upload()
print(u.url)' "http://127.0.0.1:$port/v1/tus" "$work/big.ts")
  awk "BEGIN {print $(now) - $start}"
  curl -sf -o /dev/null "http://127.0.0.1:$port/v1/uploads/${url##*/}" || { echo "tus upload not stored" >&2; exit 1; }
  curl -sf -X DELETE "http://127.0.0.1:$port/v1/uploads/${url##*/}" >/dev/null
}
tus_lean() {
  local start id
  sync
  start=$(now)
  id=$(python3 bench/tus_sendfile.py 127.0.0.1 $port "$work/big.ts" $((8 << 20)))
  awk "BEGIN {print $(now) - $start}"
  curl -sf -o /dev/null "http://127.0.0.1:$port/v1/uploads/$id" || { echo "tus upload not stored" >&2; exit 1; }
  curl -sf -X DELETE "http://127.0.0.1:$port/v1/uploads/$id" >/dev/null
}
plain >/dev/null; tus >/dev/null; tus_lean >/dev/null # warm-up
: >"$work/rounds"
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then p=$(plain); c=$(tus_lean); t=$(tus); else t=$(tus); c=$(tus_lean); p=$(plain); fi
  echo "$p $c $t" >>"$work/rounds"
  echo "round $round: plain upload $p s, tus in 8 MiB PATCHes: lean client $c s, tuspy $t s"
done
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p=$(awk '{print $1}' "$work/rounds" | median); c=$(awk '{print $2}' "$work/rounds" | median); t=$(awk '{print $3}' "$work/rounds" | median)
awk -v p="$p" -v c="$c" -v t="$t" -v s="$size" 'BEGIN {
  printf "1 GiB upload: plain %.2f s (%.0f MiB/s); tus with a lean client %.2f s (%.0f MiB/s): speed ratio %.2f (target >= 0.7); tus with tuspy %.2f s (%.0f MiB/s): ratio %.2f\n",
    p, s / p / 1048576, c, s / c / 1048576, p / c, t, s / t / 1048576, p / t }'
echo "server peak RSS: $(awk '/VmHWM/ {print $2 / 1024 " MiB"}' /proc/$server/status)"
