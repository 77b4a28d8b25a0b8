#!/usr/bin/env bash
# Cluster benchmark on a real PostgreSQL (Debian's, started here as the postgres user on a socket in bench/out):
#  1. enqueue-to-start latency on an idle cluster, p50/p99 (target p99 < 100 ms), and the throughput of 1,000
#     trivial jobs with 1, 2 and 4 worker processes (jobs-bench cluster: the real queue and store, a runner that
#     does nothing);
#  2. takeover after SIGKILL with the default lease (20 s): an API node and two `transcoderd work` nodes on one data
#     directory, a real transcode, its worker killed mid-job; the seconds from the kill to the second attempt's start
#     (target < 30 s) and that attempt's result checked with ffprobe.
# The single-node SQLite figures are bench/jobs.sh's. Usage: bench/cluster.sh [TRIVIAL_JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/build-release jobs-bench
scripts/build-release transcoderd
binary=$PWD/.build/release/transcoderd
out=$PWD/bench/out/cluster
pg=/usr/lib/postgresql/15/bin
rm -rf "$out" && mkdir -p "$out" && chown postgres:postgres "$out"
as_postgres() { runuser -u postgres -- "$@"; }
as_postgres "$pg/initdb" -D "$out/pg" -A trust -U postgres --no-sync -E UTF8 >/dev/null
as_postgres "$pg/pg_ctl" -D "$out/pg" -o "-c listen_addresses='' -k $out -c max_connections=200" -l "$out/pg.log" -w start >/dev/null
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  as_postgres "$pg/pg_ctl" -D "$out/pg" -m immediate stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
psql_() { psql -X -q -t -A -h "$out" -U postgres "$@"; }
psql_ -d postgres -c "CREATE DATABASE queue" -c "CREATE DATABASE takeover"

echo "== queue on PostgreSQL (jobs-bench cluster)"
.build/release/jobs-bench cluster "postgresql:///queue?host=$out&user=postgres" "${1:-1000}"

echo "== takeover after SIGKILL, default lease"
uri="postgresql:///takeover?host=$out&user=postgres"
data=$out/data
ffmpeg -v error -y -f lavfi -i testsrc2=s=1280x720:r=30:d=30 -f lavfi -i sine=d=30 -c:v libx264 -preset ultrafast \
  -pix_fmt yuv420p -c:a aac "$out/in.mp4"
"$binary" serve --data "$data" --store "$uri" --workers 0 --port 18590 2>"$out/api.log" & pids+=($!)
for n in 1 2; do "$binary" work --data "$data" --store "$uri" 2>"$out/worker-$n.log" & pids+=($!); done
for _ in $(seq 100); do curl -sf http://127.0.0.1:18590/readyz >/dev/null && break; sleep 0.1; done
upload=$(curl -sf -T "$out/in.mp4" http://127.0.0.1:18590/v1/uploads/in.mp4 | jq -r .id)
job=$(curl -sf -H 'Content-Type: application/json' -d "{\"input\":\"$upload\",\"settings\":{\"video\":{\"preset\":\"medium\"}}}" \
  http://127.0.0.1:18590/v1/jobs | jq -r .id)
for _ in $(seq 600); do
  progress=$(psql_ -d takeover -c "SELECT progress_time FROM jobs WHERE id = '$job' AND state = 'running'")
  [ -n "$progress" ] && awk "BEGIN {exit !($progress > 1)}" && break
  sleep 0.1
done
holder=$(psql_ -d takeover -c "SELECT lease FROM jobs WHERE id = '$job'" | sed -E 's|^[^/]*/([0-9]+)-.*|\1|')
killed=$(date +%s.%N)
kill -9 "$holder"
for _ in $(seq 900); do
  [ "$(psql_ -d takeover -c "SELECT attempts FROM jobs WHERE id = '$job' AND state = 'running'")" = 2 ] && break
  sleep 0.1
done
restarted=$(psql_ -d takeover -c "SELECT started_at FROM jobs WHERE id = '$job'")
echo "killed worker $holder mid-job; the job started again on the other node $(awk "BEGIN {printf \"%.1f\", $restarted - $killed}") s later (lease 20 s; target < 30 s)"
for _ in $(seq 1200); do
  [ "$(psql_ -d takeover -c "SELECT state FROM jobs WHERE id = '$job'")" = succeeded ] && break
  sleep 0.25
done
output=$(psql_ -d takeover -c "SELECT output_path FROM jobs WHERE id = '$job'")
echo "result: $(psql_ -d takeover -c "SELECT state || ', attempts ' || attempts || ', lease token ' || lease_token FROM jobs WHERE id = '$job'"), $output:" \
  "$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$data/$output") s"
