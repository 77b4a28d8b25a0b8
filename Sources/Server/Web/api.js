// The server's API as the page uses it: every request same-origin; the access token (when the server has one) is
// kept in sessionStorage and sent as a bearer header on requests the page makes itself. Reads the browser makes on
// its own (EventSource, <video>, <img>, links) carry the HttpOnly session cookie that POST /v1/session sets instead:
// the long-lived token never goes into a URL.

const tokenKey = "transcoderd.token";

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(tokenKey) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(tokenKey, value);
  else sessionStorage.removeItem(tokenKey);
}

export function authHeaders(extra = {}) {
  const headers = { ...extra };
  const value = token();
  if (value) headers.Authorization = `Bearer ${value}`;
  return headers;
}

// Sends a request and returns the parsed JSON answer (null for an empty one); a failure throws APIError with the
// server's own code and message.
// `timeout` (milliseconds): the request is given up past it (a read repeated on a timer must not hang on a connection
// that died unseen, holding every later round back).
export async function request(method, path, { json, headers = {}, timeout } = {}) {
  const init = { method, headers: authHeaders(headers), credentials: "same-origin" };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  }
  const controller = timeout ? new AbortController() : null;
  const timer = controller ? setTimeout(() => controller.abort(), timeout) : null;
  if (controller) init.signal = controller.signal;
  let response, text;
  try {
    response = await fetch(path, init);
    text = await response.text();
  } catch (error) {
    throw new APIError(0, "network_error", `The server could not be reached (${error.message}).`);
  } finally {
    clearTimeout(timer);
  }
  let body = null;
  if (text) {
    try { body = JSON.parse(text); } catch { body = null; }
  }
  if (!response.ok) {
    const error = body && body.error ? body.error : { code: "http_" + response.status, message: `The server answered ${response.status}.` };
    throw new APIError(response.status, error.code, error.message);
  }
  return body;
}

// Sign-outs so far: a sign-in under way when one happens does not bring the token back.
let signOuts = 0;

// Exchanges the token for the session cookie (reads by the browser itself); throws APIError 401 for a wrong token.
export async function signIn(value) {
  const generation = signOuts;
  const response = await fetch("/v1/session", {
    method: "POST", credentials: "same-origin", headers: { Authorization: `Bearer ${value}` },
  });
  if (!response.ok) {
    const body = await response.json().catch(() => null);
    throw new APIError(response.status, body?.error?.code || "unauthorized", body?.error?.message || "The token was refused.");
  }
  if (generation === signOuts) setToken(value);
}

export async function signOut() {
  signOuts += 1;
  await fetch("/v1/session", { method: "DELETE", headers: authHeaders(), credentials: "same-origin" }).catch(() => {});
  setToken("");
}
