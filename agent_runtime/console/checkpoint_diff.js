// What changed between two checkpoints of a run: its variables (added, removed,
// changed) and its step results (those the later one has and the earlier did not,
// and any recorded differently).

import { api } from "./api.js";
import { fill, formatNumber, h, jsonText } from "./dom.js";
import { describeError } from "./notice.js";

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function valueCell(value, present = true) {
  return h("td", {}, present ? h("pre", { class: "value" }, jsonText(value))
    : h("span", { class: "muted" }, "—"));
}

/** The changes from checkpoint `older` to `newer` (two checkpoint states). */
export function describeChanges(older, newer) {
  const keys = [...new Set([...Object.keys(older.variables), ...Object.keys(newer.variables)])]
    .sort();
  const variables = [];
  for (const key of keys) {
    const was = Object.hasOwn(older.variables, key);
    const is = Object.hasOwn(newer.variables, key);
    if (was && is && same(older.variables[key], newer.variables[key])) continue;
    variables.push({ key, change: !was ? "added" : (!is ? "removed" : "changed"),
      before: older.variables[key], after: newer.variables[key], was, is });
  }
  const results = [];
  const count = Math.max(older.stepResults.length, newer.stepResults.length);
  for (let index = 0; index < count; index += 1) {
    const before = older.stepResults[index];
    const after = newer.stepResults[index];
    if (same(before, after)) continue;
    results.push({ index, change: before === undefined ? "added"
      : (after === undefined ? "removed" : "changed"), before, after,
    path: (after ?? before)?.stepPath ?? (after ?? before)?.stepId ?? `#${index + 1}` });
  }
  return { variables, results,
    tokens: newer.budget.consumedTokens - older.budget.consumedTokens };
}

function renderChanges(older, newer) {
  const { variables, results, tokens } = describeChanges(older, newer);
  return h("div", { class: "diff" },
    h("p", {}, `From checkpoint ${older.seq} to ${newer.seq}: `
      + `${variables.length} variable${variables.length === 1 ? "" : "s"} and `
      + `${results.length} step result${results.length === 1 ? "" : "s"} differ, `
      + `${tokens >= 0 ? "+" : ""}${formatNumber(tokens)} tokens.`),
    h("h3", {}, "Variables"),
    variables.length ? h("div", { class: "scroll-x" }, h("table", { class: "diff-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Key"),
        h("th", { scope: "col" }, "Change"),
        h("th", { scope: "col" }, `At ${older.seq}`), h("th", { scope: "col" }, `At ${newer.seq}`))),
      h("tbody", {}, variables.map((each) => h("tr", { class: `diff-${each.change}`,
        "data-key": each.key },
      h("th", { scope: "row" }, each.key), h("td", { class: "change" }, each.change),
      valueCell(each.before, each.was), valueCell(each.after, each.is))))))
      : h("p", { class: "muted" }, "No variable changed."),
    h("h3", {}, "Step results"),
    results.length ? h("div", { class: "scroll-x" }, h("table", { class: "diff-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Step"),
        h("th", { scope: "col" }, "Change"),
        h("th", { scope: "col" }, `At ${older.seq}`), h("th", { scope: "col" }, `At ${newer.seq}`))),
      h("tbody", {}, results.map((each) => h("tr", { class: `diff-${each.change}`,
        "data-step": each.path },
      h("th", { scope: "row" }, h("code", {}, each.path)),
      h("td", { class: "change" }, each.change),
      valueCell(each.before?.output ?? each.before, each.before !== undefined),
      valueCell(each.after?.output ?? each.after, each.after !== undefined))))))
      : h("p", { class: "muted" }, "No step result changed."));
}

/** The Compare panel: two checkpoint numbers (the latest two by default) and their diff. */
export function comparePanel(runId) {
  const from = h("input", { id: "diff-from", type: "number", min: 1, required: true,
    inputmode: "numeric" });
  const to = h("input", { id: "diff-to", type: "number", min: 1, required: true,
    inputmode: "numeric" });
  const out = h("div", { class: "diff-slot", "aria-live": "polite" });
  const form = h("form", { class: "compare", "aria-label": "Compare two checkpoints" },
    h("div", { class: "field" }, h("label", { for: "diff-from" }, "From checkpoint"), from),
    h("div", { class: "field" }, h("label", { for: "diff-to" }, "To checkpoint"), to),
    h("button", { type: "submit", class: "primary" }, "Compare"));
  let asked = 0;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const a = Number(from.value);
    const b = Number(to.value);
    const ask = ++asked;
    out.setAttribute("aria-busy", "true");
    try {
      const [older, newer] = await Promise.all([api.getCheckpoint(runId, Math.min(a, b)),
        api.getCheckpoint(runId, Math.max(a, b))]);
      if (ask === asked) fill(out, renderChanges(older, newer));
    } catch (error) {
      if (ask === asked) fill(out, h("p", { class: "error" }, describeError(error)));
    } finally {
      out.removeAttribute("aria-busy");
    }
  });
  const panel = h("div", {}, h("p", { class: "hint" }, "Choose two checkpoints: what changed "
    + "in the run's variables and step results between them."), form, out);
  let defaulted = false;
  return {
    element: panel,
    /** The run's latest checkpoint: the default pair, until the person picks one. */
    latest(seq) {
      const max = Math.max(seq, 1);
      from.max = String(max);
      to.max = String(max);
      if (defaulted || !seq) return;
      defaulted = true;
      from.value = String(Math.max(seq - 1, 1));
      to.value = String(seq);
    },
  };
}
