// A finished job: its player (the MP4, or the ladder's master playlist where the browser plays HLS natively), the
// poster, storyboard previews over the seek bar, a download link for every file, and the tracks in and out.

import { formatBytes, formatSeconds } from "./eta.js";

// Cues of a storyboard's WebVTT track: {start, end, x, y, w, h} on the sprite.
export function parseStoryboard(text) {
  const cues = [];
  const time = (value) => {
    const parts = value.trim().split(":").map(Number);
    return parts.reduce((sum, part) => sum * 60 + part, 0);
  };
  for (const block of text.replace(/\r/g, "").split("\n\n")) {
    const lines = block.split("\n").filter((line) => line.trim() !== "");
    const timing = lines.findIndex((line) => line.includes("-->"));
    if (timing < 0 || !lines[timing + 1]) continue;
    const [start, end] = lines[timing].split("-->").map(time);
    const match = /#xywh=(\d+),(\d+),(\d+),(\d+)/.exec(lines[timing + 1]);
    if (!match) continue;
    const [x, y, w, h] = match.slice(1).map(Number);
    cues.push({ start, end, x, y, w, h, image: lines[timing + 1].split("#")[0] });
  }
  return cues;
}

function describeTrack(track) {
  const parts = [track.coverArt ? "cover art" : track.mediaType, track.codec];
  if (track.profile) parts.push(track.profile);
  if (track.hdr) parts.push(`HDR (${track.hdr})`);
  if (track.width && track.height) parts.push(`${track.width}×${track.height}`);
  if (track.frameRate) parts.push(`${Number(track.frameRate).toFixed(2)} fps`);
  if (track.sampleRate) parts.push(`${track.sampleRate} Hz`);
  if (track.channels) parts.push(`${track.channels} ch`);
  if (track.bitRate) parts.push(`${Math.round(track.bitRate / 1000)} kb/s`);
  return parts.filter(Boolean).join(", ");
}

function fillTracks(list, tracks) {
  list.replaceChildren(...(tracks || []).map((track) => {
    const item = document.createElement("li");
    item.textContent = describeTrack(track);
    return item;
  }));
}

export class ResultView {
  constructor(elements) {
    this.e = elements;
    this.cues = [];
    this.spriteURL = null;
    const { scrub, player, play, mute, fullscreen, clock, box } = elements;
    // One set of controls (the seek bar shows the storyboard), the browser's own hidden.
    const toggle = () => { if (player.paused) player.play().catch(() => {}); else player.pause(); };
    play.addEventListener("click", toggle);
    player.addEventListener("click", toggle);
    player.addEventListener("play", () => { play.textContent = "Pause"; });
    player.addEventListener("pause", () => { play.textContent = "Play"; });
    mute.addEventListener("click", () => {
      player.muted = !player.muted;
      mute.setAttribute("aria-pressed", String(player.muted));
    });
    fullscreen.addEventListener("click", () => {
      if (document.fullscreenElement) document.exitFullscreen(); else box.requestFullscreen().catch(() => {});
    });
    const tick = () => {
      const duration = Number.isFinite(player.duration) ? player.duration : 0;
      clock.textContent = `${formatSeconds(player.currentTime)} / ${formatSeconds(duration)}`;
    };
    player.addEventListener("timeupdate", tick);
    player.addEventListener("durationchange", tick);
    scrub.addEventListener("input", () => {
      player.currentTime = Number(scrub.value);
      this.previewAt(Number(scrub.value));
    });
    player.addEventListener("timeupdate", () => {
      scrub.value = String(player.currentTime);
      scrub.setAttribute("aria-valuetext", formatSeconds(player.currentTime));
    });
    player.addEventListener("loadedmetadata", () => {
      if (Number.isFinite(player.duration)) scrub.max = String(player.duration);
    });
    scrub.addEventListener("pointermove", (event) => this.preview(event));
    scrub.addEventListener("pointerleave", () => { elements.preview.hidden = true; });
    scrub.addEventListener("focus", () => this.previewAt(Number(scrub.value)));
    scrub.addEventListener("blur", () => { elements.preview.hidden = true; });
  }

  async show(job) {
    const { section, name, player, downloads, inputTracks, outputTracks, preview, scrub } = this.e;
    // A later "Show result" wins over an earlier one still reading its storyboard.
    const shown = (this.shown = (this.shown || 0) + 1);
    this.jobID = job.id;
    this.reveal();
    name.textContent = job.input?.filename || job.id;
    const output = job.output;
    preview.hidden = true;
    this.cues = [];
    scrub.value = "0";
    scrub.max = "0";
    if (output.poster) player.poster = output.poster; else player.removeAttribute("poster");
    this.e.play.textContent = "Play";
    const video = (output.tracks || []).some((track) => track.mediaType === "video");
    const hls = output.url.endsWith(".m3u8");
    if (hls && player.canPlayType("application/vnd.apple.mpegurl") === "") {
      player.removeAttribute("src");
      player.load(); // unloads what played before, or it goes on under this job's name
      this.e.note.textContent = "This browser does not play HLS natively; download the files or use the DASH manifest.";
    } else {
      this.e.note.textContent = "";
      player.src = output.url;
    }
    player.setAttribute("aria-label", `${video ? "Video" : "Audio"}: ${name.textContent}`);
    // The output itself is saved under the input's name, with its own extension: every result was "output.mp4".
    const stem = (job.input?.filename || "").replace(/\.[^.]*$/, "") || "output";
    downloads.replaceChildren(...(output.files || [{ path: "output", size: output.size, url: output.url }]).map((file) => {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = file.url;
      const last = file.path.split("/").pop();
      link.setAttribute("download", /^output\.[^/]*$/.test(file.path) ? stem + last.slice("output".length) : last);
      link.textContent = file.path;
      item.append(link, document.createTextNode(` (${formatBytes(file.size)})`));
      return item;
    }));
    fillTracks(inputTracks, job.input?.tracks);
    fillTracks(outputTracks, output.tracks);
    if (output.storyboard) {
      try {
        const response = await fetch(output.storyboard, { credentials: "same-origin" });
        if (response.ok) {
          const cues = parseStoryboard(await response.text());
          if (shown !== this.shown) return;
          this.cues = cues;
          const base = output.storyboard.slice(0, output.storyboard.lastIndexOf("/") + 1);
          this.spriteURL = base + (this.cues[0]?.image || "storyboard.jpg");
        }
      } catch { this.cues = []; }
    }
  }

  // The job shown was deleted (here or elsewhere): its player, links and tracks name files that are gone.
  forget(id) {
    if (this.jobID !== id) return;
    const { section, player, downloads, inputTracks, outputTracks, preview } = this.e;
    this.jobID = null;
    this.shown = (this.shown || 0) + 1; // a storyboard still being read is not shown
    this.cues = [];
    player.pause();
    player.removeAttribute("src");
    player.removeAttribute("poster");
    player.load();
    for (const list of [downloads, inputTracks, outputTracks]) list.replaceChildren();
    preview.hidden = true;
    section.hidden = true;
  }

  // Shows the section and moves the keyboard there.
  reveal() {
    this.e.section.hidden = false;
    this.e.title.focus();
  }

  preview(event) {
    const { scrub } = this.e;
    const box = scrub.getBoundingClientRect();
    const max = Number(scrub.max) || this.cues.at(-1)?.end || 0;
    const time = Math.min(max, Math.max(0, (event.clientX - box.left) / box.width * max));
    this.previewAt(time, event.clientX - box.left);
  }

  previewAt(time, x) {
    const { preview, previewTime, scrub } = this.e;
    const cue = this.cues.find((entry) => time >= entry.start && time < entry.end) || this.cues.at(-1);
    if (!cue) { preview.hidden = true; return; }
    const box = scrub.getBoundingClientRect();
    const max = Number(scrub.max) || cue.end;
    const left = x ?? (max > 0 ? time / max * box.width : 0);
    preview.style.width = `${cue.w}px`;
    preview.style.height = `${cue.h}px`;
    preview.style.backgroundImage = `url("${this.spriteURL}")`;
    preview.style.backgroundPosition = `-${cue.x}px -${cue.y}px`;
    preview.style.left = `${Math.max(0, Math.min(box.width - cue.w, left - cue.w / 2))}px`;
    previewTime.textContent = formatSeconds(time);
    preview.dataset.tile = `${cue.x},${cue.y}`;
    preview.hidden = false;
  }
}
