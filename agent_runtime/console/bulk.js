// Acting on many runs at once: cancel, resume, fork or approve the selected runs,
// each through its own per-run route, with one result line per run.
//
// A run already finished is not an error: cancelling a completed run reports
// "already completed". Each run is read first (the list may be seconds old), so
// the action is the one its current state allows; a 409 from the action is read
// again, as the run may have finished in between.

import { ApiError, TERMINAL, api } from "./api.js";
import { fill, h } from "./dom.js";
import { describeError } from "./notice.js";

// Requests in flight at once: enough to finish 50 runs quickly, few enough that a
// host bounding its runs (429) is not flooded.
const PARALLEL = 4;

const ACTIONS = {
  cancel: {
    label: "Cancel", verb: "cancel", danger: true,
    async act(run) {
      if (TERMINAL.has(run.status)) return skipped(`already ${run.status}`);
      const after = await api.cancel(run.runId);
      return after.status === "cancelled" ? done("cancelled")
        : skipped(`already ${after.status}`);
    },
  },
  resume: {
    label: "Resume", verb: "resume",
    async act(run) {
      if (run.status === "completed") return skipped("already completed");
      if (run.status === "running") return skipped("already running");
      if (TERMINAL.has(run.status)) {
        return skipped(`already ${run.status}: fork it to continue from a checkpoint`);
      }
      const after = await api.resume(run.runId);
      return done(`resumed (${after.status})`);
    },
  },
  fork: {
    label: "Fork", verb: "fork",
    async act(run) {
      const created = await api.fork(run.runId);
      return done("forked as ", created.runId);
    },
  },
  approve: {
    label: "Approve", verb: "approve",
    async act(run) {
      if (TERMINAL.has(run.status)) return skipped(`already ${run.status}`);
      const approvalId = run.suspension?.details?.approvalId;
      if (run.status !== "suspended" || run.suspension?.reason !== "approval" || !approvalId) {
        return skipped(`not waiting for an approval (${run.status})`);
      }
      const after = await api.answerApproval(run.runId, approvalId, true);
      return done(`approved (${after.status})`);
    },
  },
};

const done = (text, runId) => ({ kind: "ok", text, runId });
const skipped = (text) => ({ kind: "skipped", text });
const failed = (text) => ({ kind: "error", text });

async function outcome(action, runId) {
  let run;
  try {
    run = await api.getRun(runId);
  } catch (error) {
    return failed(error.status === 404 ? "no such run" : describeError(error));
  }
  try {
    return await action.act(run);
  } catch (error) {
    if (error instanceof ApiError && error.status === 409) {
      // It may have finished meanwhile: that is its answer, not a failure.
      const now = await api.getRun(runId).catch(() => null);
      if (now && TERMINAL.has(now.status) && action !== ACTIONS.fork) {
        return skipped(`already ${now.status}`);
      }
    }
    return failed(describeError(error));
  }
}

/** Run `action` on every id (a few at a time); `onResult(index, result)` as each ends. */
async function actOnAll(action, ids, onResult) {
  let next = 0;
  const worker = async () => {
    while (next < ids.length) {
      const index = next;
      next += 1;
      onResult(index, await outcome(action, ids[index]));
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL, ids.length) }, worker));
}

/** The bulk bar: what is selected, the actions, a confirmation, the results.
 * `selected()` gives the chosen run ids; `runLink(id)` draws a link to a run;
 * `onDone()` is called when an action has finished (to refresh the list). */
export function bulkActions({ selected, runLink, onDone }) {
  const count = h("span", { class: "bulk-count", "aria-live": "polite" }, "No runs selected");
  const buttons = Object.entries(ACTIONS).map(([name, action]) => h("button", {
    type: "button", "data-action": name, class: action.danger ? "danger" : null, disabled: true,
  }, `${action.label} selected`));
  const confirm = h("div", { class: "bulk-confirm", hidden: true });
  const results = h("section", { class: "bulk-results", "aria-labelledby": "bulk-results-title",
    hidden: true });
  const bar = h("div", { class: "bulk", role: "group", "aria-label": "Act on the selected runs" },
    count, h("div", { class: "buttons" }, buttons), confirm);
  let busy = false;

  function update() {
    const ids = selected();
    count.textContent = ids.length ? `${ids.length} selected` : "No runs selected";
    for (const button of buttons) button.disabled = busy || ids.length === 0;
  }

  async function start(name) {
    const action = ACTIONS[name];
    const ids = selected();
    fill(confirm);
    confirm.hidden = true;
    busy = true;
    update();
    const lines = ids.map((id) => h("li", { "data-run-id": id, class: "pending" },
      runLink(id), " — ", h("span", { class: "outcome" }, "waiting…")));
    const summary = h("p", { class: "bulk-summary" }, `${action.label}: 0 of ${ids.length} done`);
    fill(results, h("h2", { id: "bulk-results-title", tabindex: -1 },
      `${action.label}: ${ids.length} run${ids.length === 1 ? "" : "s"}`),
    summary, h("ol", { class: "bulk-list" }, lines));
    results.hidden = false;
    const tally = { ok: 0, skipped: 0, error: 0 };
    let finished = 0;
    await actOnAll(action, ids, (index, result) => {
      finished += 1;
      tally[result.kind] += 1;
      lines[index].className = `outcome-${result.kind}`;
      fill(lines[index].querySelector(".outcome"), result.text,
        result.runId ? runLink(result.runId) : null);
      summary.textContent = `${action.label}: ${finished} of ${ids.length} done`;
    });
    summary.textContent = `${action.label}: ${tally.ok} done, ${tally.skipped} not needed, `
      + `${tally.error} failed, of ${ids.length}.`;
    busy = false;
    update();
    onDone();
  }

  buttons.forEach((button) => button.addEventListener("click", () => {
    const name = button.dataset.action;
    const action = ACTIONS[name];
    const ids = selected();
    const yes = h("button", { type: "button", class: action.danger ? "danger" : "primary" },
      `Yes, ${action.verb} ${ids.length} run${ids.length === 1 ? "" : "s"}`);
    const no = h("button", { type: "button" }, "Keep them");
    fill(confirm, h("span", {}, `${action.label} ${ids.length} selected run`
      + `${ids.length === 1 ? "" : "s"}?`), yes, no);
    confirm.hidden = false;
    yes.addEventListener("click", () => start(name));
    no.addEventListener("click", () => {
      fill(confirm);
      confirm.hidden = true;
      button.focus();
    });
    yes.focus();
  }));
  update();
  return { bar, results, update };
}
