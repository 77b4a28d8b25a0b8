#!/usr/bin/env bash
# Outbound benchmark, each figure against a reference in the same run (medians over rounds):
#  1. an input fetched by URL (POST /v1/uploads {"url"}: libcurl from nginx on 127.0.0.1, SHA-256 on the way, flushed,
#     probed, recorded) against the same 1 GiB uploaded with curl -T (the same work on our side), and against curl
#     alone downloading it to a file (the transfer without our work);
#  2. webhooks: the time from a job's end (finishedAt) to its signed job.succeeded reaching a receiver (the
#     standardwebhooks-verifying peer of the tests), over 30 jobs.
# Usage: bench/outbound.sh [ROUNDS] [MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/venv
command -v nginx >/dev/null || { apt-get update -qq; apt-get install -y -qq nginx >/dev/null; }
scripts/build-release transcoderd
rounds=${1:-5}; mib=${2:-1024}
work=$PWD/bench/out/outbound
rm -rf "$work"; mkdir -p "$work/www" "$work/tmp"
port=18701; nginx_port=18702
secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
cat >"$work/nginx.conf" <<CONF
user root;
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $work/tmp;
  server { listen 127.0.0.1:$nginx_port; location / { root $work/www; } }
}
CONF
nginx -c "$work/nginx.conf"
.build/release/transcoderd serve --data "$work/data" --port $port --max-upload-bytes $((4 << 30)) --allow-private-urls 127.0.0.0/8 \
  --webhook-secret $secret 2>"$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null || true; kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; [ -n "${peer:-}" ] && kill $peer 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
ffmpeg -v error -y -f lavfi -i testsrc2=s=1920x1080:r=30:d=10 -f lavfi -i sine=d=10 \
  -c:v libx264 -preset ultrafast -b:v 60M -c:a aac -f mpegts "$work/loop.ts"
ffmpeg -v error -y -stream_loop -1 -i "$work/loop.ts" -c copy -fs $((mib * 1024 * 1024)) -f mpegts "$work/www/big.ts"
size=$(stat -c %s "$work/www/big.ts")
url="http://127.0.0.1:$nginx_port/big.ts"
now() { date +%s.%N; }
fetch() {
  local start id
  sync; start=$(now)
  id=$(curl -sf -H 'Content-Type: application/json' -d "{\"url\": \"$url\"}" "http://127.0.0.1:$port/v1/uploads" | jq -r .id)
  awk "BEGIN {print $(now) - $start}"
  [ "$id" != null ] && [ -n "$id" ] || { echo "the fetch failed" >&2; exit 1; }
  curl -sf -X DELETE "http://127.0.0.1:$port/v1/uploads/$id" >/dev/null
}
plain() {
  local start id
  sync; start=$(now)
  id=$(curl -sf -T "$work/www/big.ts" "http://127.0.0.1:$port/v1/uploads/big.ts" | jq -r .id)
  awk "BEGIN {print $(now) - $start}"
  curl -sf -X DELETE "http://127.0.0.1:$port/v1/uploads/$id" >/dev/null
}
download() {
  local start
  sync; start=$(now)
  curl -sf -o "$work/download.ts" "$url"
  awk "BEGIN {print $(now) - $start}"
  rm -f "$work/download.ts"
}
fetch >/dev/null; plain >/dev/null; download >/dev/null # warm-up
: >"$work/rounds"
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then f=$(fetch); p=$(plain); d=$(download); else d=$(download); p=$(plain); f=$(fetch); fi
  echo "$f $p $d" >>"$work/rounds"
  echo "round $round: fetched by URL $f s, uploaded with curl -T $p s, curl download alone $d s"
done
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
f=$(awk '{print $1}' "$work/rounds" | median); p=$(awk '{print $2}' "$work/rounds" | median); d=$(awk '{print $3}' "$work/rounds" | median)
awk -v f="$f" -v p="$p" -v d="$d" -v s="$size" 'BEGIN {
  printf "%.0f MiB input: fetched by URL %.2f s (%.0f MiB/s); uploaded %.2f s: fetch/upload speed ratio %.2f; curl download alone %.2f s: ratio %.2f\n",
    s / 1048576, f, s / f / 1048576, p, p / f, d, d / f }'

# 2. Webhook latency.
rm -f "$work/www/big.ts"
.venv/bin/python Tests/Outbound/peer.py $secret "$work/records.jsonl" "$work/www" "$work/peer.port" 2>"$work/peer.log" &
peer=$!
for _ in $(seq 100); do [ -f "$work/peer.port" ] && break; sleep 0.1; done
hook="http://127.0.0.1:$(cat "$work/peer.port")/hooks/ok"
ffmpeg -v error -y -f lavfi -i sine=d=1 -c:a aac "$work/tone.m4a"
input=$(curl -sf -T "$work/tone.m4a" "http://127.0.0.1:$port/v1/uploads/" | jq -r .id)
: >"$work/jobs"
for _ in $(seq 30); do
  curl -sf -H 'Content-Type: application/json' -d "{\"input\": \"$input\", \"webhook\": {\"url\": \"$hook\"}}" \
    "http://127.0.0.1:$port/v1/jobs" | jq -r .id >>"$work/jobs"
done
for _ in $(seq 600); do [ "$(grep -c job.succeeded "$work/records.jsonl" 2>/dev/null || true)" -ge 30 ] && break; sleep 0.1; done
for id in $(cat "$work/jobs"); do curl -sf "http://127.0.0.1:$port/v1/jobs/$id"; echo; done >"$work/jobs.json"
.venv/bin/python - "$work/jobs.json" "$work/records.jsonl" <<'PY'
import json, sys
from datetime import datetime
jobs = {j["id"]: j for j in map(json.loads, filter(None, open(sys.argv[1]).read().splitlines()))}
records = [r for r in map(json.loads, open(sys.argv[2])) if r.get("type") == "job.succeeded"]
assert len(records) == 30 and all(r["verified"] for r in records), "30 verified deliveries"
lags = sorted((r["received"] - datetime.fromisoformat(jobs[r["job"]]["finishedAt"].replace("Z", "+00:00")).timestamp()) * 1000 for r in records)
print(f"webhooks: 30 jobs, every job.succeeded verified by standardwebhooks; job end to receipt p50 {lags[14]:.1f} ms, p95 {lags[28]:.1f} ms, max {lags[-1]:.1f} ms")
PY
echo "server peak RSS: $(awk '/VmHWM/ {print $2 / 1024 " MiB"}' /proc/$server/status)"
