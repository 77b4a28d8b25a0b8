// A small tus 1.0 client (core protocol with the creation extension) for the server's /v1/tus endpoint. An upload
// is remembered in localStorage by the file's name, size and modification time until it completes, so choosing the
// same file again after a reload or a dropped connection continues from the offset the server reports (HEAD).

import { authHeaders } from "./api.js";

const storageKey = "transcoderd.uploads";
const version = "1.0.0";
// An unfinished upload is remembered until the server's Upload-Expires, as its latest answer stated it (a day after
// its last bytes by default, --tus-expire-hours); an entry without one, for a day after it was last written. Counted
// from its creation, a long upload resumed the next day was forgotten while the server still had its bytes.
const rememberFor = 24 * 3600 * 1000;
// Waits before each new try after a dropped connection or a passing refusal, in seconds (a server's Retry-After,
// up to the last of these, wins; for a 423, the longer of the two): about two minutes in all, so a PATCH the server
// still holds from before a dropped connection (423 until the server lets it go: seconds on the node that holds it,
// its body's minute-long timeout when another node holds it) is waited out.
const retryDelays = [1, 2, 4, 8, 16, 30, 30, 30];
// Answers worth another try: the connection dropped (0), the offset moved (409: ask the server), another request
// holds the upload or is completing it (423), too many requests or connections, or the server is busy (429, 503),
// or a proxy in front of it found it gone or slow (502 while it restarts, 504 past the proxy's timeout).
const passing = new Set([0, 409, 423, 429, 502, 503, 504]);
// Seconds a PATCH may go without sending a byte, and twice that for an answer once its bytes are sent (or for a HEAD
// or a POST), before it is given up as a lost connection (then: ask the server how far it got, and go on). A flow a
// NAT or a VPN dropped without a word, or a proxy that stopped reading, left the request hanging with the bar
// frozen until TCP gave up, a quarter of an hour later, or for good.
const stallSeconds = 60;

function remembered() {
  let all;
  try { all = JSON.parse(localStorage.getItem(storageKey) || "{}"); } catch { all = {}; }
  const now = Date.now();
  return Object.fromEntries(Object.entries(all).filter(([, value]) =>
    value && (Number.isFinite(value.expires) ? now < value.expires : now - value.at < rememberFor)));
}

// `expires`: the server's Upload-Expires in milliseconds, when it said one. `completed`: the server has every byte
// (the entry stays until a job is made on it, for a day: chosen again after a reload, nothing is sent again).
function remember(fingerprint, url, expires = null, completed = false) {
  const all = remembered();
  if (url) {
    all[fingerprint] = { url, at: Date.now(), ...(Number.isFinite(expires) ? { expires } : {}), ...(completed ? { completed } : {}) };
  } else {
    delete all[fingerprint];
  }
  localStorage.setItem(storageKey, JSON.stringify(all));
}

// An answer's Upload-Expires in milliseconds, or null.
function expiry(headers) {
  const value = Date.parse(headers.get("Upload-Expires") || "");
  return Number.isFinite(value) ? value : null;
}

export function fingerprint(file) {
  return `${file.name}\u0000${file.size}\u0000${file.lastModified}`;
}

// The files whose uploads did not finish, as remembered.
export function unfinishedUploads() {
  return Object.entries(remembered()).filter(([, value]) => !value.completed)
    .map(([key, value]) => ({ name: key.split("\u0000")[0], url: value.url }));
}

function base64(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

// `retryAfter`: the answer's Retry-After header (seconds), if any.
function failure(status, text, doing, retryAfter = null) {
  let message = `${doing} failed (HTTP ${status}).`;
  try {
    const body = JSON.parse(text);
    if (body?.error?.message) message = body.error.message;
  } catch { /* not JSON */ }
  const error = new Error(message);
  error.status = status;
  const seconds = Number(retryAfter);
  if (retryAfter !== null && retryAfter !== "" && Number.isFinite(seconds) && seconds >= 0) error.retryAfter = seconds;
  return error;
}

function connectionLost() {
  const error = new Error("The connection to the server was lost during the upload.");
  error.status = 0;
  return error;
}

// The file cannot be read any more: changed since it was chosen (a recording still being written, a synced file
// touched), moved, or not a file at all (a folder). Not passing: trying again reads it no better.
function unreadable(file) {
  const error = new Error(`${file.name} changed or cannot be read since it was chosen; choose it again once it is complete.`);
  error.status = -1;
  return error;
}

// The wait before try number `failures` + 1 after `error`. A lock (423) is waited out at least as the plan says:
// its Retry-After (1 s once the holder was told another waits) would have spent every try within seconds while a
// holder that still sends (another tab), or one on another node, keeps the upload for longer.
function delayAfter(error, failures) {
  const planned = retryDelays[failures];
  if (error.status === 423) return Math.max(planned, error.retryAfter ?? 0);
  return error.retryAfter === undefined ? planned : Math.min(Math.max(error.retryAfter, 1), retryDelays[retryDelays.length - 1]);
}

export class TusUpload {
  // `onProgress({sent, total, speed, remaining, resumedFrom})` while bytes go; `chunkSize` bytes per PATCH.
  // `onRetry(seconds, error)` before a new try after a dropped connection or a passing refusal. `stallSeconds`: see
  // the constant of that name.
  constructor(file, { endpoint = "/v1/tus", chunkSize = 4 * 1024 * 1024, onProgress = () => {}, onRetry = () => {},
                      stallSeconds: stall = stallSeconds } = {}) {
    this.file = file;
    this.endpoint = endpoint;
    this.chunkSize = chunkSize;
    this.stallSeconds = stall;
    this.onProgress = onProgress;
    this.onRetry = onRetry;
    this.url = null;
    this.offset = 0;
    this.resumedFrom = null;
    this.aborted = false;
    this.request = null;
    this.speedSamples = [];
    this.expires = null; // the server's Upload-Expires, from its latest answer that said one
  }

  // Uploads the whole file; resolves with the upload's id (usable as a job's input once the server has taken its
  // bytes as media: the final PATCH is answered before that is known). It stays remembered until `forget()`. An
  // empty file is refused here: there is nothing to send.
  async start() {
    if (this.file.size === 0) throw new Error(`${this.file.name} is empty: there is nothing to upload.`);
    const key = fingerprint(this.file);
    const known = remembered()[key];
    if (known) {
      const offset = await this.retrying(() => this.serverOffset(known.url));
      if (offset !== null) {
        this.url = known.url;
        this.offset = offset;
        this.resumedFrom = offset;
        remember(key, this.url, this.expires);
      } else {
        remember(key, null);
      }
    }
    if (!this.url) {
      const url = await this.retrying(() => this.create());
      if (this.aborted) throw new Error("The upload was stopped.");
      this.url = url;
      remember(key, this.url, this.expires);
    }
    this.report();
    let failures = 0;
    while (this.offset < this.file.size) {
      if (this.aborted) throw new Error("The upload was stopped.");
      const end = Math.min(this.file.size, this.offset + this.chunkSize);
      try {
        this.offset = await this.patch(this.file.slice(this.offset, end));
        failures = 0;
        if (this.offset < this.file.size) remember(key, this.url, this.expires);
      } catch (error) {
        // A dropped connection, an offset the server does not agree with, or a refusal that passes: wait, ask the
        // server where the upload stands, and go on from there. Anything else (refused, signed out) ends the upload.
        if (this.aborted || !passing.has(error.status) || failures >= retryDelays.length) throw error;
        await this.pause(delayAfter(error, failures), error);
        failures += 1;
        // All there and being completed (a final PATCH given up while the server stores a large upload, which can
        // take minutes): asked again until it is done, without counting it as a failure.
        let offset = await this.serverOffset(this.url).catch((reason) => reason);
        while (offset?.status === 423) {
          await this.pause(5, offset);
          offset = await this.serverOffset(this.url).catch((reason) => reason);
        }
        if (typeof offset === "number") this.offset = offset;
      }
      this.report();
    }
    return this.url.split("/").pop();
  }

  // A job was made on the upload, or the server refused or lost it: it need not be continued after a reload.
  forget() {
    remember(fingerprint(this.file), null);
  }

  // The id of the upload this file finished as, when it is remembered finished (no job made on it yet); the
  // upload then answers to it (`keepCompleted`, `forget`) without `start()`.
  completedID() {
    const known = remembered()[fingerprint(this.file)];
    if (!known?.completed) return null;
    this.url = known.url;
    return known.url.split("/").pop();
  }

  // The server has the upload (its id named a stored upload): chosen again before a job is made on it (after a
  // reload), the file is not sent again. It was forgotten here, and a reload before "Transcode" sent it all again.
  keepCompleted() {
    remember(fingerprint(this.file), this.url, null, true);
  }

  // `attempt()` again after a refusal that passes, as the PATCHes are.
  async retrying(attempt) {
    for (let failures = 0; ; failures += 1) {
      try {
        return await attempt();
      } catch (error) {
        if (this.aborted || !passing.has(error.status) || error.status === 409 || failures >= retryDelays.length) throw error;
        await this.pause(delayAfter(error, failures), error);
      }
    }
  }

  async pause(seconds, error) {
    this.onRetry(seconds, error);
    await sleep(seconds);
    if (this.aborted) throw new Error("The upload was stopped.");
  }

  abort() {
    this.aborted = true;
    if (this.request) this.request.abort();
  }

  // The server's offset of the upload at `url`; null when it has no such upload (gone, expired). Throws for other
  // answers (signed out, server trouble): the upload is then kept for later.
  async serverOffset(url) {
    const response = await this.fetch(url, { method: "HEAD", headers: authHeaders({ "Tus-Resumable": version }) });
    if (response.status === 404 || response.status === 410) return null;
    if (!response.ok) {
      throw failure(response.status, "", "Asking the server how far the upload got", response.headers.get("Retry-After"));
    }
    const offset = Number(response.headers.get("Upload-Offset"));
    const length = Number(response.headers.get("Upload-Length"));
    this.expires = expiry(response.headers) ?? this.expires;
    if (!Number.isFinite(offset) || length !== this.file.size) return null;
    return offset;
  }

  async create() {
    const metadata = `filename ${base64(this.file.name)}` + (this.file.type ? `,filetype ${base64(this.file.type)}` : "");
    const response = await this.fetch(this.endpoint, {
      method: "POST",
      headers: authHeaders({ "Tus-Resumable": version, "Upload-Length": String(this.file.size), "Upload-Metadata": metadata }),
    });
    if (response.status !== 201) {
      throw failure(response.status, await response.text(), "Starting the upload", response.headers.get("Retry-After"));
    }
    const location = response.headers.get("Location");
    if (!location) throw new Error("The server did not say where the upload goes.");
    this.expires = expiry(response.headers);
    return new URL(location, window.location.href).pathname;
  }

  // `fetch`, given up as a lost connection when it fails or takes longer than twice `stallSeconds`.
  async fetch(url, options) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.stallSeconds * 2000);
    try {
      return await fetch(url, { ...options, signal: controller.signal });
    } catch {
      throw connectionLost();
    } finally {
      clearTimeout(timer);
    }
  }

  // One PATCH through XMLHttpRequest (fetch reports no upload progress); resolves with the new offset. Given up as
  // a lost connection after `stallSeconds` without a byte sent, or twice that without an answer once all are.
  patch(blob) {
    return new Promise((resolve, reject) => {
      const request = new XMLHttpRequest();
      this.request = request;
      let stalled = false;
      let timer = null;
      const watch = (seconds) => {
        clearTimeout(timer);
        timer = setTimeout(() => { stalled = true; request.abort(); }, seconds * 1000);
      };
      request.open("PATCH", this.url);
      const headers = authHeaders({ "Tus-Resumable": version, "Upload-Offset": String(this.offset),
                                    "Content-Type": "application/offset+octet-stream" });
      for (const [name, value] of Object.entries(headers)) request.setRequestHeader(name, value);
      const start = this.offset;
      request.upload.onprogress = (event) => {
        watch(this.stallSeconds);
        this.report(start + event.loaded);
      };
      request.upload.onload = () => watch(this.stallSeconds * 2);
      request.onloadend = () => clearTimeout(timer);
      request.onload = () => {
        this.request = null;
        const offset = Number(request.getResponseHeader("Upload-Offset"));
        if (request.status === 204) this.expires = expiry({ get: (name) => request.getResponseHeader(name) }) ?? this.expires;
        if (request.status !== 204) reject(failure(request.status, request.responseText, "Uploading", request.getResponseHeader("Retry-After")));
        else if (!Number.isInteger(offset) || offset <= start || offset > this.file.size) reject(failure(409, "", "Uploading"));
        else resolve(offset);
      };
      request.onerror = () => {
        this.request = null;
        // A file the browser can no longer read fails the request as a dropped connection does, and was retried as
        // one for two minutes, then called a lost connection. Reading a byte of it tells the two apart.
        blob.slice(0, 1).arrayBuffer().then(() => reject(connectionLost()), () => reject(unreadable(this.file)));
      };
      request.onabort = () => {
        this.request = null;
        reject(stalled && !this.aborted ? connectionLost() : new Error("The upload was stopped."));
      };
      watch(this.stallSeconds);
      request.send(blob);
    });
  }

  report(sent = this.offset) {
    const now = performance.now() / 1000;
    this.speedSamples.push({ sent, now });
    while (this.speedSamples.length > 2 && now - this.speedSamples[0].now > 5) this.speedSamples.shift();
    const first = this.speedSamples[0];
    const speed = now > first.now ? (sent - first.sent) / (now - first.now) : 0;
    const total = this.file.size;
    this.onProgress({ sent, total, speed, remaining: speed > 0 ? (total - sent) / speed : null, resumedFrom: this.resumedFrom });
  }
}
