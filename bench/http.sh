#!/usr/bin/env bash
# HTTP benchmark against nginx in the same run (both from Debian's packages):
#  1. polling: wrk -t2 -c50 -d10s on GET /v1/jobs/{id}, and on the same JSON served by nginx;
#  2. upload: 1 GiB with curl -T to us and to an nginx WebDAV PUT location (both write the body to disk);
#  3. end to end: upload + transcode + download of the 1080p30 20 s clip, against the ffmpeg CLI alone.
# Usage: bench/http.sh [UPLOAD_MIB]   (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
mib=${1:-1024}
scripts/deps
for tool in wrk nginx; do
  command -v $tool >/dev/null || { apt-get update -qq; apt-get install -y -qq wrk nginx >/dev/null; }
done
swift build -c release --product transcoderd >&2
bin=$PWD/.build/release/transcoderd
work=$PWD/bench/out/http
rm -rf "$work"; mkdir -p "$work/nginx/www" "$work/nginx/dav" "$work/nginx/tmp"
ours_port=18481; nginx_port=18482

cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  [ -f "$work/nginx/nginx.pid" ] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT

"$bin" serve --data "$work/data" --port $ours_port --log-format text 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$ours_port/healthz" >/dev/null && break; sleep 0.1; done

cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/tmp;
  server {
    listen 127.0.0.1:$nginx_port;
    location = /job.json { root $work/nginx/www; default_type application/json; }
    location /upload/ { root $work/nginx/dav; dav_methods PUT; client_max_body_size 0; create_full_put_path on; }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf"

# 1. Polling the same job JSON.
clip="$work/clip.mp4"
ffmpeg -v error -y -f lavfi -i testsrc2=s=320x240:d=1 -f lavfi -i sine=d=1 -c:v libx264 -c:a aac "$clip"
job=$(curl -sf -F "file=@$clip" "http://127.0.0.1:$ours_port/v1/jobs" | jq -r .id)
until [ "$(curl -sf "http://127.0.0.1:$ours_port/v1/jobs/$job" | jq -r .state)" = succeeded ]; do sleep 0.2; done
curl -sf "http://127.0.0.1:$ours_port/v1/jobs/$job" >"$work/nginx/www/job.json"
rps() { wrk -t2 -c50 -d10s "$1" | awk '/Requests\/sec/ {print $2}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Three alternating rounds each; the machine's noise is large, so medians are compared.
: >"$work/ours.rps"; : >"$work/nginx.rps"
for _ in 1 2 3; do
  rps "http://127.0.0.1:$ours_port/v1/jobs/$job" >>"$work/ours.rps"
  rps "http://127.0.0.1:$nginx_port/job.json" >>"$work/nginx.rps"
done
ours_rps=$(median <"$work/ours.rps"); nginx_rps=$(median <"$work/nginx.rps")
echo "polling     transcoderd ${ours_rps} req/s  nginx ${nginx_rps} req/s  ratio $(echo "scale=3; $ours_rps / $nginx_rps" | bc -l)  (target >= 0.5)"

# 2. Upload of random bytes (so nothing compresses or skips): we stream to disk + SHA-256, fsync, then probe
#    (422: not media). nginx's WebDAV PUT writes the file without fsync. Three alternating rounds, medians.
big="$work/big.bin"
head -c $((mib * 1024 * 1024)) /dev/urandom >"$big"
rss() { awk '/VmHWM/ {print $2}' "/proc/$server_pid/status"; }
before=$(rss)
: >"$work/ours.up"; : >"$work/nginx.up"
# Each timed upload starts with no dirty pages (sync) and writes a new file, so neither run pays for the other's
# writeback: on two cores the kernel's flusher competes for CPU with whichever upload runs while it works.
for _ in 1 2 3; do
  sync; sleep 1
  curl -s -o /dev/null -w '%{speed_upload}\n' -T "$big" "http://127.0.0.1:$ours_port/v1/uploads/" >>"$work/ours.up"
  rm -f "$work/nginx/dav/upload/big.bin"; sync; sleep 1
  curl -s -o /dev/null -w '%{speed_upload}\n' -T "$big" "http://127.0.0.1:$nginx_port/upload/big.bin" >>"$work/nginx.up"
done
after=$(rss)
ours_speed=$(median <"$work/ours.up"); nginx_speed=$(median <"$work/nginx.up")
echo "upload      transcoderd $((${ours_speed%.*} / 1048576)) MiB/s  nginx $((${nginx_speed%.*} / 1048576)) MiB/s  ratio $(echo "scale=3; $ours_speed / $nginx_speed" | bc -l)  (target >= 0.7)"
echo "upload RSS  peak before $((before / 1024)) MiB, after $((after / 1024)) MiB: growth $(((after - before) / 1024)) MiB  (target < 64)"
rm -f "$big" "$work/nginx/dav/upload/big.bin"

# 3. End to end on the pipeline bench's clip.
source=bench/out/source-1080p30-20s.mp4
if [ ! -f "$source" ]; then
  ffmpeg -v error -y -f lavfi -i "testsrc2=s=1920x1080:r=30:d=20" -f lavfi -i "sine=f=440:r=48000:d=20" -ac 2 \
    -c:v libx264 -preset ultrafast -crf 12 -pix_fmt yuv420p -c:a aac -b:a 192k -movflags +faststart "$source"
fi
settings='{"video":{"averageBitRate":2000000,"maxKeyFrameInterval":60,"profile":"high","preset":"veryfast"},"audio":{"bitRate":128000,"sampleRate":44100,"channels":2}}'
start=$(date +%s.%N)
job=$(curl -sf -F "file=@$source" -F "settings=$settings" "http://127.0.0.1:$ours_port/v1/jobs" | jq -r .id)
curl -sfN "http://127.0.0.1:$ours_port/v1/jobs/$job/events" >/dev/null
curl -sf -o "$work/e2e.mp4" "http://127.0.0.1:$ours_port/v1/jobs/$job/output"
ours_e2e=$(echo "$(date +%s.%N) - $start" | bc -l)
start=$(date +%s.%N)
ffmpeg -v error -nostdin -y -i "$source" -c:v libx264 -preset veryfast -b:v 2M -g 60 -profile:v high -c:a aac -b:a 128k \
  -ar 44100 -ac 2 -movflags +faststart "$work/ffmpeg.mp4"
ffmpeg_e2e=$(echo "$(date +%s.%N) - $start" | bc -l)
printf 'end to end  transcoderd %.2f s (upload + transcode + download)  ffmpeg CLI %.2f s  ratio %.3f  (target <= 1.10)\n' \
  "$ours_e2e" "$ffmpeg_e2e" "$(echo "$ours_e2e / $ffmpeg_e2e" | bc -l)"
