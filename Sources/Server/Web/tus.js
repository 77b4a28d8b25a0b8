// A small tus 1.0 client (core protocol with the creation extension) for the server's /v1/tus endpoint. An upload
// is remembered in localStorage by the file's name, size and modification time until it completes, so choosing the
// same file again after a reload or a dropped connection continues from the offset the server reports (HEAD).

import { authHeaders } from "./api.js";

const storageKey = "transcoderd.uploads";
const version = "1.0.0";
// The server keeps an unfinished upload for a day (--tus-expiry-hours): older entries are forgotten.
const rememberFor = 24 * 3600 * 1000;
// Waits before each new try after a dropped connection, in seconds.
const retryDelays = [1, 2, 4, 8, 16];

function remembered() {
  let all;
  try { all = JSON.parse(localStorage.getItem(storageKey) || "{}"); } catch { all = {}; }
  const now = Date.now();
  return Object.fromEntries(Object.entries(all).filter(([, value]) => value && now - value.at < rememberFor));
}

function remember(fingerprint, url) {
  const all = remembered();
  if (url) all[fingerprint] = { url, at: Date.now() }; else delete all[fingerprint];
  localStorage.setItem(storageKey, JSON.stringify(all));
}

export function fingerprint(file) {
  return `${file.name}\u0000${file.size}\u0000${file.lastModified}`;
}

// The files whose uploads did not finish, as remembered.
export function unfinishedUploads() {
  return Object.entries(remembered()).map(([key, value]) => ({ name: key.split("\u0000")[0], url: value.url }));
}

function base64(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

function failure(status, text, doing) {
  let message = `${doing} failed (HTTP ${status}).`;
  try {
    const body = JSON.parse(text);
    if (body?.error?.message) message = body.error.message;
  } catch { /* not JSON */ }
  const error = new Error(message);
  error.status = status;
  return error;
}

export class TusUpload {
  // `onProgress({sent, total, speed, remaining, resumedFrom})` while bytes go; `chunkSize` bytes per PATCH.
  // `onRetry(seconds, error)` before a new try after a dropped connection.
  constructor(file, { endpoint = "/v1/tus", chunkSize = 4 * 1024 * 1024, onProgress = () => {}, onRetry = () => {} } = {}) {
    this.file = file;
    this.endpoint = endpoint;
    this.chunkSize = chunkSize;
    this.onProgress = onProgress;
    this.onRetry = onRetry;
    this.url = null;
    this.offset = 0;
    this.resumedFrom = null;
    this.aborted = false;
    this.request = null;
    this.speedSamples = [];
  }

  // Uploads the whole file; resolves with the upload's id (usable as a job's input).
  async start() {
    const key = fingerprint(this.file);
    const known = remembered()[key];
    if (known) {
      const offset = await this.serverOffset(known.url);
      if (offset !== null) {
        this.url = known.url;
        this.offset = offset;
        this.resumedFrom = offset;
      } else {
        remember(key, null);
      }
    }
    if (!this.url) {
      const url = await this.create();
      if (this.aborted) throw new Error("The upload was stopped.");
      this.url = url;
      remember(key, this.url);
    }
    this.report();
    let failures = 0;
    while (this.offset < this.file.size) {
      if (this.aborted) throw new Error("The upload was stopped.");
      const end = Math.min(this.file.size, this.offset + this.chunkSize);
      try {
        this.offset = await this.patch(this.file.slice(this.offset, end));
        failures = 0;
      } catch (error) {
        // A dropped connection (or an offset the server does not agree with): wait, ask the server where the
        // upload stands, and go on from there. Anything else (refused, signed out) ends the upload.
        if (this.aborted || !(error.status === 0 || error.status === 409) || failures >= retryDelays.length) throw error;
        this.onRetry(retryDelays[failures], error);
        await sleep(retryDelays[failures]);
        failures += 1;
        const offset = await this.serverOffset(this.url).catch(() => null);
        if (offset !== null) this.offset = offset;
      }
      this.report();
    }
    if (this.file.size === 0) await this.patch(new Blob([]));
    remember(key, null);
    return this.url.split("/").pop();
  }

  abort() {
    this.aborted = true;
    if (this.request) this.request.abort();
  }

  // The server's offset of the upload at `url`; null when it has no such upload (gone, expired). Throws for other
  // answers (signed out, server trouble): the upload is then kept for later.
  async serverOffset(url) {
    const response = await fetch(url, { method: "HEAD", headers: authHeaders({ "Tus-Resumable": version }) });
    if (response.status === 404 || response.status === 410) return null;
    if (!response.ok) throw failure(response.status, "", "Asking the server how far the upload got");
    const offset = Number(response.headers.get("Upload-Offset"));
    const length = Number(response.headers.get("Upload-Length"));
    if (!Number.isFinite(offset) || length !== this.file.size) return null;
    return offset;
  }

  async create() {
    const metadata = `filename ${base64(this.file.name)}` + (this.file.type ? `,filetype ${base64(this.file.type)}` : "");
    const response = await fetch(this.endpoint, {
      method: "POST",
      headers: authHeaders({ "Tus-Resumable": version, "Upload-Length": String(this.file.size), "Upload-Metadata": metadata }),
    });
    if (response.status !== 201) throw failure(response.status, await response.text(), "Starting the upload");
    const location = response.headers.get("Location");
    if (!location) throw new Error("The server did not say where the upload goes.");
    return new URL(location, window.location.href).pathname;
  }

  // One PATCH through XMLHttpRequest (fetch reports no upload progress); resolves with the new offset.
  patch(blob) {
    return new Promise((resolve, reject) => {
      const request = new XMLHttpRequest();
      this.request = request;
      request.open("PATCH", this.url);
      const headers = authHeaders({ "Tus-Resumable": version, "Upload-Offset": String(this.offset),
                                    "Content-Type": "application/offset+octet-stream" });
      for (const [name, value] of Object.entries(headers)) request.setRequestHeader(name, value);
      const start = this.offset;
      request.upload.onprogress = (event) => this.report(start + event.loaded);
      request.onload = () => {
        this.request = null;
        const offset = Number(request.getResponseHeader("Upload-Offset"));
        if (request.status !== 204) reject(failure(request.status, request.responseText, "Uploading"));
        else if (!Number.isInteger(offset) || offset <= start || offset > this.file.size) reject(failure(409, "", "Uploading"));
        else resolve(offset);
      };
      request.onerror = () => {
        this.request = null;
        const error = new Error("The connection to the server was lost during the upload.");
        error.status = 0;
        reject(error);
      };
      request.onabort = () => { this.request = null; reject(new Error("The upload was stopped.")); };
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
