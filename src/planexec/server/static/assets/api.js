// Talking to the planexec serve API: the token, JSON requests, and a run's event stream.
//
// The token lives in sessionStorage (this tab only, gone when it closes). Every request sends it
// as a bearer token; so does the event stream, which is why it is read with fetch() and a stream
// reader rather than EventSource (which cannot send headers).

const TOKEN_KEY = "planexec.token";

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token.trim());
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/**
 * Take a token from the address bar's fragment (`#token=...`, alone or after a route as
 * `#/runs/ID?token=...`), keep it, and take it out of the address bar and history.
 */
export function takeTokenFromUrl() {
  const hash = location.hash;
  const match = /[#?&]token=([^&]*)/.exec(hash);
  if (!match) return false;
  setToken(decodeURIComponent(match[1]));
  let rest = hash.slice(0, match.index).replace(/^#/, "");
  if (!rest.startsWith("/")) rest = "/";
  history.replaceState(null, "", `${location.pathname}${location.search}#${rest}`);
  return true;
}

/** An error the API answered with: its HTTP status, code, message and problems. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message || `the server answered ${status}`);
    this.status = status;
    this.code = error.code ?? "http_error";
    this.problems = Array.isArray(error.problems) ? error.problems : [];
  }
}

/** Listeners told when the server refuses the token (401). */
const unauthorizedListeners = new Set();
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

/** The API's base: the folder the page was served from (so a path prefix in front works). */
function url(path) {
  return new URL(path.replace(/^\//, ""), new URL(".", location.href)).toString();
}

function headers(extra = {}) {
  const token = getToken();
  return { Accept: "application/json", ...(token ? { Authorization: `Bearer ${token}` } : {}), ...extra };
}

/** A JSON request; resolves with the body, or rejects with an ApiError (or a network TypeError). */
export async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }), signal };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(url(path), init);
  let data = null;
  const text = await response.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401) for (const listener of unauthorizedListeners) listener(error);
    throw error;
  }
  return data;
}

/**
 * Follow a run's events as Server-Sent Events, from event `after` + 1 on.
 *
 * Calls onEvent({seq, kind, event}) for each event in log order, onWaiting() when the run is
 * suspended waiting for a human, onEnd(data) when the run is finished (the stream is over), and
 * onState("live" | "reconnecting" | "closed") as the connection changes. A dropped connection is
 * opened again with Last-Event-ID, so no event is lost or repeated. Returns {close()}.
 */
export function followRun(runId, { after = 0, onEvent, onWaiting, onEnd, onState = () => {} }) {
  const controller = new AbortController();
  let lastId = after;
  let delay = 500;
  let done = false;

  const dispatch = (message) => {
    if (message.id !== undefined && /^\d+$/.test(message.id)) lastId = Number(message.id);
    let data = null;
    try {
      data = message.data ? JSON.parse(message.data) : null;
    } catch {
      data = message.data;
    }
    if (message.event === "end") {
      done = true;
      onEnd?.(data);
    } else if (message.event === "waiting") {
      onWaiting?.(data);
    } else if (message.id !== undefined) {
      onEvent?.({ seq: lastId, kind: message.event ?? data?.kind, event: data });
    }
  };

  const readOnce = async () => {
    const response = await fetch(url(`/v1/runs/${encodeURIComponent(runId)}/events/stream`), {
      headers: headers({ Accept: "text/event-stream", ...(lastId > 0 ? { "Last-Event-ID": String(lastId) } : {}) }),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      const text = await response.text();
      let body = null;
      try {
        body = JSON.parse(text);
      } catch {
        body = null;
      }
      throw new ApiError(response.status, body);
    }
    onState("live");
    delay = 500;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let message = {};
    let dataLines = [];
    for (;;) {
      const { value, done: streamDone } = await reader.read();
      if (streamDone) return;
      buffer += value;
      // lines end with \r\n, \n or \r; a trailing \r may be the first half of \r\n, so it waits
      let cut;
      while ((cut = buffer.search(/\r\n|\n|\r(?=[^\n])/)) >= 0) {
        const line = buffer.slice(0, cut);
        buffer = buffer.slice(cut + (buffer.startsWith("\r\n", cut) ? 2 : 1));
        if (line === "") {
          if (dataLines.length || message.event || message.id !== undefined) {
            message.data = dataLines.join("\n");
            dispatch(message);
            if (done) return;
          }
          message = {};
          dataLines = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value2 = colon < 0 ? "" : line.slice(colon + 1);
        if (value2.startsWith(" ")) value2 = value2.slice(1);
        if (field === "data") dataLines.push(value2);
        else if (field === "event") message.event = value2;
        else if (field === "id") message.id = value2;
      }
    }
  };

  (async () => {
    while (!done && !controller.signal.aborted) {
      try {
        await readOnce();
      } catch (error) {
        if (controller.signal.aborted) break;
        if (error instanceof ApiError && error.status < 500 && error.status !== 429) {
          onState("closed", error);
          return;
        }
      }
      if (done || controller.signal.aborted) break;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10_000);
    }
    onState("closed");
  })();

  return {
    close() {
      controller.abort();
    },
  };
}
