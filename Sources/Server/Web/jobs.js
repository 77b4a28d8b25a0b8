// The live job list: each job an item made from the template (text only ever set with textContent), kept current
// by the job's event stream (SSE) while it is queued or running, with its progress, speed and an ETA from the
// measured rate.

import { request } from "./api.js";
import { EtaEstimator, formatBytes, formatSeconds } from "./eta.js";

// Event streams open at once. A browser keeps six connections per server for all its tabs together, and every
// stream holds one for as long as it is open: three streams in each of two tabs left no connection for anything
// else, and both pages hung. Two at most, and none while the page is hidden.
const maxStreams = 2;
// Seconds between readings of the whole list (jobs made or deleted elsewhere) and of active jobs not streamed, and
// the longest one reading may take.
const refreshSeconds = 5;
const readTimeout = 20_000;

const ended = (state) => state === "succeeded" || state === "failed" || state === "canceled";

export class JobList {
  constructor({ list, empty, live, template, onShow, onRetry, onDeleted = () => {}, onRemoved = () => {}, onStreamError = () => {}, onError }) {
    this.list = list;
    this.empty = empty;
    this.live = live;
    this.template = template;
    this.onShow = onShow;
    this.onRetry = onRetry;
    this.onDeleted = onDeleted;
    this.onRemoved = onRemoved;
    this.onStreamError = onStreamError;
    this.onError = onError;
    this.jobs = new Map();
    this.items = new Map();
    this.streams = new Map();
    this.etas = new Map();
    this.announced = new Map();
    // The highest fraction shown per job: a reading older than it (the list's, next to the stream's) is ignored.
    this.fractions = new Map();
    // When this page added a job (made here): a list read before then does not know it yet, and it stays listed
    // here when newer jobs push it past the list's end.
    this.addedAt = new Map();
    // The job whose result is shown: it stays too.
    this.shownID = null;
    // Jobs this page deleted: a list read before the delete still names them.
    this.deletedHere = new Set();
    // The ids the latest list named: read then, not read again one by one.
    this.listed = new Set();
    // When each job's stream last told its state: a list asked before then is older news.
    this.streamedAt = new Map();
    // Actions under way, "id action": a second click (a double-click, a held Enter) waits for the first's answer.
    this.busy = new Set();
    this.refreshing = false;
    this.timer = null;
  }

  // The page was hidden or shown: its streams close or open again (not while it is signed out).
  visibilityChanged() {
    if (this.timer) this.watchActive();
  }

  async load() {
    // The timer first: a first reading that failed (the server restarting, a 503) is made again at the next tick,
    // where before the list stayed empty and unwatched until the page was reloaded. A 401 stops it (signed out).
    if (!this.timer) this.timer = setInterval(() => this.refresh(), refreshSeconds * 1000);
    await this.refreshList();
  }

  // The newest jobs as the server lists them (newest first): new ones are added, and a known one the list does not
  // name goes when it would have been named (deleted elsewhere) or has ended and fallen past the list's end. An
  // active one past the end stays, read on its own. Only the whole list removed anything before: with more than a
  // page of jobs (most servers, kept forever by default) a job deleted elsewhere stayed, and every job ever seen
  // stayed too, each active one read every few seconds.
  async refreshList() {
    const asked = performance.now();
    const answer = await request("GET", "/v1/jobs?limit=50", { timeout: readTimeout });
    const jobs = answer.jobs.filter((job) => !this.deletedHere.has(job.id));
    // A job its stream told of since the list was asked keeps what the stream said: an answer read before a job
    // started put it back to "queued" (its ETA lost, the live region saying so) until the next list.
    for (const job of [...jobs].reverse()) if (!((this.streamedAt.get(job.id) ?? -Infinity) >= asked)) this.upsert(job);
    this.listed = new Set(jobs.map((job) => job.id));
    const oldest = answer.next ? answer.jobs[answer.jobs.length - 1] : null;
    for (const [id, job] of [...this.jobs]) {
      if (this.listed.has(id) || (this.addedAt.get(id) ?? -Infinity) >= asked) continue;
      // Timestamps in the same form compare as strings; one equal to the oldest listed's may sort either side.
      const pastTheEnd = oldest && (job.createdAt || "") <= (oldest.createdAt || "");
      if (!pastTheEnd) this.remove(id, { deleted: true });
      else if (ended(job.state) && !this.addedAt.has(id) && id !== this.shownID) this.remove(id, { deleted: false });
    }
    this.watchActive();
  }

  async refresh() {
    // A round that has not ended (a slow link) is not overlapped by another.
    if (this.refreshing) return;
    this.refreshing = true;
    try {
      try { await this.refreshList(); } catch (error) { if (error.status === 401) this.onError(error); }
      await this.refreshUnwatched();
    } finally {
      this.refreshing = false;
    }
  }

  stop() {
    for (const stream of this.streams.values()) stream.close();
    this.streams.clear();
    clearInterval(this.timer);
    this.timer = null;
  }

  // Adds a job or brings its item up to date.
  upsert(job) {
    const previous = this.jobs.get(job.id);
    // An ended job never runs again: an answer read before its end (the list's, next to the stream's) is stale.
    if (previous && ended(previous.state) && !ended(job.state)) return;
    this.jobs.set(job.id, job);
    let item = this.items.get(job.id);
    if (!item) {
      item = this.template.content.firstElementChild.cloneNode(true);
      item.dataset.job = job.id;
      const name = item.querySelector(".name");
      name.textContent = job.input?.filename || job.input?.id || job.id;
      name.id = `job-name-${job.id}`;
      // Each button says which job it acts on ("Cancel", described by the file's name).
      for (const button of item.querySelectorAll("button")) button.setAttribute("aria-describedby", name.id);
      item.querySelector("progress").setAttribute("aria-label", `Progress of ${name.textContent}`);
      item.addEventListener("click", (event) => this.act(event, job.id));
      this.items.set(job.id, item);
      this.list.prepend(item);
    }
    item.dataset.state = job.state;
    item.querySelector(".state").textContent = job.state;
    const progress = item.querySelector("progress");
    // A new attempt measures its own pace, from its own start: one after a retry counts up, one after a requeue
    // (a graceful restart, an expired lease) keeps the count but starts again (the job queued, or a new start),
    // and its progress from 0 was dropped as below the earlier attempt's, the bar frozen.
    if (previous && (previous.attempts !== job.attempts || previous.startedAt !== job.startedAt
                     || (previous.state === "running" && job.state === "queued"))) {
      this.etas.delete(job.id);
      this.fractions.delete(job.id);
      this.announced.delete(job.id);
    }
    if (job.state === "succeeded") progress.value = 1;
    else if (job.state !== "running") progress.value = job.progress?.fraction || 0;
    item.querySelector(".job-error").textContent = job.state === "failed" && job.error ? job.error.message : "";
    const active = job.state === "queued" || job.state === "running";
    const focused = item.contains(document.activeElement) ? document.activeElement : null;
    item.querySelector('[data-action="cancel"]').hidden = !active;
    item.querySelector('[data-action="retry"]').hidden = !(job.state === "failed" || job.state === "canceled");
    item.querySelector('[data-action="delete"]').hidden = active;
    item.querySelector('[data-action="show"]').hidden = job.state !== "succeeded";
    // The button the keyboard was on is gone (Cancel, once the job ends): onto the job's next action, not the page.
    if (focused?.hidden) item.querySelector("button[data-action]:not([hidden])")?.focus();
    if (job.state === "running" && job.progress) this.progress(job.id, job.progress);
    else if (!active) item.querySelector(".stats").textContent = job.state === "succeeded" ? this.summary(job) : "";
    else item.querySelector(".stats").textContent = job.state === "running" ? "Starting" : "Waiting for a worker";
    if (previous && previous.state !== job.state) {
      this.live.textContent = `${item.querySelector(".name").textContent}: ${job.state}`;
    }
    this.empty.hidden = this.items.size > 0;
  }

  summary(job) {
    const output = job.output;
    if (!output) return "";
    const seconds = (job.startedAt && job.finishedAt) ? (Date.parse(job.finishedAt) - Date.parse(job.startedAt)) / 1000 : null;
    return seconds === null ? "Done" : `Done in ${formatSeconds(seconds)}`;
  }

  progress(id, report) {
    const item = this.items.get(id);
    if (!item) return;
    const fraction = Math.min(1, Math.max(0, report.fraction || 0));
    const progress = item.querySelector("progress");
    const stats = item.querySelector(".stats");
    if (report.phase === "fetching") {
      // The input is being downloaded from its URL: not the transcode, no ETA. Its size may not be known.
      stats.textContent = report.totalBytes ? `Fetching the input: ${Math.round(fraction * 100)} %`
        : `Fetching the input: ${formatBytes(report.bytes || 0)}`;
      delete stats.dataset.eta;
      return;
    }
    if (report.phase === "verifying") {
      // An earlier attempt's checkpoint is checked before the transcode continues from it.
      stats.textContent = "Checking the work of the earlier attempt";
      delete stats.dataset.eta;
      return;
    }
    if (report.phase === "finishing") {
      // Every sample is written; the file is being completed (a long film's is rewritten): no rate, no ETA.
      stats.textContent = "Finishing the output file";
      delete stats.dataset.eta;
      return;
    }
    if (fraction < (this.fractions.get(id) ?? 0)) return;
    this.fractions.set(id, fraction);
    progress.value = fraction;
    const step = Math.floor(fraction * 4);
    if (step > (this.announced.get(id) ?? 0) && step < 4) {
      this.announced.set(id, step);
      this.live.textContent = `${item.querySelector(".name").textContent}: ${step * 25} %`;
    }
    let eta = this.etas.get(id);
    if (!eta) { eta = new EtaEstimator(); this.etas.set(id, eta); }
    const left = eta.update(fraction, performance.now() / 1000);
    const parts = [`${Math.round(fraction * 100)} %`];
    if (report.framesPerSecond) parts.push(`${report.framesPerSecond.toFixed(0)} fps`);
    if (report.speed) parts.push(`${report.speed.toFixed(2)}× real time`);
    if (left !== null) parts.push(`about ${formatSeconds(left)} left`);
    if (report.resumedFrom) parts.push(`resumed at ${formatSeconds(report.resumedFrom)}`);
    stats.textContent = parts.join(" · ");
    if (left === null) delete stats.dataset.eta; else stats.dataset.eta = left.toFixed(2);
  }

  // Streams the events of active jobs, running ones first, then the newest, up to `maxStreams`, while the page is
  // visible: a queued job's stream gives way to a running one's (a queued job is read every few seconds; it has no
  // progress to show). A job just started is streamed from its start when there is room.
  watchActive() {
    if (!this.timer) return; // signed out (stopped) while a reading was under way
    const running = (job) => (job.state === "running" ? 0 : 1);
    const active = [...this.jobs.values()].filter((job) => job.state === "queued" || job.state === "running")
      .sort((a, b) => running(a) - running(b) || (b.createdAt || "").localeCompare(a.createdAt || ""));
    const wanted = new Set(document.hidden ? [] : active.slice(0, maxStreams).map((job) => job.id));
    for (const [id, stream] of this.streams) {
      if (!wanted.has(id) && (document.hidden || this.jobs.get(id)?.state !== "running")) {
        stream.close();
        this.streams.delete(id);
      }
    }
    for (const job of active) {
      if (this.streams.size >= maxStreams || document.hidden) break;
      if (!this.streams.has(job.id)) this.watch(job.id);
    }
  }

  watch(id) {
    const stream = new EventSource(`/v1/jobs/${encodeURIComponent(id)}/events`);
    this.streams.set(id, stream);
    stream.addEventListener("state", (event) => {
      this.streamedAt.set(id, performance.now());
      this.upsert(JSON.parse(event.data));
    });
    stream.addEventListener("progress", (event) => this.progress(id, JSON.parse(event.data)));
    stream.onerror = () => {
      // The server ends the stream after a terminal state; otherwise the browser would reconnect on its own, but
      // the job may have ended meanwhile (or the session expired): the job is read at the next refresh, which
      // streams it again if it is still active. One the list does not name (past its end) is read alone now: the
      // next refresh streamed it again before reading the unwatched, so one deleted elsewhere (its stream ends,
      // 404 again) was never read alone and stayed, a stream opened and refused every few seconds.
      stream.close();
      this.streams.delete(id);
      if (ended(this.jobs.get(id)?.state)) return;
      this.onStreamError();
      if (this.jobs.has(id) && !this.listed.has(id)) this.readAlone(id);
    };
  }

  // Jobs active but neither streamed (more than `maxStreams`) nor in the latest list (past its end) are read every
  // few seconds.
  async refreshUnwatched() {
    // Hidden, none is streamed: the list's own reading is enough until the page is shown.
    const unwatched = document.hidden ? [] : [...this.jobs.values()].filter((job) =>
      (job.state === "queued" || job.state === "running") && !this.streams.has(job.id) && !this.listed.has(job.id));
    for (const job of unwatched) await this.readAlone(job.id);
    this.watchActive();
  }

  // Reads a job on its own.
  async readAlone(id) {
    try {
      this.upsert(await request("GET", `/v1/jobs/${encodeURIComponent(id)}`, { timeout: readTimeout }));
    } catch (error) {
      // Deleted elsewhere: past the list's first page nothing else would take it off (it stayed "queued" with
      // buttons that answer 404, read again every few seconds). Anything else: next time.
      if (error.status === 404) this.remove(id);
    }
  }

  async act(event, id) {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const job = this.jobs.get(id);
    const item = this.items.get(id);
    const key = `${id} ${button.dataset.action}`;
    if (this.busy.has(key)) return;
    this.busy.add(key);
    try {
      switch (button.dataset.action) {
        case "show": {
          this.shownID = id;
          // The list names how many files an output has, not each: the job's own reading has them (a ladder's
          // thousands, for its downloads). Shown as listed when it cannot be read now.
          let whole = job;
          if (job.output && !job.output.files && job.output.fileCount !== undefined) {
            try {
              whole = await request("GET", `/v1/jobs/${encodeURIComponent(id)}`, { timeout: readTimeout });
              this.upsert(whole);
            } catch (error) {
              if (error.status === 404) { this.remove(id); break; }
            }
          }
          if (this.shownID === id) this.onShow(whole);
          break;
        }
        case "cancel":
          try {
            this.upsert(await request("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`));
          } catch (error) {
            // Deleted elsewhere: it goes. Ended meanwhile (409): shown as it ended, not left with a Cancel button.
            if (error.status === 404) { this.remove(id); break; }
            if (error.status === 409) {
              this.upsert(await request("GET", `/v1/jobs/${encodeURIComponent(id)}`, { timeout: readTimeout }));
              break;
            }
            throw error;
          }
          // The button is gone: keep the keyboard where it was, on the job's next action.
          item.querySelector('[data-action="retry"]:not([hidden]), [data-action="delete"]:not([hidden])')?.focus();
          break;
        case "retry": await this.onRetry(job); break;
        case "delete": {
          // Gone already (deleted elsewhere, or by retention): what the click asked for is done.
          await request("DELETE", `/v1/jobs/${encodeURIComponent(id)}`).catch((error) => { if (error.status !== 404) throw error; });
          this.deletedHere.add(id);
          if (this.deletedHere.size > 200) this.deletedHere.delete(this.deletedHere.values().next().value);
          const next = item.nextElementSibling || item.previousElementSibling;
          this.remove(id);
          (next?.querySelector("button:not([hidden])") || document.getElementById("jobs-title")).focus();
          await this.onDeleted(job);
          break;
        }
      }
    } catch (error) {
      this.onError(error);
    } finally {
      this.busy.delete(key);
    }
  }

  add(job) {
    this.addedAt.set(job.id, performance.now());
    this.upsert(job);
    this.watchActive();
  }

  // `deleted`: the job is gone from the server (not merely past the list's end): what shows it goes too.
  remove(id, { deleted = true } = {}) {
    this.streams.get(id)?.close();
    this.streams.delete(id);
    this.items.get(id)?.remove();
    this.items.delete(id);
    this.jobs.delete(id);
    this.etas.delete(id);
    this.announced.delete(id);
    this.fractions.delete(id);
    this.streamedAt.delete(id);
    this.addedAt.delete(id);
    if (this.shownID === id) this.shownID = null;
    this.empty.hidden = this.items.size > 0;
    if (deleted) this.onRemoved(id);
  }
}
