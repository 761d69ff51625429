// One checkpoint: the run's variables and step results at that point, and "fork from here".

import { api } from "./api.js";
import { fill, formatNumber, h, pre } from "./dom.js";
import { forkForm } from "./fork_form.js";
import { describeError } from "./notice.js";
import { renderValue } from "./output.js";
import { zonedTime } from "./run_time.js";
import { runLink } from "./runs.js";

const SHOWN = new Set(["stepPath", "stepId", "status", "at", "output", "kind", "depth"]);

/** One step result: where and when, its output, and anything else it recorded. */
function stepResult(entry) {
  const rest = Object.fromEntries(Object.entries(entry).filter(([key]) => !SHOWN.has(key)));
  return h("li", { class: "card" },
    h("h3", {}, entry.stepPath ?? entry.stepId ?? "step"),
    h("p", { class: "muted" }, [entry.status, entry.at ? zonedTime(entry.at) : null]
      .filter(Boolean).flatMap((part, index) => (index ? [" · ", part] : [part]))),
    Object.hasOwn(entry, "output") ? renderValue(entry.output) : null,
    Object.keys(rest).length ? pre(rest) : null);
}

export function checkpointPage(main, { runId, seq }) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const fork = h("button", { type: "button", class: "primary", "aria-expanded": "false" },
    "Fork from here…");
  const forkSlot = h("div", { class: "fork-slot" });
  fork.addEventListener("click", async () => {
    if (forkSlot.childElementCount) {
      fill(forkSlot);
      fork.setAttribute("aria-expanded", "false");
      return;
    }
    fork.setAttribute("aria-expanded", "true");
    let latestSeq = Number(seq);
    try {
      latestSeq = (await api.getRun(runId)).checkpointSeq ?? latestSeq;
    } catch {
      // The form still forks from this checkpoint.
    }
    fill(forkSlot, forkForm(runId, { seq: Number(seq), latestSeq, onClose() {
      fill(forkSlot);
      fork.setAttribute("aria-expanded", "false");
      fork.focus();
    } }));
  });
  fill(main,
    h("p", { class: "crumbs" }, runLink(runId), " › checkpoint"),
    h("div", { class: "page-head" }, h("h1", { tabindex: -1 }, `Checkpoint ${seq}`), fork),
    h("p", { class: "hint" }, "Forking starts a new run from this point: the variables and "
      + "step results below, with the same manifest."),
    forkSlot, body);

  api.getCheckpoint(runId, seq).then((checkpoint) => {
    const variables = Object.entries(checkpoint.variables);
    fill(body,
      h("dl", { class: "facts" },
        h("div", {}, h("dt", {}, "Saved"), h("dd", {}, zonedTime(checkpoint.createdAt))),
        h("div", {}, h("dt", {}, "Attempt"), h("dd", {}, String(checkpoint.attempt))),
        h("div", {}, h("dt", {}, "Tokens"), h("dd", {},
          formatNumber(checkpoint.budget.consumedTokens)
          + (checkpoint.budget.maxTotalTokens
            ? ` of ${formatNumber(checkpoint.budget.maxTotalTokens)}` : ""))),
        h("div", {}, h("dt", {}, "Position"), h("dd", {},
          checkpoint.cursor.map((frame) => frame.stepPath).join(" › ") || "—"))),
      h("section", { "aria-labelledby": "variables-title" },
        h("h2", { id: "variables-title" }, "Variables"),
        variables.length ? h("table", { class: "variables-table" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Key"),
            h("th", { scope: "col" }, "Value"))),
          h("tbody", {}, variables.map(([key, value]) => h("tr", {},
            h("th", { scope: "row" }, key), h("td", {}, pre(value))))))
          : h("p", { class: "muted" }, "No variables.")),
      h("section", { "aria-labelledby": "results-title" },
        h("h2", { id: "results-title" }, "Step results"),
        checkpoint.stepResults.length ? h("ol", { class: "step-results" },
          checkpoint.stepResults.map(stepResult))
          : h("p", { class: "muted" }, "No step has finished yet.")));
  }).catch((error) => {
    fill(body, h("p", { class: "error" }, describeError(error)));
  });
  return null;
}
