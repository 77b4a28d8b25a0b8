#!/usr/bin/env bash
# HTTP benchmark against nginx in the same run (both from Debian's packages):
#  1. polling: wrk -t2 -c50 -d10s on GET /v1/jobs/{id}, and on the same JSON served by nginx;
#  2. upload: 1 GiB of real media (an MPEG-TS) with curl -T to us (stored and probed: 201) and to an nginx WebDAV PUT
#     location, both writing to a tmpfs (then on disk, where our answer waits for an fsync);
#  3. end to end: upload + transcode + download of the 1080p30 20 s clip, against the ffmpeg CLI alone (3 rounds).
# Usage: bench/http.sh [UPLOAD_MIB]   (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
mib=${1:-1024}
scripts/deps
for tool in wrk nginx; do
  command -v $tool >/dev/null || { apt-get update -qq; apt-get install -y -qq wrk nginx >/dev/null; }
done
scripts/build-release transcoderd
bin=$PWD/.build/release/transcoderd
work=$PWD/bench/out/http
rm -rf "$work"; mkdir -p "$work/nginx/www" "$work/nginx/dav" "$work/nginx/tmp"
# The upload target figure runs on a tmpfs (see 2.): one more instance of ours and one more nginx server write there.
shm=$(mktemp -d -p /dev/shm transcoderd-bench.XXXXXX)
mkdir -p "$shm/dav" "$shm/tmp"
ours_port=18481; nginx_port=18482; ours_shm_port=18483; nginx_shm_port=18484

cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  [ -n "${shm_pid:-}" ] && kill "$shm_pid" 2>/dev/null || true
  rm -rf "$shm"
  [ -f "$work/nginx/nginx.pid" ] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT

"$bin" serve --data "$work/data" --port $ours_port --log-format text 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$ours_port/healthz" >/dev/null && break; sleep 0.1; done

cat >"$work/nginx/nginx.conf" <<CONF
# Workers run as root here: as the default user nobody they could not create the PUT files in our folders, and nginx
# answered 500 after reading each body (the figure looked plausible while every upload failed).
user root;
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
  server {
    listen 127.0.0.1:$nginx_shm_port;
    client_body_temp_path $shm/tmp;
    location /upload/ { root $shm/dav; dav_methods PUT; client_max_body_size 0; create_full_put_path on; }
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
# rps URL: requests per second; a non-2xx answer or a socket error fails the bench instead of counting as throughput.
rps() {
  local out; out=$(wrk -t2 -c50 -d10s "$1")
  if grep -qE 'Non-2xx or 3xx responses|Socket errors' <<<"$out"; then
    echo "wrk against $1 saw failures:" >&2; echo "$out" >&2; return 1
  fi
  awk '/Requests\/sec/ {print $2}' <<<"$out"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Three alternating rounds each; the machine's noise is large, so medians are compared.
: >"$work/ours.rps"; : >"$work/nginx.rps"
for _ in 1 2 3; do
  rps "http://127.0.0.1:$ours_port/v1/jobs/$job" >>"$work/ours.rps"
  rps "http://127.0.0.1:$nginx_port/job.json" >>"$work/nginx.rps"
done
ours_rps=$(median <"$work/ours.rps"); nginx_rps=$(median <"$work/nginx.rps")
echo "polling     transcoderd ${ours_rps} req/s  nginx ${nginx_rps} req/s  ratio $(echo "scale=3; $ours_rps / $nginx_rps" | bc -l)  (target >= 0.5)"

# 2. Upload of real media, an MPEG-TS (so our side takes its success path: stream to disk + SHA-256, probe, fsync,
#    rename, record, 201; each stored upload is deleted after its round), against nginx's WebDAV PUT, which writes
#    the file without fsync. Both servers get the same treatment:
#    - the target figure runs with the source file, our data directory and nginx's dav and temp folders on a tmpfs
#      (/dev/shm), through a second instance of ours, so the kernel's writeback of the previous gigabyte does not
#      take CPU from whichever upload runs next (on two cores it swung nginx alone between 277 and 1012 MiB/s);
#    - one warm-up upload each, untimed (the first upload into fresh memory ran at a third of the speed of the next);
#    - seven rounds, the order alternating, and the ratio taken per round (neighbours in time share the machine's
#      state) then its median. The on-disk figure, fsync included, is printed for information.
rss() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
nginx_ticks() { local t=0 p; for p in $(pgrep -f "nginx: worker process"); do t=$((t + $(cpu_ticks "$p"))); done; echo $t; }
# put SOURCE URL EXPECTED_STATUS...: prints the upload speed in bytes/s; fails unless the answer is one expected.
put() {
  local source=$1 url=$2 answer; shift 2
  answer=$(curl -s -o "$work/put.json" -w '%{http_code} %{speed_upload}' -T "$source" "$url")
  for status in "$@"; do [ "${answer%% *}" = "$status" ] && { echo "${answer#* }"; return; }; done
  echo "upload to $url answered ${answer%% *}, expected $*: $(head -c 300 "$work/put.json")" >&2; return 1
}
# put_ours SOURCE URL: 201 with the whole file's size, then the stored upload is deleted (a tmpfs holds it in memory).
put_ours() {
  local speed; speed=$(put "$1" "$2" 201)
  [ "$(jq -r .size "$work/put.json")" = "$(stat -c %s "$1")" ] || { echo "stored size differs: $(cat "$work/put.json")" >&2; return 1; }
  curl -sf -X DELETE "${2%/v1/uploads/*}/v1/uploads/$(jq -r .id "$work/put.json")" >/dev/null
  echo "$speed"
}
put_nginx() { put "$1" "$2" 201 204; }
# upload_rounds ROUNDS OUT SOURCE OURS_URL NGINX_URL NGINX_FILE: writes "ours nginx ratio" lines to OUT.
upload_rounds() {
  local round ours nginx out=$2
  : >"$out"
  for round in $(seq "$1"); do
    sync; sleep 1
    if [ $((round % 2)) = 1 ]; then
      ours=$(put_ours "$3" "$4"); rm -f "$6"; sync; sleep 1; nginx=$(put_nginx "$3" "$5")
    else
      nginx=$(put_nginx "$3" "$5"); rm -f "$6"; sync; sleep 1; ours=$(put_ours "$3" "$4")
    fi
    rm -f "$6"
    echo "$ours $nginx $(echo "scale=3; $ours / $nginx" | bc -l)" >>"$out"
  done
}
# column_median FILE COLUMN: the median of one column of a rounds file.
column_median() { awk -v c="$2" '{print $c}' "$1" | median; }
mibs() { echo $((${1%.*} / 1048576)); }

"$bin" serve --data "$shm/data" --port $ours_shm_port --log-format text 2>"$work/server-shm.log" &
shm_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$ours_shm_port/healthz" >/dev/null && break; sleep 0.1; done

big="$shm/big.ts"
# A high-bit-rate clip looped by stream copy up to the size asked for: valid media from the first byte to the last.
ffmpeg -v error -y -f lavfi -i "testsrc2=s=1920x1080:r=30:d=4,noise=alls=40:allf=t" -f lavfi -i "sine=d=4" \
  -c:v libx264 -preset ultrafast -b:v 60M -c:a aac -f mpegts "$work/loop.ts"
ffmpeg -v error -y -stream_loop -1 -i "$work/loop.ts" -c copy -fs $((mib * 1024 * 1024)) -f mpegts "$big"
ours_up="http://127.0.0.1:$ours_shm_port/v1/uploads/big.ts"; nginx_up="http://127.0.0.1:$nginx_shm_port/upload/big.ts"
before=$(rss "$shm_pid")
put_ours "$big" "$ours_up" >/dev/null; put_nginx "$big" "$nginx_up" >/dev/null; rm -f "$shm/dav/upload/big.ts"
ours_cpu=$(cpu_ticks "$shm_pid"); nginx_cpu=$(nginx_ticks)
upload_rounds 7 "$work/up-tmpfs.rounds" "$big" "$ours_up" "$nginx_up" "$shm/dav/upload/big.ts"
hz=$(getconf CLK_TCK)
ours_cpu=$(echo "scale=2; ($(cpu_ticks "$shm_pid") - $ours_cpu) / $hz / 7 / ($mib / 1024)" | bc -l)
nginx_cpu=$(echo "scale=2; ($(nginx_ticks) - $nginx_cpu) / $hz / 7 / ($mib / 1024)" | bc -l)
after=$(rss "$shm_pid")
up="$work/up-tmpfs.rounds"
echo "upload      transcoderd $(mibs "$(column_median "$up" 1)") MiB/s  nginx $(mibs "$(column_median "$up" 2)") MiB/s  ratio $(column_median "$up" 3)  (median of 7 per-round ratios, tmpfs; target >= 0.7)"
echo "upload CPU  transcoderd ${ours_cpu} s/GiB (write + SHA-256 + probe + delete)  nginx ${nginx_cpu} s/GiB"
echo "upload RSS  peak before $((before / 1024)) MiB, after $((after / 1024)) MiB: growth $(((after - before) / 1024)) MiB  (target < 64)"

# The same on disk (our fsync included), through the first instance and nginx's first location: for information.
disk_big="$work/big.ts"
cp "$big" "$disk_big"; rm -f "$big"
upload_rounds 3 "$work/up-disk.rounds" "$disk_big" "http://127.0.0.1:$ours_port/v1/uploads/big.ts" "http://127.0.0.1:$nginx_port/upload/big.ts" \
  "$work/nginx/dav/upload/big.ts"
up="$work/up-disk.rounds"
echo "upload disk transcoderd $(mibs "$(column_median "$up" 1)") MiB/s  nginx $(mibs "$(column_median "$up" 2)") MiB/s  ratio $(column_median "$up" 3)  (median of 3, for information)"
rm -f "$disk_big"

# 3. End to end on the pipeline bench's clip.
source=bench/out/source-1080p30-20s.mp4
if [ ! -f "$source" ]; then
  ffmpeg -v error -y -f lavfi -i "testsrc2=s=1920x1080:r=30:d=20" -f lavfi -i "sine=f=440:r=48000:d=20" -ac 2 \
    -c:v libx264 -preset ultrafast -crf 12 -pix_fmt yuv420p -c:a aac -b:a 192k -movflags +faststart "$source"
fi
settings='{"video":{"averageBitRate":2000000,"maxKeyFrameInterval":60,"profile":"high","preset":"veryfast"},"audio":{"bitRate":128000,"sampleRate":44100,"channels":2}}'
now() { date +%s.%N; }
# Three rounds, the order alternating, the ratio per round and its median (one run of each swung 1.00-1.18).
: >"$work/e2e.rounds"
for round in 1 2 3; do
  for side in $([ $round = 2 ] && echo "ffmpeg ours" || echo "ours ffmpeg"); do
    start=$(now)
    if [ $side = ours ]; then
      job=$(curl -sf -F "file=@$source" -F "settings=$settings" "http://127.0.0.1:$ours_port/v1/jobs" | jq -r .id)
      uploaded=$(now)
      curl -sfN "http://127.0.0.1:$ours_port/v1/jobs/$job/events" >/dev/null
      curl -sf -o "$work/e2e.mp4" "http://127.0.0.1:$ours_port/v1/jobs/$job/output"
      [ "$(ffprobe -v error -select_streams v -show_entries stream=codec_name -of csv=p=0 "$work/e2e.mp4")" = h264 ]
      ours=$(echo "$(now) - $start" | bc -l); ours_upload=$(echo "$uploaded - $start" | bc -l)
    else
      ffmpeg -v error -nostdin -y -i "$source" -c:v libx264 -preset veryfast -b:v 2M -g 60 -profile:v high -c:a aac \
        -b:a 128k -ar 44100 -ac 2 -movflags +faststart "$work/ffmpeg.mp4"
      ffmpeg=$(echo "$(now) - $start" | bc -l)
    fi
  done
  printf '%.2f %.2f %.3f %.2f\n' "$ours" "$ffmpeg" "$(echo "$ours / $ffmpeg" | bc -l)" "$ours_upload" >>"$work/e2e.rounds"
done
e2e="$work/e2e.rounds"
echo "end to end  transcoderd $(column_median "$e2e" 1) s (upload $(column_median "$e2e" 4) s + transcode + download)  ffmpeg CLI $(column_median "$e2e" 2) s  ratio $(column_median "$e2e" 3)  (median of 3 per-round ratios; target <= 1.10)"
