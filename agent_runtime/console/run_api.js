// The API calls only the run page makes, beside the shared ones in api.js.

import { api, ApiError, token } from "./api.js";

/** The cursor of the checkpoints list that starts after checkpoint `seq`: the route's
 * cursor is the last seq read, base64url-encoded (routes.py, encode_cursor). Asking for
 * a page by position lets a long timeline open at its end and jump anywhere, without
 * reading every page before it. */
function cursorAfter(seq) {
  return btoa(String(seq)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Up to 100 checkpoint summaries with seq > `afterSeq`, oldest first. */
export function checkpointsAfter(runId, afterSeq) {
  return api.listCheckpoints(runId, afterSeq > 0 ? cursorAfter(afterSeq) : undefined)
    .then((page) => page.checkpoints);
}

/** POST /runs/{id}/fork with what the person chose: the checkpoint, and optionally
 * the variables that replace its own and the new run's token limit. */
export async function forkRun(runId, { seq, variables, maxTotalTokens }) {
  const body = { seq };
  if (variables !== undefined) body.variables = variables;
  if (maxTotalTokens !== undefined) body.maxTotalTokens = maxTotalTokens;
  const headers = { Accept: "application/json", "Content-Type": "application/json" };
  const current = token();
  if (current) headers.Authorization = `Bearer ${current}`;
  let response;
  try {
    response = await fetch(`/runs/${encodeURIComponent(runId)}/fork`, { method: "POST",
      headers, body: JSON.stringify(body), cache: "no-store", credentials: "omit" });
  } catch (error) {
    throw new ApiError(0, { detail: `the server did not answer (${error.message})` });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text.slice(0, 200) };
  }
  if (!response.ok) {
    if (response.status === 401) window.dispatchEvent(new CustomEvent("console:unauthorized"));
    throw new ApiError(response.status, data);
  }
  return data.run;
}
