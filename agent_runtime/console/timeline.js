// A run's step timeline, one page of checkpoints at a time: it opens at the latest page
// and pages (or jumps) anywhere, so a run with 10,000 checkpoints costs one request and
// at most PAGE rows. Consecutive checkpoints of one loop iteration are grouped, closed
// until the person opens them.

import { fill, formatNumber, h } from "./dom.js";
import { describeError } from "./notice.js";
import { checkpointsAfter } from "./run_api.js";
import { zonedTime } from "./run_time.js";

export const PAGE = 100;  // checkpoints per page: what the route answers at most

/** `loop/2/step` -> {loop, iteration, key, child}; null outside loops. */
export function iterationOf(stepPath) {
  const parts = (stepPath ?? "").split("/");
  if (parts.length >= 2 && /^\d+$/.test(parts[1])) {
    return { loop: parts[0], iteration: Number(parts[1]), key: `${parts[0]}/${parts[1]}`,
      child: parts[2] ?? null };
  }
  return null;
}

function row(runId, checkpoint, previousTokens) {
  const delta = previousTokens === null ? 0 : checkpoint.consumedTokens - previousTokens;
  return h("li", { class: "checkpoint", "data-seq": checkpoint.seq },
    h("a", { href: `#/runs/${encodeURIComponent(runId)}/checkpoints/${checkpoint.seq}`,
      class: "seq", "aria-label": `Checkpoint ${checkpoint.seq}` }, `#${checkpoint.seq}`),
    h("span", { class: "step-path" }, checkpoint.stepPath ?? "—"),
    h("span", { class: "kind" }, checkpoint.stepKind ?? (checkpoint.stepPath ? "" : "run state")),
    zonedTime(checkpoint.createdAt, true),
    h("span", { class: "tokens", title: `${formatNumber(checkpoint.consumedTokens)} in total` },
      delta > 0 ? `+${formatNumber(delta)} tokens` : ""),
    h("span", { class: "attempt" }, `attempt ${checkpoint.attempt}`));
}

/** One page of checkpoints as a list: each loop iteration's in a <details>, open only
 * when the person opened it (`opened`, kept across pages and redraws). `previousTokens`:
 * the total before the page's first checkpoint, when known. */
export function renderCheckpoints(runId, checkpoints, opened, previousTokens = null) {
  const list = h("ol", { class: "timeline" });
  let before = previousTokens;
  let group = null;
  for (const checkpoint of checkpoints) {
    const iteration = iterationOf(checkpoint.stepPath);
    const item = row(runId, checkpoint, before);
    const spent = before === null ? 0 : Math.max(checkpoint.consumedTokens - before, 0);
    before = checkpoint.consumedTokens;
    if (!iteration) {
      group = null;
      list.append(item);
      continue;
    }
    if (!group || group.key !== iteration.key) {
      group = newGroup(iteration, opened);
      list.append(group.element);
    }
    group.add(item, spent, iteration.child);
  }
  return list;
}

function newGroup(iteration, opened) {
  const summary = h("summary");
  const rows = h("ol", { class: "timeline" });
  const details = h("details", { open: opened.has(iteration.key) }, summary, rows);
  // What the person did, not every `toggle`: code that opens a group (a jump to a
  // checkpoint) fires `toggle` too, and must not count as the person opening it.
  summary.addEventListener("click", () => {
    if (details.open) opened.delete(iteration.key);
    else opened.add(iteration.key);
  });
  const children = [];
  let count = 0;
  let tokens = 0;
  const label = h("span", { class: "step-path" }, `${iteration.loop} · iteration ${iteration.iteration}`);
  const names = h("span", { class: "loop-children" });
  const totals = h("span", { class: "muted totals" });
  summary.append(label, names, totals);
  return {
    key: iteration.key,
    element: h("li", { class: "iteration", "data-iteration": iteration.key }, details),
    add(item, spent, child) {
      rows.append(item);
      count += 1;
      tokens += spent;
      if (child && !children.includes(child)) {
        children.push(child);
        fill(names, `: ${children.join(", ")}`);
      }
      fill(totals, ` · ${count} checkpoint${count === 1 ? "" : "s"}`
        + (tokens ? `, ${formatNumber(tokens)} tokens` : ""));
    },
  };
}

/** The timeline of one run: a pager over its checkpoints by seq (page k holds seqs
 * k*PAGE+1 .. (k+1)*PAGE). It follows the latest page while the person is on it. */
export class Timeline {
  constructor(container, runId, { onLatest = () => {} } = {}) {
    this.container = container;
    this.runId = runId;
    this.onLatest = onLatest;  // the latest page's checkpoints, each time it is read
    this.opened = new Set();
    this.latestSeq = 0;
    this.page = null;          // the page shown; null: follow the latest
    this.shown = "";           // what is drawn (page, its last seq): drawn again only on change
    this.reading = 0;
    this.highlight = null;
    this.totals = new Map();   // seq -> tokens consumed by then, for the pages read
    this.nav = h("nav", { class: "timeline-pager", "aria-label": "Timeline pages" });
    this.body = h("div", { class: "timeline-page", "aria-live": "polite" });
    fill(container, this.nav, this.body);
  }

  get pages() {
    return Math.max(Math.ceil(this.latestSeq / PAGE), 1);
  }

  get current() {
    return this.page ?? this.pages - 1;
  }

  /** The run's latest checkpoint is `latestSeq`: read the page shown again when it grew. */
  async update(latestSeq) {
    const grew = latestSeq !== this.latestSeq;
    if (!grew && this.shown) return;
    this.latestSeq = latestSeq;
    if (!latestSeq) {
      this.shown = "empty";
      this.drawNav();
      fill(this.body, h("p", { class: "muted" }, "No checkpoints yet."));
      return;
    }
    if (!this.shown) await this.show(this.page);  // not drawn yet, or its read failed
    else if (this.page === null || this.page === this.pages - 1) await this.show(null);
    else this.drawNav();
  }

  /** Show page `page` (null: the latest, followed). */
  async show(page, highlight = null) {
    this.page = page === null || page >= this.pages - 1 ? null : Math.max(page, 0);
    this.highlight = highlight;
    const index = this.current;
    const ask = ++this.reading;
    this.body.setAttribute("aria-busy", "true");
    this.drawNav();
    const from = index * PAGE;
    let items;
    try {
      items = await checkpointsAfter(this.runId, from);
    } catch (error) {
      if (ask !== this.reading) return;
      this.body.removeAttribute("aria-busy");
      this.shown = "";
      fill(this.body, h("p", { class: "error" }, describeError(error)));
      return;
    }
    if (ask !== this.reading) return;
    this.body.removeAttribute("aria-busy");
    const inPage = items.filter((item) => item.seq > from && item.seq <= from + PAGE);
    if (inPage.length) this.totals.set(inPage.at(-1).seq, inPage.at(-1).consumedTokens);
    // The total before the page's first checkpoint is known when the page before it
    // was read (its last); otherwise the first row shows no delta.
    const before = from === 0 ? 0 : this.totals.get(from) ?? null;
    if (this.page === null) this.onLatest(inPage);
    const shape = `${index}:${inPage.length}:${inPage.at(-1)?.seq}:${highlight}`;
    if (shape === this.shown) return;
    this.shown = shape;
    fill(this.body, inPage.length
      ? renderCheckpoints(this.runId, inPage, this.opened, before)
      : h("p", { class: "muted" }, "No checkpoints in this range."));
    if (highlight !== null) this.reveal(highlight);
  }

  reveal(seq) {
    const found = this.body.querySelector(`.checkpoint[data-seq="${Number(seq)}"]`);
    if (!found) return;
    const details = found.closest("details");
    if (details) details.open = true;  // shown for the jump; not counted as opened
    found.classList.add("highlight");
    found.querySelector("a").focus({ preventScroll: true });
    found.scrollIntoView({ block: "center" });
  }

  drawNav() {
    if (!this.latestSeq) {
      fill(this.nav);  // the body says there are none
      return;
    }
    const index = this.current;
    const pages = this.pages;
    const button = (label, target, disabled, extra = {}) => {
      const each = h("button", { type: "button", class: "page-button", disabled, ...extra }, label);
      each.addEventListener("click", () => this.show(target));
      return each;
    };
    const first = index * PAGE + 1;
    const last = Math.min((index + 1) * PAGE, this.latestSeq);
    const jump = h("input", { id: "timeline-jump", type: "number", min: 1,
      max: Math.max(this.latestSeq, 1), inputmode: "numeric", placeholder: "seq" });
    const go = h("form", { class: "jump" },
      h("label", { for: "timeline-jump" }, "Go to checkpoint"), jump,
      h("button", { type: "submit" }, "Go"));
    go.addEventListener("submit", (event) => {
      event.preventDefault();
      const seq = Number(jump.value);
      if (!Number.isInteger(seq) || seq < 1 || seq > this.latestSeq) {
        jump.setCustomValidity(`a checkpoint from 1 to ${this.latestSeq}`);
        jump.reportValidity();
        return;
      }
      jump.setCustomValidity("");
      this.show(Math.floor((seq - 1) / PAGE), seq);
    });
    jump.addEventListener("input", () => jump.setCustomValidity(""));
    fill(this.nav,
      h("p", { class: "range", "aria-live": "polite" },
        `Checkpoints ${formatNumber(first)}–${formatNumber(last)} of ${formatNumber(this.latestSeq)}`
        + (this.page === null && pages > 1 ? " (the latest)" : "")),
      pages > 1 ? h("span", { class: "buttons" },
        button("« First", 0, index === 0, { "aria-label": "First page" }),
        button("‹ Earlier", index - 1, index === 0, { "aria-label": "Earlier page" }),
        button("Later ›", index + 1, index >= pages - 1, { "aria-label": "Later page" }),
        button("Latest »", null, index >= pages - 1, { "aria-label": "Latest page" })) : null,
      pages > 1 ? go : null);
  }
}
