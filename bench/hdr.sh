#!/usr/bin/env bash
# HDR benchmark: a 1080p30 10 s PQ source (10-bit HEVC made from testsrc2, MaxCLL 1000) tone-mapped to SDR
# BT.709 H.264 by `transcoderd transcode` (the default, `video.color.hdr: tonemap`) against the ffmpeg CLI running
# the same filters and encoder settings, and against the usual recipe with FFmpeg's tonemap filter, in alternation.
# Prints the wall-time ratios, peak RSS, PSNR of each against the SDR original (how close the round trip
# SDR → HDR → SDR comes back) and what tone mapping costs: the same transcode of the SDR original, and of the PQ
# source with `hdr: keep`. Then a phone's kind of source for a smaller output: 4K30 5 s HLG (10-bit HEVC) to 1080p,
# where the pictures are mapped at 1080p (scaled down in the first zscale), against `hdr: keep` and against the
# usual recipe (FFmpeg's tonemap filter at 4K, then scaled).
# Usage: bench/hdr.sh [ROUNDS]   (default 3; the median of each side is compared)
rounds=${1:-3}
source "$(dirname "$0")/common.sh"
sdr="$work/hdr-original-1080p30-10s.mp4"
pq="$work/hdr-pq-1080p30-10s.mp4"
if [ ! -f "$pq" ]; then
  echo "generating $pq" >&2
  ffmpeg -v error -y -f lavfi -i "testsrc2=s=1920x1080:r=30:d=10" -c:v libx264 -preset ultrafast -crf 10 \
    -pix_fmt yuv420p "$sdr"
  ffmpeg -v error -y -i "$sdr" -vf "zscale=tin=bt709:min=bt709:pin=bt709:rin=tv:t=smpte2084:m=bt2020nc:p=bt2020:r=tv:npl=203,format=yuv420p10le" \
    -c:v libx265 -preset ultrafast -x265-params "crf=12:colorprim=bt2020:transfer=smpte2084:colormatrix=bt2020nc:max-cll=1000,400:log-level=error" \
    -color_primaries bt2020 -color_trc smpte2084 -colorspace bt2020nc -tag:v hvc1 "$pq"
fi
video='"averageBitRate":4000000,"maxKeyFrameInterval":60,"profile":"high","preset":"veryfast"'
# ToneMapping.filters for a 1000 cd/m² peak (1000 / 203 = 4.9261 times reference white), written out again here.
curve=$(python3 -c '
j, p = 0.5, 1000 / 203
a = -j * j * (p - 1) / (j * j - 2 * j + p); b = (j * j - 2 * j * p + p) / (p - 1); k = (b * b + 2 * b * j + j * j) / (b - a)
print("st(0,pow(val/65535,1/78.84375));st(1,10000*pow(max(ld(0)-0.8359375,0)/(18.8515625-18.6875*ld(0)),1/0.1593017578125)/203.0);"
      f"st(2,min(1,if(lte(ld(1),0.5),ld(1),({k:.9g})*(ld(1)+({a:.9g}))/(ld(1)+({b:.9g})))));65535*pow(max(ld(2),0),1/2.4)")')
same="zscale=tin=16:pin=9:min=9:rin=0:t=smpte2084:p=bt709:npl=203.0,format=gbrp16le,lutrgb=r='$curve':g='$curve':b='$curve',zscale=tin=bt709:pin=bt709:t=bt709:p=bt709:m=bt709:r=tv:d=ordered,format=yuv420p"
# The usual recipe: FFmpeg's tonemap filter (the same Möbius curve, by the brightest channel) on 32-bit float RGB.
float="zscale=tin=16:pin=9:min=9:rin=0:t=linear:p=bt709:npl=203.0,format=gbrpf32le,tonemap=tonemap=mobius:param=0.5:desat=0:peak=4.9261,zscale=tin=linear:pin=bt709:t=bt709:m=bt709:r=tv:d=ordered,format=yuv420p"
x264=(-c:v libx264 -preset veryfast -b:v 4M -g 60 -profile:v high -color_primaries bt709 -color_trc bt709 -colorspace bt709)

for name in ours ffmpeg float sdr keep; do : >"$work/hdr-$name.runs"; done
for round in $(seq "$rounds"); do
  measure hdr-ffmpeg "$work/hdr-ffmpeg.mp4" ffmpeg -nostdin -y -i "$pq" -vf "$same" "${x264[@]}" "$work/hdr-ffmpeg.mp4" \
    >>"$work/hdr-ffmpeg.runs"
  measure hdr-float "$work/hdr-float.mp4" ffmpeg -nostdin -y -i "$pq" -vf "$float" "${x264[@]}" "$work/hdr-float.mp4" \
    >>"$work/hdr-float.runs"
  measure hdr-ours "$work/hdr-ours.mp4" "$bin" transcode "$pq" "$work/hdr-ours.mp4" --settings "{\"video\":{$video}}" \
    --progress none >>"$work/hdr-ours.runs"
  measure hdr-sdr "$work/hdr-sdr.mp4" "$bin" transcode "$sdr" "$work/hdr-sdr.mp4" --settings "{\"video\":{$video}}" \
    --progress none >>"$work/hdr-sdr.runs"
  measure hdr-keep "$work/hdr-keep.mp4" "$bin" transcode "$pq" "$work/hdr-keep.mp4" \
    --settings "{\"video\":{$video,\"color\":{\"hdr\":\"keep\"}}}" --progress none >>"$work/hdr-keep.runs"
  echo "round $round: ffmpeg $(tail -1 "$work/hdr-ffmpeg.runs")  ffmpeg tonemap filter $(tail -1 "$work/hdr-float.runs")  transcoderd $(tail -1 "$work/hdr-ours.runs")  SDR original $(tail -1 "$work/hdr-sdr.runs")  keep $(tail -1 "$work/hdr-keep.runs")  (s KiB cpu-s)" >&2
done
psnr() { ffmpeg -v info -nostdin -i "$1" -i "$sdr" -lavfi "[0:v][1:v]psnr" -f null - 2>&1 | sed -n 's/.*PSNR.* average:\([0-9.inf]*\).*/\1/p' | tail -1; }
col() { cut -d' ' -f"$1" "$work/hdr-$2.runs" | median; }
ours=$(col 1 ours); ffmpeg_time=$(col 1 ffmpeg); float_time=$(col 1 float); sdr_time=$(col 1 sdr); keep_time=$(col 1 keep)
echo "wall time   transcoderd ${ours}s  ffmpeg, same filters ${ffmpeg_time}s  ratio $(echo "scale=3; $ours / $ffmpeg_time" | bc -l)"
echo "            ffmpeg with its tonemap filter ${float_time}s  ratio $(echo "scale=3; $ours / $float_time" | bc -l)"
echo "peak RSS    transcoderd $(($(col 2 ours) / 1024)) MiB  ffmpeg $(($(col 2 ffmpeg) / 1024)) MiB"
echo "CPU cores   transcoderd $(echo "scale=2; $(col 3 ours) / $ours" | bc -l)  ffmpeg $(echo "scale=2; $(col 3 ffmpeg) / $ffmpeg_time" | bc -l)  (of $(nproc))"
echo "PSNR (dB) against the SDR original: transcoderd $(psnr "$work/hdr-ours.mp4")  ffmpeg $(psnr "$work/hdr-ffmpeg.mp4")  tonemap filter $(psnr "$work/hdr-float.mp4")  hdr keep $(psnr "$work/hdr-keep.mp4")  SDR original transcoded $(psnr "$work/hdr-sdr.mp4")"
echo "cost        tone-mapped ${ours}s  against hdr keep ${keep_time}s (ratio $(echo "scale=2; $ours / $keep_time" | bc -l))  and the SDR original ${sdr_time}s (ratio $(echo "scale=2; $ours / $sdr_time" | bc -l))"

hlg="$work/hdr-hlg-2160p30-5s.mp4"
if [ ! -f "$hlg" ]; then
  echo "generating $hlg" >&2
  ffmpeg -v error -y -f lavfi -i "testsrc2=s=3840x2160:r=30:d=5" -vf "format=yuv420p,zscale=tin=bt709:min=bt709:pin=bt709:rin=tv:t=arib-std-b67:m=bt2020nc:p=bt2020:r=tv:npl=203,format=yuv420p10le" \
    -c:v libx265 -preset ultrafast -x265-params "colorprim=bt2020:transfer=arib-std-b67:colormatrix=bt2020nc:log-level=error" \
    -color_primaries bt2020 -color_trc arib-std-b67 -colorspace bt2020nc -tag:v hvc1 "$hlg"
fi
small="$video,\"height\":1080"
float4k="zscale=tin=18:pin=9:min=9:rin=0:t=linear:p=bt709:npl=203.0,format=gbrpf32le,tonemap=tonemap=mobius:param=0.5:desat=0:peak=4.9261,zscale=tin=linear:pin=bt709:t=bt709:m=bt709:r=tv:d=ordered,format=yuv420p,scale=1920:1080"
for name in ours4k keep4k float4k; do : >"$work/hdr-$name.runs"; done
for round in $(seq "$rounds"); do
  measure hdr-float4k "$work/hdr-float4k.mp4" ffmpeg -nostdin -y -i "$hlg" -vf "$float4k" "${x264[@]}" "$work/hdr-float4k.mp4" \
    >>"$work/hdr-float4k.runs"
  measure hdr-ours4k "$work/hdr-ours4k.mp4" "$bin" transcode "$hlg" "$work/hdr-ours4k.mp4" --settings "{\"video\":{$small}}" \
    --progress none >>"$work/hdr-ours4k.runs"
  measure hdr-keep4k "$work/hdr-keep4k.mp4" "$bin" transcode "$hlg" "$work/hdr-keep4k.mp4" \
    --settings "{\"video\":{$small,\"color\":{\"hdr\":\"keep\"}}}" --progress none >>"$work/hdr-keep4k.runs"
  echo "round $round, 4K HLG to 1080p: transcoderd $(tail -1 "$work/hdr-ours4k.runs")  keep $(tail -1 "$work/hdr-keep4k.runs")  ffmpeg tonemap filter $(tail -1 "$work/hdr-float4k.runs")  (s KiB cpu-s)" >&2
done
ours4k=$(col 1 ours4k); keep4k=$(col 1 keep4k); float4k_time=$(col 1 float4k)
echo "4K HLG to 1080p  transcoderd ${ours4k}s  hdr keep ${keep4k}s (ratio $(echo "scale=2; $ours4k / $keep4k" | bc -l))  ffmpeg with its tonemap filter ${float4k_time}s (ratio $(echo "scale=3; $ours4k / $float4k_time" | bc -l))"
echo "                 peak RSS transcoderd $(($(col 2 ours4k) / 1024)) MiB  hdr keep $(($(col 2 keep4k) / 1024)) MiB"
