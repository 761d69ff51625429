// The HTTP API, as the console calls it: its public routes, with the bearer token.
//
// The token: a first load may carry it in the address (`/#token=...`, what a
// person pastes from the serve command); it is removed from the address at
// once, so it is not in the history, a bookmark or a screenshot, and kept in
// sessionStorage (this tab's only: closing the tab forgets it). A link that
// carries a token other than the tab's own never replaces it silently (any
// page can link to `/#token=...`, and a tab signed in to one tenant would
// act for another): it is held in memory until the person says which to use.

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

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// `asToken`: call with this token instead of the tab's (to ask who a token names
// before it is adopted); its 401 then says nothing about the tab's own token.
async function call(method, path, body, asToken) {
  const headers = { Accept: "application/json" };
  const current = asToken ?? token();
  if (current) headers.Authorization = `Bearer ${current}`;
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
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
  listRuns({ status, limit = 25, cursor } = {}) {
    const query = new URLSearchParams({ limit: String(limit) });
    if (status) query.set("status", status);
    if (cursor) query.set("cursor", cursor);
    return call("GET", `/runs?${query}`);
  },
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
