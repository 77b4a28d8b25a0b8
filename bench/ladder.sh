#!/usr/bin/env bash
# Ladder benchmark: a 4-rung HLS ladder (1080p/720p/480p/360p + AAC, veryfast, key frames every 2 s, 6 s segments)
# from the generated 1080p30 20 s clip, made by `transcoderd transcode` (one decode feeding four encoder threads)
# against the ffmpeg CLI doing the same in one command (split + -var_stream_map + its hls muxer, fMP4 segments) and
# against four separate ffmpeg runs, one per rung. Alternating rounds, medians. Also the peak RSS of our ladder
# against our single 1080p MP4 transcode of the same clip (target: under 1.5x).
# Usage: bench/ladder.sh [ROUNDS]   (default 1)
rounds=${1:-1}
source "$(dirname "$0")/common.sh"
heights=(1080 720 480 360)
rates=(5000000 3000000 1200000 600000)
renditions=""
for i in 0 1 2 3; do
  renditions+="${renditions:+,}{\"video\":{\"height\":${heights[$i]},\"averageBitRate\":${rates[$i]}}}"
done
ladder="{\"container\":\"hls\",\"segmentDuration\":6,\"video\":{\"preset\":\"veryfast\",\"profile\":\"high\",\"maxKeyFrameInterval\":60},
 \"renditions\":[$renditions],\"audio\":{\"bitRate\":128000,\"sampleRate\":44100,\"channels\":2}}"
single='{"video":{"averageBitRate":5000000,"maxKeyFrameInterval":60,"profile":"high","preset":"veryfast"},
 "audio":{"bitRate":128000,"sampleRate":44100,"channels":2},"container":"mp4"}'
x264=(-preset veryfast -profile:v high -g 60 -keyint_min 60 -sc_threshold 0 -flags +cgop)

ffmpeg_ladder() { # one command: split into four scalers and encoders, one audio encode, the hls muxer
  local out=$1
  mkdir -p "$out"
  ffmpeg -nostdin -y -i "$source" -filter_complex \
    "[0:v]split=4[a][b][c][d];[a]scale=-2:1080[v0];[b]scale=-2:720[v1];[c]scale=-2:480[v2];[d]scale=-2:360[v3]" \
    -map "[v0]" -map "[v1]" -map "[v2]" -map "[v3]" -map 0:a -c:v libx264 "${x264[@]}" \
    -b:v:0 5M -b:v:1 3M -b:v:2 1200k -b:v:3 600k -c:a aac -b:a 128k -ar 44100 -ac 2 \
    -f hls -hls_time 6 -hls_playlist_type vod -hls_segment_type fmp4 \
    -var_stream_map "v:0,agroup:aud v:1,agroup:aud v:2,agroup:aud v:3,agroup:aud a:0,agroup:aud" \
    -master_pl_name master.m3u8 -hls_segment_filename "$out/%v/segment_%05d.m4s" "$out/%v/index.m3u8"
}
ffmpeg_separately() { # four commands, one rung (with its audio) each
  local out=$1 i
  for i in 0 1 2 3; do
    mkdir -p "$out/$i"
    ffmpeg -nostdin -y -i "$source" -vf "scale=-2:${heights[$i]}" -c:v libx264 "${x264[@]}" -b:v "${rates[$i]}" \
      -c:a aac -b:a 128k -ar 44100 -ac 2 -f hls -hls_time 6 -hls_playlist_type vod -hls_segment_type fmp4 \
      -hls_segment_filename "$out/$i/segment_%05d.m4s" "$out/$i/index.m3u8"
  done
}

for name in ours single ffmpeg separate; do : >"$work/ladder-$name.runs"; done
for round in $(seq "$rounds"); do
  measure ladder-ffmpeg "$work/ladder-ffmpeg" bash -c "$(declare -p source x264); $(declare -f ffmpeg_ladder); ffmpeg_ladder $work/ladder-ffmpeg" \
    >>"$work/ladder-ffmpeg.runs"
  measure ladder-ours "$work/ladder-ours" "$bin" transcode "$source" "$work/ladder-ours" --settings "$ladder" --progress none \
    >>"$work/ladder-ours.runs"
  measure ladder-separate "$work/ladder-separate" bash -c "$(declare -p source x264 heights rates); $(declare -f ffmpeg_separately); ffmpeg_separately $work/ladder-separate" \
    >>"$work/ladder-separate.runs"
  measure ladder-single "$work/ladder-single.mp4" "$bin" transcode "$source" "$work/ladder-single.mp4" --settings "$single" --progress none \
    >>"$work/ladder-single.runs"
  echo "round $round: ours $(tail -1 "$work/ladder-ours.runs")  ffmpeg one command $(tail -1 "$work/ladder-ffmpeg.runs")  ffmpeg x4 $(tail -1 "$work/ladder-separate.runs")  our single MP4 $(tail -1 "$work/ladder-single.runs")  (s KiB cpu-s)" >&2
done
column() { cut -d' ' -f"$2" "$work/ladder-$1.runs" | median; }
ours=$(column ours 1); ffmpeg=$(column ffmpeg 1); separate=$(column separate 1)
echo "ladder wall time   transcoderd ${ours}s  ffmpeg one command ${ffmpeg}s  ratio $(echo "scale=3; $ours / $ffmpeg" | bc -l)  (target <= 1.0)"
echo "                   four ffmpeg runs ${separate}s  ratio $(echo "scale=3; $ours / $separate" | bc -l)  (target <= 0.6)"
ours_rss=$(column ours 2); single_rss=$(column single 2); ffmpeg_rss=$(column ffmpeg 2)
echo "peak RSS           ladder $((ours_rss / 1024)) MiB  single 1080p MP4 $((single_rss / 1024)) MiB  ratio $(echo "scale=3; $ours_rss / $single_rss" | bc -l)  (target < 1.5); ffmpeg's ladder $((ffmpeg_rss / 1024)) MiB"
for rung in 1080p 360p; do
  echo "  $rung: $(grep -A1 "RESOLUTION=[0-9]*x${rung%p}," "$work/ladder-ours/master.m3u8" | head -1 | cut -c1-120)"
done
