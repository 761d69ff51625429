// A run: status, attempt, tokens against the budget, the suspension card,
// output or error and the step timeline, kept live while the run moves.

import { api, TERMINAL } from "./api.js";
import { fill, formatNumber, h, jsonText, pre, statusBadge, time } from "./dom.js";
import { announce, describeError, every, navigate } from "./notice.js";
import { renderValue } from "./output.js";
import { runLink } from "./runs.js";
import { suspensionCard } from "./suspension.js";
import { Checkpoints, renderTimeline } from "./timeline.js";

const LIVE_MS = 1000;

function usage(run) {
  const { consumedTokens, maxTotalTokens } = run.usage;
  if (!maxTotalTokens) {
    return h("p", { class: "usage" }, `${formatNumber(consumedTokens)} tokens used (no budget)`);
  }
  const label = `${formatNumber(consumedTokens)} of ${formatNumber(maxTotalTokens)} tokens`;
  return h("div", { class: "usage" },
    h("label", { for: "token-meter" }, "Tokens used"),
    h("meter", { id: "token-meter", min: 0, max: maxTotalTokens, low: maxTotalTokens * 0.75,
      high: maxTotalTokens * 0.9, optimum: 0, value: Math.min(consumedTokens, maxTotalTokens),
      "aria-valuetext": label }),
    h("span", { class: "muted" }, label));
}

function summary(run) {
  const facts = [
    ["Status", [statusBadge(run.status), TERMINAL.has(run.status) || run.status === "suspended"
      ? null : h("span", { class: "live", "aria-hidden": "true" }, " ● live")]],
    ["Attempt", String(run.attempt)],
    ["Agent", run.agent?.name || run.agent?.id || "—"],
    ["Created", time(run.createdAt)],
    ["Updated", time(run.updatedAt)],
  ];
  if (run.forkedFrom) {
    facts.push(["Forked from", [runLink(run.forkedFrom.runId), ` at checkpoint ${run.forkedFrom.seq}`]]);
  }
  if (run.parent) facts.push(["Parent", [runLink(run.parent.runId), ` (${run.parent.stepPath})`]]);
  // The OpenTelemetry trace of the run's spans: what to search for in a trace viewer.
  if (run.traceId) facts.push(["Trace", h("code", { title: "OpenTelemetry trace id" }, run.traceId)]);
  return h("dl", { class: "facts" }, facts.map(([name, value]) => h("div", {},
    h("dt", {}, name), h("dd", { "data-fact": name.toLowerCase() }, value))));
}

// A large output is not in the run's view (`outputRef` names it): shown once fetched.
function outputByReference(run) {
  const slot = h("div", { class: "output-slot", "aria-busy": "true" },
    h("p", { class: "muted" }, `Loading the output (${formatNumber(run.outputBytes)} bytes)…`));
  api.getOutput(run.runId).then(
    (output) => fill(slot, renderValue(output)),
    (error) => fill(slot, h("p", { class: "error" }, describeError(error))),
  ).finally(() => slot.removeAttribute("aria-busy"));
  return slot;
}

export function runPage(main, { runId }) {
  const head = h("div", { class: "page-head" },
    h("h1", { tabindex: -1 }, "Run ", h("code", {}, runId)));
  const actions = h("div", { class: "actions" });
  const facts = h("section", { "aria-label": "Summary" });
  const card = h("div", { class: "suspension-slot" });
  const result = h("section", { class: "result", "aria-labelledby": "result-title" });
  const timeline = h("div", { id: "timeline" });
  fill(main, head, actions, facts, card, result,
    h("section", { "aria-labelledby": "timeline-title" },
      h("h2", { id: "timeline-title" }, "Timeline"), timeline));

  const checkpoints = new Checkpoints(runId);
  const opened = new Set();  // loop iterations the person opened
  let shownRun = "";
  let shownCard = "";
  let confirming = false;
  let finished = false;

  function drawActions(run) {
    const buttons = [];
    if (!TERMINAL.has(run.status)) {
      if (confirming) {
        const yes = h("button", { type: "button", class: "danger" }, "Yes, cancel this run");
        yes.addEventListener("click", async () => {
          yes.disabled = true;
          try {
            await api.cancel(runId);
            announce("The run was cancelled.");
          } catch (error) {
            announce(describeError(error), "error");
          }
          confirming = false;
          await refresh(true);
        });
        const no = h("button", { type: "button" }, "Keep it");
        no.addEventListener("click", () => {
          confirming = false;
          drawActions(run);
        });
        buttons.push(h("span", { class: "confirm" }, "Cancel for good? ", yes, " ", no));
        queueMicrotask(() => yes.focus());
      } else {
        const cancel = h("button", { type: "button", class: "danger" }, "Cancel run…");
        cancel.addEventListener("click", () => {
          confirming = true;
          drawActions(run);
        });
        buttons.push(cancel);
      }
    }
    if (run.checkpointSeq) {
      const fork = h("button", { type: "button" }, "Fork from the latest checkpoint");
      fork.addEventListener("click", async () => {
        fork.disabled = true;
        try {
          const created = await api.fork(runId);
          announce(`Forked as run ${created.runId}.`);
          navigate(`#/runs/${encodeURIComponent(created.runId)}`);
        } catch (error) {
          announce(describeError(error), "error");
          fork.disabled = false;
        }
      });
      buttons.push(fork);
    }
    fill(actions, buttons);
  }

  function draw(run) {
    const signature = JSON.stringify(run);
    if (signature !== shownRun) {
      shownRun = signature;
      fill(facts, summary(run), usage(run));
      if (!confirming || TERMINAL.has(run.status)) {
        confirming = false;
        drawActions(run);
      }
      if (run.status === "completed") {
        fill(result, h("h2", { id: "result-title" }, "Output"),
          run.outputRef ? outputByReference(run) : renderValue(run.output));
      } else if (run.error) {
        fill(result, h("h2", { id: "result-title" }, "Error"),
          h("p", { class: "error" }, h("strong", {}, run.error.type), ": ", run.error.message),
          Object.keys(run.error.details ?? {}).length ? pre(run.error.details) : null);
      } else {
        fill(result);
      }
    }
    // The card is drawn again only when what it answers changes, so a
    // response being typed survives the live refresh.
    const cardKey = run.status === "suspended" ? jsonText(run.suspension) : "";
    if (cardKey !== shownCard) {
      shownCard = cardKey;
      fill(card, cardKey ? suspensionCard(run, () => refresh(true)) : null);
    }
  }

  let drawn = null;  // the timeline on the page (count, last seq): redrawn only when it grew
  function drawTimeline(items) {
    const shape = `${items.length}:${items.at(-1)?.seq}`;
    if (shape === drawn) return;
    drawn = shape;
    renderTimeline(timeline, runId, items, opened);
  }

  // One refresh at a time: a forced one (after an action) runs when the current one ends.
  let current = null;
  function refresh(force = false) {
    if (current) return force ? current.then(() => refresh(true)) : current;
    current = load(force).finally(() => {
      current = null;
    });
    return current;
  }

  async function load(force) {
    if (finished && !force) return;
    let run;
    try {
      run = await api.getRun(runId);
    } catch (error) {
      if (error.status === 404) {
        finished = true;
        fill(facts, h("p", { class: "error" }, `No run with id ${runId}.`));
      } else {
        announce(describeError(error), "error");
      }
      return;
    }
    draw(run);
    try {
      // Drawn as each page arrives: a long timeline shows its start at once.
      await checkpoints.refresh(drawTimeline);
      if (!checkpoints.items.length) drawTimeline([]);
    } catch (error) {
      fill(timeline, h("p", { class: "error" }, describeError(error)));
    }
    // Terminal runs do not change; a suspended one changes when someone answers.
    finished = TERMINAL.has(run.status);
  }

  return every(LIVE_MS, () => refresh());
}
