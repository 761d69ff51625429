// The HTTP API, as the console calls it: its public routes, with the bearer token.
//
// The token: a first load may carry it in the address (`/#token=...`, what a
// person pastes from the serve command); it is removed from the address at
// once, so it is not in the history, a bookmark or a screenshot. A link that
// carries a token other than the tab's own never replaces it silently (any
// page can link to `/#token=...`, and a tab signed in to one tenant would
// act for another): it is held in memory until the person says which to use.
//
// Where it is kept: each tab's token is in its sessionStorage, and the token
// last chosen is also in localStorage, which a new tab starts from. So a run
// opened in a new tab does not ask for the token again, and choosing another
// token in one tab never changes the tenant of a tab already open (that is the
// per-tab sessionStorage copy). The cost: the token stays on this browser's
// disk until "Forget token" (sessionStorage alone forgot it with the tab);
// "Forget token" drops it everywhere, every open tab included.

const TOKEN_KEY = "agent-runtime.token";

export class ApiError extends Error {
  constructor(status, problem) {
    const detail = problem?.detail || problem?.title || `HTTP ${status}`;
    super(problem?.field ? `${detail} (field: ${problem.field})` : detail);
    this.status = status;
    this.problem = problem;
  }
}

/** Take a token from the address; the address keeps the rest. A token this tab has
 * none of yet is kept; one that differs from the tab's own is returned (not kept), for
 * the person to confirm. Null when there is nothing to confirm. */
export function takeTokenFromAddress() {
  const hash = window.location.hash;
  const found = hash.match(/^#(?:.*[&?])?token=([^&]*)(.*)$/);
  if (!found) return null;
  const rest = hash.replace(/(^#|[&?])token=[^&]*&?/, "$1").replace(/[&?]$/, "");
  const target = rest === "#" || rest === "" ? "#/" : rest;
  history.replaceState(null, "", window.location.pathname + target);
  let offered = "";
  try {
    offered = decodeURIComponent(found[1]).trim();
  } catch {
    return null;  // not percent-encoded text: no token
  }
  const current = token();
  if (!offered || offered === current) return null;
  if (!current) {
    setToken(offered);
    return null;
  }
  return offered;
}

/** This tab's token; a new tab starts with the one last chosen in this browser. */
export function token() {
  const own = sessionStorage.getItem(TOKEN_KEY);
  if (own !== null) return own;
  const shared = localStorage.getItem(TOKEN_KEY);
  if (shared) sessionStorage.setItem(TOKEN_KEY, shared);
  return shared;
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
  localStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
}

/** `onForgotten()` when another tab forgets the token (this tab forgets it too). */
export function onTokenForgottenElsewhere(onForgotten) {
  window.addEventListener("storage", (event) => {
    if (event.key !== TOKEN_KEY && event.key !== null) return;
    if (event.newValue === null && sessionStorage.getItem(TOKEN_KEY) !== null) {
      sessionStorage.removeItem(TOKEN_KEY);
      onForgotten();
    }
  });
}

// `asToken`: call with this token instead of the tab's (to ask who a token names
// before it is adopted); its 401 then says nothing about the tab's own token.
// `signal`: an AbortSignal that ends a request nobody waits for any more (a long-poll
// of a page the person left).
async function call(method, path, body, asToken, signal) {
  const headers = { Accept: "application/json" };
  const current = asToken ?? token();
  if (current) headers.Authorization = `Bearer ${current}`;
  const init = { method, headers, cache: "no-store", credentials: "omit", signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    if (signal?.aborted) throw error;  // the caller left: not the server's failure
    throw new ApiError(0, { detail: `the server did not answer (${error.message})` });
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { detail: text.slice(0, 200) };
    }
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401 && asToken === undefined) {
      window.dispatchEvent(new CustomEvent("console:unauthorized"));
    }
    throw error;
  }
  return data;
}

const run = (id) => `/runs/${encodeURIComponent(id)}`;

export const api = {
  /** The tenant the tab's token (or `asToken`) names. */
  whoami: (asToken) => call("GET", "/whoami", undefined, asToken).then((data) => data.tenant),
  /** A page of runs, newest first; `search` holds GET /runs' filters (status, parent,
   * agent, idPrefix, createdAfter, createdBefore), an empty one is not sent. */
  listRuns({ limit = 25, cursor, ...search } = {}) {
    const query = new URLSearchParams({ limit: String(limit) });
    for (const [name, value] of Object.entries(search)) {
      if (value) query.set(name, value);
    }
    if (cursor) query.set("cursor", cursor);
    return call("GET", `/runs?${query}`);
  },
  /** A manifest's problems and declared variables, as the server reads it. */
  validateManifest: (manifest) => call("POST", "/manifests/validate", { manifest }),
  getRun: (id) => call("GET", run(id)).then((data) => data.run),
  // A large output is not in the run (it has `outputRef`): this returns it.
  getOutput: (id) => call("GET", `${run(id)}/output`).then((data) => data.output),
  createRun: (body) => call("POST", "/runs", body).then((data) => data.run),
  listCheckpoints(id, cursor) {
    const query = new URLSearchParams({ limit: "100" });
    if (cursor) query.set("cursor", cursor);
    return call("GET", `${run(id)}/checkpoints?${query}`);
  },
  getCheckpoint: (id, seq) =>
    call("GET", `${run(id)}/checkpoints/${encodeURIComponent(seq)}`).then((data) => data.checkpoint),
  answerApproval: (id, approvalId, approved, response) =>
    call("POST", `${run(id)}/approvals/${encodeURIComponent(approvalId)}`,
      response === undefined ? { approved } : { approved, response }).then((data) => data.run),
  resume: (id, maxTotalTokens) =>
    call("POST", `${run(id)}/resume`,
      maxTotalTokens === undefined ? {} : { maxTotalTokens }).then((data) => data.run),
  cancel: (id) => call("POST", `${run(id)}/cancel`).then((data) => data.run),
  fork: (id, seq) => call("POST", `${run(id)}/fork`, seq === undefined ? {} : { seq })
    .then((data) => data.run),
  /** A page of the run's event log after the cursor `after`; with `wait`, an empty page
   * is held by the server up to that many seconds for the next event. */
  listEvents(id, { after = 0, limit = EVENTS_PAGE, wait = 0, signal } = {}) {
    const query = new URLSearchParams({ after: String(after), limit: String(limit),
      wait: String(wait) });
    return call("GET", `${run(id)}/events?${query}`, undefined, undefined, signal);
  },
  listEffects: (id) => call("GET", `${run(id)}/effects`).then((data) => data.effects),
  settleEffect: (id, key, action, result) =>
    call("POST", `${run(id)}/effects/${encodeURIComponent(key)}`,
      action === "result" ? { action, result } : { action }).then((data) => data.run),
  // The console's own files (examples offered by the start form).
  async consoleFile(name) {
    const response = await fetch(`/console/${name}`, { cache: "no-store" });
    if (!response.ok) throw new ApiError(response.status, { detail: `no console file ${name}` });
    return response.text();
  },
};

export const TERMINAL = new Set(["completed", "failed", "cancelled"]);

const EVENTS_PAGE = 200;
// Below the server's cap (20 s by default); an empty page ends the wait sooner on a
// host that caps it lower.
const EVENTS_WAIT_SECONDS = 15;
const RETRY_MS = [1000, 2000, 5000, 10000];

/** Follow a run's event log from the cursor `after`: each page read is handed to
 * `onPage(page)` (its events, its cursor, the run's status), in order. Pages are read
 * back to back while the log has more; then the next read long-polls. The cursor only
 * moves forward: a failed read is asked again from the same cursor, after a pause.
 * Ends when a page is empty and the run has ended (the log is whole), when the run is
 * gone (404), or when `stop()` is called (the person left the page). Returns `stop`. */
export function followEvents(id, { after = 0, onPage, onEnd = () => {} }) {
  const control = new AbortController();
  let cursor = after;
  let failures = 0;
  const pause = (ms) => new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    control.signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
  (async () => {
    let waiting = false;  // the first read answers at once: the page draws what is there
    while (!control.signal.aborted) {
      let page;
      try {
        page = await api.listEvents(id, { after: cursor, wait: waiting ? EVENTS_WAIT_SECONDS : 0,
          signal: control.signal });
      } catch (error) {
        if (control.signal.aborted) return;
        if (error.status === 404 || error.status === 401 || error.status === 403) {
          onEnd(error);
          return;
        }
        await pause(RETRY_MS[Math.min(failures, RETRY_MS.length - 1)]);
        failures += 1;
        continue;
      }
      failures = 0;
      if (control.signal.aborted) return;
      // The server names the next `after`; never a step back (a stale answer would
      // otherwise replay events already handed on).
      if (typeof page.cursor === "number" && page.cursor > cursor) cursor = page.cursor;
      try {
        await onPage(page);
      } catch (error) {
        console.warn("drawing a page of events failed", error);
      }
      if (!page.events.length && TERMINAL.has(page.status)) {
        onEnd(null);
        return;
      }
      waiting = page.events.length < EVENTS_PAGE;
    }
  })();
  return () => control.abort();
}
