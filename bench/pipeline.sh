#!/usr/bin/env bash
# Pipeline benchmark: `transcoderd transcode` against the ffmpeg CLI with identical settings, in alternation,
# on a generated 1080p30 20 s clip. Prints the wall-time ratio, peak RSS of each and PSNR against the source; and
# the same transcode in a sandboxed job child (`transcoderd run-job`, as the server runs every job) against
# `transcode` in process: the child must not slow the transcode.
# Usage: bench/pipeline.sh [ROUNDS]   (default 3; the median of each side is compared)
rounds=${1:-3}
source "$(dirname "$0")/common.sh"
settings='{"video":{"averageBitRate":2000000,"maxKeyFrameInterval":60,"profile":"high","preset":"veryfast"},
 "audio":{"bitRate":128000,"sampleRate":44100,"channels":2},"container":"mp4"}'

: >"$work/ours.runs"; : >"$work/ffmpeg.runs"; : >"$work/child.runs"
# A job child writes a folder (output.mp4 inside), as the server's jobs do.
request="{\"kind\":\"transcode\",\"input\":\"$PWD/$source\",\"output\":\"$PWD/$work/child\",\"settings\":$(echo "$settings" | tr -d '\n')}"
run_child() { echo "$request" | "$bin" run-job | tail -1 | grep -q '"result"'; }
for round in $(seq "$rounds"); do
  measure ffmpeg "$work/ffmpeg.mp4" ffmpeg -nostdin -y -i "$source" -c:v libx264 -preset veryfast -b:v 2M -g 60 \
    -profile:v high -c:a aac -b:a 128k -ar 44100 -ac 2 -movflags +faststart "$work/ffmpeg.mp4" >>"$work/ffmpeg.runs"
  measure ours "$work/ours.mp4" "$bin" transcode "$source" "$work/ours.mp4" --settings "$settings" --progress none \
    >>"$work/ours.runs"
  measure child "$work/child" bash -c "$(declare -p request bin); $(declare -f run_child); run_child" >>"$work/child.runs"
  echo "round $round: ffmpeg $(tail -1 "$work/ffmpeg.runs")  transcoderd $(tail -1 "$work/ours.runs")  in a child $(tail -1 "$work/child.runs")  (s KiB cpu-s)" >&2
done
psnr() { ffmpeg -v info -nostdin -i "$1" -i "$source" -lavfi "[0:v][1:v]psnr" -f null - 2>&1 | sed -n 's/.*PSNR.* average:\([0-9.inf]*\).*/\1/p' | tail -1; }
ours_time=$(cut -d' ' -f1 "$work/ours.runs" | median); ffmpeg_time=$(cut -d' ' -f1 "$work/ffmpeg.runs" | median)
ours_rss=$(cut -d' ' -f2 "$work/ours.runs" | median); ffmpeg_rss=$(cut -d' ' -f2 "$work/ffmpeg.runs" | median)
ours_psnr=$(psnr "$work/ours.mp4"); ffmpeg_psnr=$(psnr "$work/ffmpeg.mp4")
echo "wall time   transcoderd ${ours_time}s  ffmpeg ${ffmpeg_time}s  ratio $(echo "scale=3; $ours_time / $ffmpeg_time" | bc -l)"
echo "peak RSS    transcoderd $((ours_rss / 1024)) MiB  ffmpeg $((ffmpeg_rss / 1024)) MiB  ratio $(echo "scale=3; $ours_rss / $ffmpeg_rss" | bc -l)"
ours_cpu=$(cut -d' ' -f3 "$work/ours.runs" | median); ffmpeg_cpu=$(cut -d' ' -f3 "$work/ffmpeg.runs" | median)
echo "CPU cores   transcoderd $(echo "scale=2; $ours_cpu / $ours_time" | bc -l)  ffmpeg $(echo "scale=2; $ffmpeg_cpu / $ffmpeg_time" | bc -l)  (of $(nproc))"
echo "PSNR (dB)   transcoderd ${ours_psnr}  ffmpeg ${ffmpeg_psnr}  difference $(echo "scale=3; $ours_psnr - $ffmpeg_psnr" | bc -l)"
child_time=$(cut -d' ' -f1 "$work/child.runs" | median)
echo "job child   run-job (sandboxed) ${child_time}s  transcode in process ${ours_time}s  ratio $(echo "scale=3; $child_time / $ours_time" | bc -l)  (target about 1)"
ffprobe -v error -show_entries format=bit_rate:stream=codec_name,bit_rate -of compact "$work/ours.mp4" "$work/ffmpeg.mp4" 2>/dev/null | sed 's/^/  /' || true
