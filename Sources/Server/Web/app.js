// The page: sign in when the server asks for a token, upload a file (tus, resumable), choose settings, start a job,
// watch it, and play and download the result. User-controlled text is only ever set as text, never as HTML.

import { APIError, request, signIn, signOut, token } from "./api.js";
import { formatBytes, formatSeconds } from "./eta.js";
import { JobList } from "./jobs.js";
import { ResultView } from "./result.js";
import { TusUpload, unfinishedUploads } from "./tus.js";

const $ = (id) => document.getElementById(id);

// `renewedAt`: when the session cookie was last made (Date.now()).
const state = { upload: null, uploadID: null, fileName: null, settingsEdited: false, presets: [], renewedAt: Date.now(),
                picturesTurnedOff: false };

const jobs = new JobList({
  list: $("jobs"), empty: $("jobs-empty"), live: $("live"), template: $("job-template"),
  onShow: (job) => result.show(job),
  onDeleted: (job) => forgetDeletedInput(job),
  onRemoved: (id) => result.forget(id),
  onStreamError: () => keepSession(),
  onRetry: async (job) => {
    // An input still to be fetched (its fetch failed) is named by its URL again; one with credentials the server
    // hides cannot be.
    let input = job.input.id;
    if (job.input.url && job.input.size == null) {
      if (job.input.url.includes("REDACTED")) {
        throw new APIError(0, "not_retryable", "The input's URL holds credentials the server does not show: start the job again with its URL.");
      }
      input = { url: job.input.url };
    }
    // Its own webhook too (unless it answered 410 Gone): the retry is heard where the job was. A URL whose secret
    // the server does not show (a Slack or Discord hook) cannot be sent again: the retry goes without it, and says so.
    let webhook = job.webhook && !job.webhook.disabled ? { url: job.webhook.url, events: job.webhook.events } : undefined;
    const hidden = webhook?.url.includes("REDACTED");
    if (hidden) webhook = undefined;
    const created = await request("POST", "/v1/jobs", { json: { input, settings: job.settings, priority: job.priority, webhook } });
    jobs.add(created);
    if (hidden) $("start-error").textContent = "Retried without the job's webhook: its URL holds a secret the server does not show.";
  },
  onError: (error) => handleError(error, $("start-error")),
});

const result = new ResultView({
  section: $("result"), title: $("result-title"), name: $("result-name"), note: $("result-note"), player: $("player"), scrub: $("scrub"),
  preview: $("preview"), previewTime: $("preview-time"), downloads: $("downloads"),
  play: $("play"), mute: $("mute"), fullscreen: $("fullscreen"), clock: $("clock"), box: $("player-box"),
  inputTracks: $("input-tracks"), outputTracks: $("output-tracks"),
});

// ---- Signing in ----

function showLogin(message = "") {
  jobs.stop();
  // What the signed-out page was doing stops with it: an upload under way, the result playing behind the form.
  if (state.upload) state.upload.abort();
  state.upload = null;
  result.forget(result.jobID);
  $("app").hidden = true;
  $("login").hidden = false;
  $("sign-out").hidden = true;
  $("login-error").textContent = message;
  $("token").focus();
}

function handleError(error, where) {
  if (error.status === 401) {
    showLogin(token() ? "The token was refused; enter it again." : "");
    return;
  }
  where.textContent = error.message;
}

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await signIn($("token").value);
    state.renewedAt = Date.now();
    $("token").value = "";
    await startApp();
    if (!$("app").hidden) $("file").focus(); // not when starting sent it back to the sign-in
  } catch (error) {
    $("login-error").textContent = error.status === 401 ? "That token is not the server's." : error.message;
  }
});

$("sign-out").addEventListener("click", async () => {
  await signOut();
  showLogin();
});

// ---- Settings ----

function composedSettings() {
  const settings = {};
  const preset = $("preset").value;
  if (preset) settings.preset = preset;
  if ($("ladder").checked) {
    settings.container = "hls";
    settings.renditions = "auto";
  }
  if ($("pictures").checked) settings.thumbnails = { interval: 2, storyboard: true, poster: 0.1 };
  return settings;
}

function refreshSettings() {
  if (!state.settingsEdited) $("settings-json").value = JSON.stringify(composedSettings(), null, 2);
  clearFieldErrors();
}

function clearFieldErrors() {
  for (const id of ["preset", "ladder", "pictures", "settings"]) {
    $(`${id}-error`).textContent = "";
    const control = id === "settings" ? $("settings-json") : $(id);
    control.removeAttribute("aria-invalid");
  }
}

// Shows a validation message next to the control its key belongs to ("settings.thumbnails.interval: ..." goes
// beside the pictures checkbox; keys with no control of their own beside the JSON editor, opened).
function showSettingsError(message) {
  clearFieldErrors();
  const key = (/^settings\.([A-Za-z]+)/.exec(message) || [])[1] || "";
  const field = { preset: "preset", container: "ladder", renditions: "ladder", segmentDuration: "ladder",
                  thumbnails: "pictures" }[key] || "settings";
  if (field === "settings") $("advanced").open = true;
  $(`${field}-error`).textContent = message;
  (field === "settings" ? $("settings-json") : $(field)).setAttribute("aria-invalid", "true");
}

for (const id of ["preset", "ladder", "pictures"]) {
  $(id).addEventListener("change", () => {
    if (id === "preset" && $("preset").value === "audio") $("pictures").checked = false;
    if (id === "pictures") state.picturesTurnedOff = false; // the user's choice from now on
    state.settingsEdited = false;
    refreshSettings();
  });
}
$("settings-json").addEventListener("input", () => { state.settingsEdited = true; clearFieldErrors(); });

async function loadPresets() {
  state.presets = await request("GET", "/v1/presets");
  state.presetsLoaded = true;
  const select = $("preset");
  select.replaceChildren(select.options[0]);
  for (const preset of state.presets) {
    const option = document.createElement("option");
    option.value = preset.name;
    option.textContent = `${preset.name}: ${preset.summary}`;
    select.append(option);
  }
}

// ---- Uploading ----

async function upload(file) {
  if (state.upload) state.upload.abort();
  state.uploadID = null;
  delete $("upload").dataset.uploaded;
  state.fileName = file.name;
  $("start").disabled = true;
  $("start-error").textContent = "";
  $("upload").hidden = false;
  $("upload-name").textContent = file.name;
  $("upload-detail").textContent = "starting…";
  const progress = $("upload-progress");
  progress.value = 0;
  let announced = 0;
  const current = new TusUpload(file, {
    onRetry: (seconds, error) => {
      const why = error.status === 0 ? "connection lost" : error.message.replace(/[.\s]+$/, "");
      $("upload-detail").textContent = `${why}; trying again in ${seconds} s…`;
    },
    onProgress: ({ sent, total, speed, remaining, resumedFrom }) => {
      const step = total > 0 ? Math.floor(sent / total * 4) : 0;
      if (step > announced && step < 4) {
        announced = step;
        $("live").textContent = `${file.name}: ${step * 25} % uploaded`;
      }
      progress.value = total > 0 ? sent / total : 1;
      progress.dataset.sent = String(sent);
      const parts = [`${formatBytes(sent)} of ${formatBytes(total)}`];
      if (speed > 0) parts.push(`${formatBytes(speed)}/s`);
      if (remaining !== null && sent < total) parts.push(`${formatSeconds(remaining)} left`);
      if (resumedFrom) parts.push(`resumed at ${formatBytes(resumedFrom)}`);
      $("upload-detail").textContent = parts.join(" · ");
    },
  });
  state.upload = current;
  try {
    let stored = null;
    // Finished before (a reload before a job was made on it): the stored upload is asked for by its id, whatever
    // the tus upload's own expiry; gone (retention, deleted with a job), the file is sent anew.
    const finished = current.completedID();
    if (finished) {
      $("upload-detail").textContent = "checking the file…";
      try {
        stored = await storedUpload(finished, () => state.upload !== current, true);
        progress.value = 1;
      } catch (error) {
        if (state.upload !== current) return;
        if (error.status !== 404) throw error;
        current.forget();
        current.url = null;
      }
    }
    if (!stored) {
      const id = await current.start();
      if (state.upload !== current) return;
      // The last PATCH is answered before the server has looked at the bytes: whether they are media (and what
      // they hold) is the upload's own answer, a refusal's reason included.
      $("upload-detail").textContent = "checking the file…";
      // Complete before this choice (remembered unfinished): not found is final, not a completion under way.
      const known = current.resumedFrom === file.size;
      try {
        stored = await storedUpload(id, () => state.upload !== current, known);
      } catch (error) {
        // The bytes are refused for good, or gone (deleted with a job): nothing to continue.
        if (error.status === 422 || (known && error.status === 404)) current.forget();
        throw error;
      }
    }
    current.keepCompleted();
    if (state.upload !== current) return;
    state.uploadID = stored.id;
    // Pictures are taken from the video: a file with none (a song, its cover aside) would be refused with them.
    // Turned off for it, they are turned on again for the next file that has a video.
    const hasVideo = (stored.tracks || []).some((track) => track.mediaType === "video" && !track.coverArt);
    if (hasVideo ? state.picturesTurnedOff : $("pictures").checked) {
      $("pictures").checked = hasVideo;
      state.picturesTurnedOff = !hasVideo;
      refreshSettings();
    }
    $("upload-detail").textContent = `uploaded (${formatBytes(file.size)}) · ready to transcode`;
    $("upload").dataset.uploaded = stored.id;
    $("start").disabled = false;
    $("live").textContent = `${file.name} uploaded`;
  } catch (error) {
    if (state.upload !== current) return;
    $("upload-detail").textContent = "";
    handleError(error, $("start-error"));
  }
}

// The stored upload a completed tus upload became. Asked again for a while when the answer may change (the
// connection, the server busy, the upload still being completed elsewhere): a refusal of the bytes (422) is final,
// and so is not found for an upload complete before (`known`).
async function storedUpload(id, abandoned, known = false) {
  for (let tries = 0; ; tries += 1) {
    try {
      return await request("GET", `/v1/uploads/${encodeURIComponent(id)}`);
    } catch (error) {
      if (abandoned() || tries >= 10 || ![0, 404, 423, 502, 503, 504].includes(error.status) || (known && error.status === 404)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 1000 * Math.min(2 ** tries, 5)));
    }
  }
}

// The upload a deleted job took with it (its last job: the server deletes an input no job uses) can start nothing.
async function forgetDeletedInput(job) {
  if (!job?.input?.id || job.input.id !== state.uploadID) return;
  try {
    await request("GET", `/v1/uploads/${encodeURIComponent(job.input.id)}`);
  } catch (error) {
    if (error.status !== 404 || job.input.id !== state.uploadID) return;
    state.uploadID = null;
    delete $("upload").dataset.uploaded;
    $("start").disabled = true;
    $("upload-detail").textContent = "was deleted with its last job: choose the file again to transcode it.";
  }
}

$("file").addEventListener("change", () => {
  const file = $("file").files[0];
  // Emptied, so that choosing the same file again (how an upload that failed is resumed) is a change: a browser
  // fires none for the file the input already holds.
  $("file").value = "";
  if (file) upload(file);
});

// A file dropped anywhere on the page is taken (the box is where to aim): a drop the page did not take would make
// the browser leave the page for the file, and an upload under way with it.
const drop = $("drop");
// Text dragged into a field is the field's.
const carriesFiles = (event) => event.dataTransfer?.types?.includes("Files");
document.addEventListener("dragover", (event) => {
  if (!carriesFiles(event)) return;
  event.preventDefault();
  event.dataTransfer.dropEffect = $("app").hidden ? "none" : "copy";
  drop.classList.add("over");
});
document.addEventListener("dragleave", (event) => { if (!event.relatedTarget) drop.classList.remove("over"); });
document.addEventListener("drop", (event) => {
  if (!carriesFiles(event)) return;
  event.preventDefault();
  drop.classList.remove("over");
  if ($("app").hidden) return;
  const files = event.dataTransfer.files;
  if (files.length === 0) return;
  upload(files[0]);
  const left = files.length - 1;
  if (left > 0) {
    $("start-error").textContent = `One file at a time: ${files[0].name} is uploading; ${left === 1 ? "the other one was" : `the other ${left} were`} left.`;
  }
});

// ---- Starting a job ----

$("start").addEventListener("click", async () => {
  $("start-error").textContent = "";
  let settings;
  try {
    settings = JSON.parse($("settings-json").value || "{}");
  } catch (error) {
    showSettingsError(`The settings are not valid JSON: ${error.message}`);
    return;
  }
  $("start").disabled = true;
  try {
    // Taken before the request: another file chosen meanwhile replaces both.
    const madeFrom = state.upload, input = state.uploadID;
    const job = await request("POST", "/v1/jobs", { json: { input, settings } });
    if (madeFrom?.url?.endsWith(`/${input}`)) madeFrom.forget(); // made into a job: not to be taken again as it is
    clearFieldErrors();
    jobs.add(job);
    $("live").textContent = `Job started for ${state.fileName}`;
  } catch (error) {
    if (error instanceof APIError && error.code === "invalid_settings") showSettingsError(error.message);
    else handleError(error, $("start-error"));
  } finally {
    $("start").disabled = state.uploadID === null;
  }
});

// ---- Start-up ----

async function startApp() {
  try {
    const session = await request("GET", "/v1/session");
    // The token is needed for every change the page makes: without it in this tab, ask for it first. With it
    // but no session cookie (expired), sign in again quietly: the browser's own reads need the cookie.
    if (session.required && !token()) { showLogin(); return; }
    // Renewed at every start, cookie or not: the timer below renews it 6 hours from now, so a page reloaded late
    // in the cookie's 12 hours would have lost it before then.
    if (session.required) {
      try { await signIn(token()); } catch { showLogin("The session ended; enter the token again."); return; }
      state.renewedAt = Date.now();
    }
    state.presetsLoaded = false;
    await loadPresets();
  } catch (error) {
    if (error instanceof APIError && error.status === 401) { showLogin(); return; }
    $("start-error").textContent = error.message;
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = !token();
  refreshSettings();
  const unfinished = unfinishedUploads();
  if (unfinished.length > 0) {
    $("upload").hidden = false;
    $("upload-name").textContent = unfinished.map((entry) => entry.name).join(", ");
    $("upload-detail").textContent = "did not finish uploading: choose the same file again to continue where it stopped.";
  }
  try {
    await jobs.load();
  } catch (error) {
    handleError(error, $("start-error"));
  }
}

// Presets that could not be read at the start (a 503 while the server restarted) are read again every few seconds:
// the choice kept only "Default" until a reload.
setInterval(() => {
  if (state.presetsLoaded === false && !$("app").hidden) loadPresets().catch(() => {});
}, 5000);

// The session cookie lasts 12 hours: renewed once 6 have passed by the wall clock, looked at every minute (a timer
// of 6 hours would count only the time the computer was awake).
setInterval(() => {
  if (token() && Date.now() - state.renewedAt > 6 * 3600 * 1000) signIn(token()).then(() => { state.renewedAt = Date.now(); }, () => {});
}, 60 * 1000);

// The cookie may lapse all the same: then every stream fails (a stream cannot tell why) and the player and the
// links are refused. When a stream or the player fails, or the page is shown again, the server is asked whether
// the cookie still holds, and the page signs in again quietly if not; at most once a minute, unless the asking
// itself failed (the network not back yet after a sleep).
let sessionCheckedAt = 0;
async function keepSession() {
  if (!token() || Date.now() - sessionCheckedAt < 60 * 1000) return;
  sessionCheckedAt = Date.now();
  try {
    const session = await request("GET", "/v1/session");
    if (session.required && !session.session && token()) {
      await signIn(token());
      state.renewedAt = Date.now();
    }
  } catch {
    sessionCheckedAt = 0;
  }
}
// Shown again: the session first, then the streams it carries.
document.addEventListener("visibilitychange", async () => {
  if (!document.hidden) await keepSession();
  jobs.visibilityChanged();
});
$("player").addEventListener("error", () => keepSession());

startApp();
