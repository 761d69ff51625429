// The suspension card: what a suspended run waits for, and the action that answers it.

import { api } from "./api.js";
import { fill, formatNumber, h } from "./dom.js";
import { announce, describeError } from "./notice.js";
import { renderValue } from "./output.js";
import { REASONS, runLink } from "./runs.js";

/** Text as the JSON value it spells, else as a string; empty: nothing. */
function valueOf(text) {
  const trimmed = text.trim();
  if (!trimmed) return undefined;
  try {
    return JSON.parse(trimmed);
  } catch {
    return text;
  }
}

/** A button that runs `action` once at a time and reports its failure. */
function actionButton(label, action, className = "") {
  const button = h("button", { type: "button", class: className }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await action();
    } catch (error) {
      announce(describeError(error), "error");
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/** What the run produced last before it asked: the latest step result's output. */
async function showLatestResult(run, slot) {
  if (!run.checkpointSeq) return;
  try {
    const checkpoint = await api.getCheckpoint(run.runId, run.checkpointSeq);
    const latest = checkpoint.stepResults.filter((entry) => Object.hasOwn(entry, "output")).at(-1);
    if (!latest) return;
    fill(slot, h("p", { class: "muted" }, `The latest result, of step ${latest.stepPath}:`),
      renderValue(latest.output));
  } catch {
    // Only context: the card works without it.
  }
}

// What rejecting an approval does to the run, by the approval step's `action`: the run
// does not continue past a rejection (approval.py).
const ON_REJECT = {
  pause: () => ["the run ends failed (", h("code", {}, "approval_rejected"), ")"],
  cancel: () => ["the run is cancelled"],
  complete: () => ["the run ends completed, without its remaining steps"],
};

function onReject(action) {
  return (ON_REJECT[action] ?? ON_REJECT.pause)();
}

function asText(parts) {
  return parts.map((part) => (typeof part === "string" ? part : part.textContent)).join("");
}

/** Say again what rejecting does, in the card inside `slot`, now that the run's log
 * may have said the approval step's action (the card is not drawn again: a response
 * being typed stays). */
export function showRejectOutcome(slot, approvals) {
  const line = slot.querySelector(".reject-outcome");
  if (line) {
    fill(line, "Rejecting ends the run: ", onReject(approvals.get(line.dataset.approval)), ".");
  }
}

/** The card for `run` (suspended); `changed` is called after an action succeeded.
 * `approvals`: approval id -> the step's action on rejection, from the run's event log. */
export function suspensionCard(run, changed, approvals = new Map()) {
  const { reason, details } = run.suspension;
  const title = h("h2", { id: "suspension-title" }, REASONS[reason] ?? `Suspended: ${reason}`);
  const card = h("section", { class: `card suspension suspension-${reason}`,
    "aria-labelledby": "suspension-title" }, title);
  const done = async (message, promise) => {
    await promise;
    announce(message);
    await changed();
  };

  if (reason === "approval") {
    const context = h("div", { class: "approval-context" });
    showLatestResult(run, context);
    const response = h("textarea", { id: "approval-response", rows: 3,
      "aria-describedby": "approval-response-hint", spellcheck: "true" });
    // Read when answered: the log may say the step's action after the card is drawn.
    const answer = (approved) => done(approved ? "Approved; the run continues."
      : `Rejected; ${asText(onReject(approvals.get(details.approvalId)))}.`,
    api.answerApproval(run.runId, details.approvalId, approved, valueOf(response.value)));
    card.append(
      h("p", { class: "prompt" }, details.prompt ?? ""),
      details.stepPath ? h("p", { class: "muted" }, `Step ${details.stepPath}`) : null,
      context,
      h("label", { for: "approval-response" }, "Response (optional)"), response,
      h("p", { id: "approval-response-hint", class: "hint" },
        "Recorded with your answer: JSON, or plain text."),
      h("p", { class: "hint reject-outcome", "data-approval": details.approvalId },
        "Rejecting ends the run: ", onReject(approvals.get(details.approvalId)), "."),
      h("div", { class: "buttons" },
        actionButton("Approve", () => answer(true), "primary"),
        actionButton("Reject", () => answer(false), "danger")));
  } else if (reason === "token-budget") {
    const limit = h("input", { id: "new-budget", type: "number", min: 1, step: 1,
      value: String(Math.max((details.maxTotalTokens ?? 0) * 2, (details.consumedTokens ?? 0) + 1)) });
    card.append(
      h("p", {}, `The run used ${formatNumber(details.consumedTokens)} of its `
        + `${formatNumber(details.maxTotalTokens)} tokens.`),
      h("label", { for: "new-budget" }, "New token limit (replaces the old one)"), limit,
      h("div", { class: "buttons" }, actionButton("Resume with this limit", () => {
        const value = Number(limit.value);
        if (!Number.isInteger(value) || value < 1) throw new Error("the limit must be a whole number");
        return done("Resumed with the new limit.", api.resume(run.runId, value));
      }, "primary")));
  } else if (reason === "effect-unknown") {
    const result = h("textarea", { id: "effect-result", rows: 3,
      "aria-describedby": "effect-result-hint" });
    const settle = (action, value) => done(`Settled (${action}); the run continues.`,
      api.settleEffect(run.runId, details.key, action, value));
    card.append(
      h("p", {}, `A call of tool ${details.tool ?? "?"} was started but its result was never `
        + "saved: it may or may not have happened."),
      h("p", { class: "muted" }, `Idempotency key ${details.key}`),
      h("div", { class: "buttons" },
        actionButton("Retry the call", () => settle("retry"), "primary"),
        actionButton("Skip the call", () => settle("skip"))),
      h("label", { for: "effect-result" }, "Or supply the call's result"), result,
      h("p", { id: "effect-result-hint", class: "hint" }, "JSON, or plain text."),
      h("div", { class: "buttons" }, actionButton("Record this result", () => {
        const value = valueOf(result.value);
        if (value === undefined) throw new Error("type the result first");
        return settle("result", value);
      })));
  } else if (reason === "sub-run") {
    card.append(h("p", {}, "It continues when its sub-run finishes: ",
      details.childRunId ? runLink(details.childRunId) : "?"));
  } else {
    card.append(h("p", {}, reason === "interrupted"
      ? "The run was stopped gracefully; resume it to continue where it left off."
      : "Resume the run to continue."),
    h("div", { class: "buttons" },
      actionButton("Resume", () => done("Resumed.", api.resume(run.runId)), "primary")));
  }
  return card;
}
