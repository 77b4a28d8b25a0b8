#!/usr/bin/env python3
"""Checks an HLS + DASH ladder folder with a real parser (PyPI m3u8) against Apple's HLS Authoring rules.

Usage: check_ladder.py FOLDER. Prints one JSON summary on success; exits 1 naming the first broken rule.
"""
import json
import math
import os
import sys
import xml.etree.ElementTree as ET

import m3u8

folder = sys.argv[1]
problems = []


def fail(message):
    problems.append(message)


def segment_bytes(path):
    return os.path.getsize(os.path.join(folder, path))


master = m3u8.load(os.path.join(folder, "master.m3u8"))
if not master.is_variant:
    fail("master.m3u8 is not a master playlist")
if master.version != 7:
    fail(f"master version {master.version}, expected 7")
if "#EXT-X-INDEPENDENT-SEGMENTS" not in master.dumps():
    fail("master lacks EXT-X-INDEPENDENT-SEGMENTS")

audio_groups = {media.group_id: media for media in master.media if media.type == "AUDIO"}
summary = {"variants": [], "iframes": [], "audio": None}


def windowed_peak(pieces, target):
    """RFC 8216bis's peak segment bit rate: the highest bit rate of any run of consecutive segments lasting 0.5 to
    1.5 target durations (the whole playlist when it is shorter than half the target)."""
    peak = 0.0
    for start in range(len(pieces)):
        bits = length = 0.0
        for size, duration in pieces[start:]:
            bits += size * 8
            length += duration
            if length > 1.5 * target + 1e-9:
                break
            if length >= 0.5 * target - 1e-9 and length > 0:
                peak = max(peak, bits / length)
    if peak == 0:
        length = sum(duration for _, duration in pieces)
        peak = sum(size * 8 for size, _ in pieces) / length if length else 0
    return peak


def check_media(uri, kind):
    """Checks one media playlist; returns (durations, peak bits/s, average bits/s, bytes)."""
    playlist = m3u8.load(os.path.join(folder, uri))
    base = os.path.dirname(uri)
    if playlist.is_variant:
        fail(f"{uri} is a master playlist")
    if not playlist.is_endlist or playlist.playlist_type != "vod":
        fail(f"{uri}: not a finished VOD playlist")
    if playlist.version != 7:
        fail(f"{uri}: version {playlist.version}")
    if not playlist.segment_map or not os.path.exists(os.path.join(folder, base, playlist.segment_map[0].uri)):
        fail(f"{uri}: no EXT-X-MAP init segment on disk")
    durations, pieces, total_bits, total_time = [], [], 0, 0.0
    for segment in playlist.segments:
        path = os.path.join(base, segment.uri)
        if not os.path.exists(os.path.join(folder, path)):
            fail(f"{uri}: {segment.uri} missing")
            continue
        # Apple: each EXTINF rounded to the nearest integer is at most the target duration.
        if math.floor(segment.duration + 0.5) > playlist.target_duration:
            fail(f"{uri}: segment of {segment.duration} s over TARGETDURATION {playlist.target_duration}")
        size = segment_bytes(path) if kind != "iframe" else segment.byterange and int(segment.byterange.split("@")[0])
        if kind == "iframe":
            length, offset = (int(x) for x in segment.byterange.split("@"))
            with open(os.path.join(folder, path), "rb") as handle:
                handle.seek(offset)
                head = handle.read(8)
            if head[4:8] != b"moof":
                fail(f"{uri}: byte range {segment.byterange} of {segment.uri} does not start at a moof")
            if offset + length > segment_bytes(path):
                fail(f"{uri}: byte range {segment.byterange} past the end of {segment.uri}")
        durations.append(segment.duration)
        pieces.append((size, segment.duration))
        total_bits += size * 8
        total_time += segment.duration
    if kind == "iframe" and not playlist.is_i_frames_only:
        fail(f"{uri}: no EXT-X-I-FRAMES-ONLY")
    if kind == "iframe":
        if playlist.target_duration != max(1, math.floor(max(durations, default=0) + 0.5)):
            fail(f"{uri}: TARGETDURATION {playlist.target_duration} is not the longest segment rounded ({max(durations, default=0)})")
    else:
        media_targets[uri] = (playlist.target_duration, max(durations, default=0))
    peak = windowed_peak(pieces, playlist.target_duration)
    return durations, peak, (total_bits / total_time if total_time else 0), total_time


# RFC 8216, 6.2.4: every media playlist of a variant (its audio's included) has the same target duration; here the
# longest segment of them all, rounded.
media_targets = {}
audio_stats = None
for group, media in audio_groups.items():
    durations, peak, average, length = check_media(media.uri, "audio")
    audio_stats = (peak, average)
    summary["audio"] = {"uri": media.uri, "segments": len(durations), "duration": length, "channels": media.channels}

for variant in master.playlists:
    info = variant.stream_info
    for attribute in ("bandwidth", "average_bandwidth", "codecs"):
        if getattr(info, attribute) in (None, ""):
            fail(f"{variant.uri}: no {attribute.upper().replace('_', '-')}")
    durations, peak, average, length = check_media(variant.uri, "video" if info.resolution else "audio")
    is_video = info.resolution is not None
    if is_video:
        if info.frame_rate is None:
            fail(f"{variant.uri}: no FRAME-RATE")
        if audio_groups and info.audio not in audio_groups:
            fail(f"{variant.uri}: AUDIO group {info.audio} is not declared")
    audio_peak, audio_average = audio_stats if (is_video and audio_stats) else (0, 0)
    # BANDWIDTH is the measured peak segment bit rate (the audio's included), not below it nor 10 % above (a peak
    # inflated by a tiny last segment makes players pass the rung over); AVERAGE-BANDWIDTH the measured average
    # within 10 %.
    if info.bandwidth + 1 < peak + audio_peak:
        fail(f"{variant.uri}: BANDWIDTH {info.bandwidth} below the measured peak {peak + audio_peak:.0f}")
    if info.bandwidth > 1.1 * (peak + audio_peak) + 1:
        fail(f"{variant.uri}: BANDWIDTH {info.bandwidth} far above the measured peak {peak + audio_peak:.0f}")
    # A peak below the average is no peak (players and Apple's validator take BANDWIDTH as the upper bound).
    if info.bandwidth < info.average_bandwidth:
        fail(f"{variant.uri}: BANDWIDTH {info.bandwidth} below its AVERAGE-BANDWIDTH {info.average_bandwidth}")
    if abs(info.average_bandwidth - (average + audio_average)) > 0.1 * (average + audio_average):
        fail(f"{variant.uri}: AVERAGE-BANDWIDTH {info.average_bandwidth} vs measured {average + audio_average:.0f}")
    summary["variants"].append({
        "uri": variant.uri, "bandwidth": info.bandwidth, "averageBandwidth": info.average_bandwidth,
        "codecs": info.codecs, "resolution": list(info.resolution) if info.resolution else None,
        "frameRate": info.frame_rate, "audio": info.audio, "segments": len(durations), "duration": length,
        "durations": durations,
    })

for iframe in master.iframe_playlists:
    durations, peak, _, _ = check_media(iframe.uri, "iframe")
    if iframe.iframe_stream_info.bandwidth + 1 < peak:
        fail(f"{iframe.uri}: BANDWIDTH {iframe.iframe_stream_info.bandwidth} below the measured peak {peak:.0f}")
    if iframe.iframe_stream_info.bandwidth < (iframe.iframe_stream_info.average_bandwidth or 0):
        fail(f"{iframe.uri}: BANDWIDTH {iframe.iframe_stream_info.bandwidth} below its AVERAGE-BANDWIDTH")
    if iframe.iframe_stream_info.bandwidth > 1.1 * peak + 1:
        fail(f"{iframe.uri}: BANDWIDTH {iframe.iframe_stream_info.bandwidth} far above the measured peak {peak:.0f}")
    summary["iframes"].append({"uri": iframe.uri, "count": len(durations), "codecs": iframe.iframe_stream_info.codecs,
                               "durations": durations})

if media_targets:
    targets = {target for target, _ in media_targets.values()}
    longest = max(length for _, length in media_targets.values())
    if len(targets) != 1:
        fail(f"media playlists with different TARGETDURATIONs: {dict((uri, t) for uri, (t, _) in media_targets.items())}")
    elif targets != {max(1, math.floor(longest + 0.5))}:
        fail(f"TARGETDURATION {targets} is not the longest segment of all rounded ({longest})")

# DASH: a static MPD whose templates name the same files.
mpd = ET.parse(os.path.join(folder, "manifest.mpd")).getroot()
ns = {"d": "urn:mpeg:dash:schema:mpd:2011"}
if mpd.get("type") != "static":
    fail("manifest.mpd is not static")
representations = []
presentation = mpd.get("mediaPresentationDuration", "PT0S")
total = float(presentation[2:-1]) if presentation.startswith("PT") and presentation.endswith("S") else -1
for rep in mpd.iterfind(".//d:Representation", ns):
    template = rep.find("d:SegmentTemplate", ns)
    timeline = template.find("d:SegmentTimeline", ns)
    entries = list(timeline.iterfind("d:S", ns))
    count = sum(1 + int(s.get("r", "0")) for s in entries)
    # The timeline runs without gaps, and the longest track lasts the presentation.
    timescale = int(template.get("timescale"))
    expected_start = None
    length = 0
    for entry in entries:
        start, duration, repeats = int(entry.get("t")), int(entry.get("d")), int(entry.get("r", "0"))
        if expected_start is not None and start != expected_start:
            fail(f"manifest.mpd {rep.get('id')}: S@t {start} leaves a gap or overlap (expected {expected_start})")
        expected_start = start + duration * (repeats + 1)
        length += duration * (repeats + 1)
    rep_seconds = length / timescale
    if rep_seconds > total + 0.001 or rep_seconds < total - 0.5:
        fail(f"manifest.mpd {rep.get('id')}: {rep_seconds:.3f} s of segments against mediaPresentationDuration {total} s")
    for number in range(1, count + 1):
        name = template.get("media").replace("$Number%05d$", f"{number:05d}")
        if not os.path.exists(os.path.join(folder, name)):
            fail(f"manifest.mpd: {name} missing")
    if not os.path.exists(os.path.join(folder, template.get("initialization"))):
        fail(f"manifest.mpd: {template.get('initialization')} missing")
    representations.append({"id": rep.get("id"), "segments": count, "bandwidth": int(rep.get("bandwidth"))})
if not representations:
    fail("manifest.mpd has no Representation")
summary["dash"] = representations

if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(json.dumps(summary))
