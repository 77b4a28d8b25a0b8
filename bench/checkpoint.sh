#!/usr/bin/env bash
# Resume benchmark: a generated 1080p30 clip (60 s, tone, a key frame every 2 s as cameras write) transcoded at veryfast by `transcoderd transcode`, three
# ways in alternating rounds (medians):
#   plain        no checkpoint (the path before checkpoints);
#   checkpointed --checkpoint, uninterrupted: the cost of checkpointing (target: at most 3 % over plain);
#   resume       --checkpoint, SIGKILLed once progress passes 70 %, then run again: the time from the restart to
#                success, as a fraction of a full checkpointed run (target: at most 0.35; starting over costs 1.0).
# Usage: bench/checkpoint.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/build-release transcoderd
rounds=${1:-3}; seconds=${2:-60}
work=$PWD/bench/out/checkpoint
rm -rf "$work"; mkdir -p "$work"
bin=.build/release/transcoderd
settings='{"video": {"preset": "veryfast"}}'
ffmpeg -v error -y -f lavfi -i "testsrc2=s=1920x1080:r=30:d=$seconds" -f lavfi -i "sine=frequency=440:sample_rate=48000:d=$seconds" \
  -c:v libx264 -preset ultrafast -crf 18 -g 60 -c:a aac -b:a 192k "$work/source.mp4"
now() { date +%s.%N; }
plain() {
  local start; start=$(now)
  "$bin" transcode "$work/source.mp4" "$work/plain.mp4" --settings "$settings" --progress none >/dev/null
  awk "BEGIN {print $(now) - $start}"
}
checkpointed() {
  local start; start=$(now)
  "$bin" transcode "$work/source.mp4" "$work/checkpointed.mp4" --settings "$settings" --checkpoint "$work/cp-full" --progress none >/dev/null
  awk "BEGIN {print $(now) - $start}"
}
resume() {
  local pid start fraction=0
  rm -rf "$work/cp"
  "$bin" transcode "$work/source.mp4" "$work/resumed.mp4" --settings "$settings" --checkpoint "$work/cp" --progress json \
    >"$work/progress.jsonl" 2>/dev/null &
  pid=$!
  while awk "BEGIN {exit !($fraction < 0.7)}"; do
    sleep 0.05
    fraction=$(tail -n 1 "$work/progress.jsonl" | jq -r '.fraction // 0' 2>/dev/null || true)
    [[ $fraction =~ ^[0-9.]+$ ]] || fraction=0
    kill -0 $pid 2>/dev/null || { echo "the run ended before 70 %" >&2; exit 1; }
  done
  kill -9 $pid; wait $pid 2>/dev/null || true
  start=$(now)
  "$bin" transcode "$work/source.mp4" "$work/resumed.mp4" --settings "$settings" --checkpoint "$work/cp" --progress none \
    >"$work/resumed.json"
  awk "BEGIN {print $(now) - $start}"
  jq -e '.resumedFrom > 0' "$work/resumed.json" >/dev/null || { echo "the second run did not resume" >&2; exit 1; }
}
checkpointed >/dev/null # warm-up
: >"$work/rounds"
for round in $(seq "$rounds"); do
  p=$(plain); c=$(checkpointed); r=$(resume)
  echo "$p $c $r" >>"$work/rounds"
  echo "round $round: plain ${p}s, checkpointed ${c}s, restart to success ${r}s (resumed from $(jq .resumedFrom "$work/resumed.json") s)"
done
ffmpeg -v error -xerror -i "$work/resumed.mp4" -f null - || { echo "the resumed output does not decode" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
p=$(cut -d' ' -f1 "$work/rounds" | median); c=$(cut -d' ' -f2 "$work/rounds" | median); r=$(cut -d' ' -f3 "$work/rounds" | median)
awk -v p="$p" -v c="$c" -v r="$r" 'BEGIN {
  printf "medians: plain %.2f s, checkpointed %.2f s, restart after a kill at 70 %% %.2f s\n", p, c, r
  printf "checkpointing cost: %+.1f %% (target <= 3 %%)\n", (c / p - 1) * 100
  printf "restart to success / full run: %.2f (target <= 0.35; starting over: 1.0)\n", r / c
}' | tee "$work/result"
