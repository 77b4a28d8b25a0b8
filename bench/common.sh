# Shared by the transcode benches (sourced, not run): installs and builds what is missing, makes the generated
# 1080p30 20 s clip both benches read (once; bench/out keeps it), and the measuring helpers.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
scripts/deps
scripts/build-release transcoderd
bin=.build/release/transcoderd
work=bench/out
mkdir -p "$work"
source="$work/source-1080p30-20s.mp4"
if [ ! -f "$source" ]; then
  echo "generating $source" >&2
  ffmpeg -v error -y -f lavfi -i "testsrc2=s=1920x1080:r=30:d=20" -f lavfi -i "sine=f=440:r=48000:d=20" -ac 2 \
    -c:v libx264 -preset ultrafast -crf 12 -pix_fmt yuv420p -c:a aac -b:a 192k -movflags +faststart "$source"
fi

measure() { # name, output, command...: removes output, runs the command, prints "seconds kilobytes cpu-seconds"
  local name=$1 output=$2; shift 2
  rm -rf "$output"
  /usr/bin/time -f "%e %M %U %S" -o "$work/$name.time" "$@" >/dev/null 2>"$work/$name.log" || { cat "$work/$name.log" >&2; exit 1; }
  awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' "$work/$name.time"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
