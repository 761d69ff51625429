// A run's step timeline: its checkpoints, oldest first, with loop iterations grouped.

import { api } from "./api.js";
import { fill, formatNumber, h, time } from "./dom.js";

/** The checkpoints of one run, read page by page; `refresh` fetches only what is new. */
export class Checkpoints {
  constructor(runId) {
    this.runId = runId;
    this.items = [];
    this.lastCursor = undefined;  // the cursor that asked for the last page read
    this.lastStart = 0;           // where that page's checkpoints begin in `items`
  }

  /** Read from the last page on (it may have grown) to the end; `onPage(items)` after
   * every page read. True when anything changed. */
  async refresh(onPage = () => {}) {
    const before = this.items.length;
    const lastSeq = this.items.at(-1)?.seq;
    let cursor = this.lastCursor;
    const kept = this.items.slice(0, this.lastStart);
    for (;;) {
      const page = await api.listCheckpoints(this.runId, cursor);
      this.lastCursor = cursor;
      this.lastStart = kept.length;
      kept.push(...page.checkpoints);
      if (page.checkpoints.length) onPage(kept);
      if (!page.cursor) break;
      cursor = page.cursor;
    }
    this.items = kept;
    return this.items.length !== before || this.items.at(-1)?.seq !== lastSeq;
  }
}

/** `loop/2/step` -> {loop: "loop", iteration: 2}; null outside loops. */
function iterationOf(stepPath) {
  const parts = (stepPath ?? "").split("/");
  if (parts.length >= 2 && /^\d+$/.test(parts[1])) {
    return { loop: parts[0], iteration: Number(parts[1]), key: `${parts[0]}/${parts[1]}` };
  }
  return null;
}

function row(runId, checkpoint, previousTokens) {
  const delta = checkpoint.consumedTokens - previousTokens;
  return h("li", { class: "checkpoint", "data-seq": checkpoint.seq },
    h("a", { href: `#/runs/${encodeURIComponent(runId)}/checkpoints/${checkpoint.seq}`,
      class: "seq", "aria-label": `Checkpoint ${checkpoint.seq}` }, `#${checkpoint.seq}`),
    h("span", { class: "step-path" }, checkpoint.stepPath ?? "—"),
    h("span", { class: "kind" }, checkpoint.stepKind ?? (checkpoint.stepPath ? "" : "run state")),
    time(checkpoint.createdAt, true),
    h("span", { class: "tokens", title: `${formatNumber(checkpoint.consumedTokens)} in total` },
      delta > 0 ? `+${formatNumber(delta)} tokens` : ""),
    h("span", { class: "attempt" }, `attempt ${checkpoint.attempt}`));
}

/** The timeline as a list: consecutive checkpoints of one loop iteration in a <details>,
 * open when the person opened it (`opened`, kept across redraws) or when it is the latest. */
export function renderTimeline(container, runId, checkpoints, opened = new Set()) {
  const list = h("ol", { class: "timeline" });
  let previousTokens = 0;
  let group = null;
  const groups = [];
  for (const checkpoint of checkpoints) {
    const iteration = iterationOf(checkpoint.stepPath);
    const item = row(runId, checkpoint, previousTokens);
    const spent = Math.max(checkpoint.consumedTokens - previousTokens, 0);
    previousTokens = checkpoint.consumedTokens;
    if (!iteration) {
      group = null;
      list.append(item);
      continue;
    }
    if (!group || group.key !== iteration.key) {
      group = { key: iteration.key, count: 0, tokens: 0, rows: h("ol", { class: "timeline" }),
        summary: h("summary") };
      const details = h("details", { open: opened.has(iteration.key) }, group.summary, group.rows);
      details.addEventListener("toggle", () => {
        if (details.open) opened.add(iteration.key);
        else opened.delete(iteration.key);
      });
      group.element = h("li", { class: "iteration" }, details);
      group.label = `${iteration.loop} · iteration ${iteration.iteration}`;
      groups.push(group);
      list.append(group.element);
    }
    group.count += 1;
    group.tokens += spent;
    group.rows.append(item);
  }
  for (const each of groups) {
    fill(each.summary, h("span", { class: "step-path" }, each.label),
      h("span", { class: "muted" }, ` ${each.count} checkpoint${each.count === 1 ? "" : "s"}`
        + (each.tokens ? `, ${formatNumber(each.tokens)} tokens` : "")));
  }
  // The latest iteration open; the others a click (or Enter) away.
  if (groups.length) groups.at(-1).element.querySelector("details").open = true;
  fill(container, checkpoints.length ? list
    : h("p", { class: "muted" }, "No checkpoints yet."));
}
