// A run's event log as the console shows it: the step in progress, the steps with
// their durations, and the log itself.
//
// Events come from the run's durable log (`GET /runs/{id}/events`): ids, timings,
// counts and codes. Their fields are still data from the server, so they reach the
// page as text nodes only.

import { fill, h } from "./dom.js";
import { zonedTime } from "./run_time.js";

const DETAIL_FIELDS = 6;     // data fields shown per event
const DETAIL_CHARS = 120;    // a field's value, at most
// The Events tab keeps the latest rows only: a long run's log has tens of thousands.
export const LOG_ROWS = 1000;

/** The steps a run's events describe, in the order they first started. */
export class RunProgress {
  constructor() {
    this.events = [];
    this.steps = new Map();  // step path -> {path, kind, status, startedAt, durationMs}
    this.approvals = new Map();  // approval id -> what rejecting it does (the step's action)
  }

  /** Take the next events of the log (oldest first). */
  add(events) {
    for (const event of events) {
      this.events.push(event);
      this.#apply(event);
    }
  }

  #apply(event) {
    const path = event.stepPath;
    const data = event.data ?? {};
    switch (event.type) {
      case "step.started": {
        const known = this.steps.get(path);
        this.steps.set(path, { path, kind: data.kind ?? known?.kind ?? "", status: "running",
          startedAt: event.timestamp, durationMs: null, order: known?.order ?? this.steps.size });
        break;
      }
      case "step.completed":
      case "step.skipped": {
        const step = this.steps.get(path)
          ?? { path, kind: data.kind ?? "", startedAt: null, order: this.steps.size };
        step.status = event.type === "step.completed" ? "completed" : "skipped";
        step.durationMs = typeof data.durationMs === "number" ? data.durationMs
          : elapsed(step.startedAt, event.timestamp);
        this.steps.set(path, step);
        break;
      }
      case "approval.requested":
        if (data.approvalId) this.approvals.set(data.approvalId, data.action ?? "pause");
        break;
      case "run.suspended":
        this.#settleOpen("waiting");
        break;
      case "run.failed":
        this.#settleOpen("failed");
        break;
      case "run.resumed":
      case "run.superseded":
      case "run.cancelled":
      case "run.completed":
        // An attempt that ended with a step open did not finish it; the next attempt
        // starts it again (a new step.started).
        this.#settleOpen("interrupted");
        break;
      default:
        break;
    }
  }

  #settleOpen(status) {
    for (const step of this.steps.values()) {
      if (step.status === "running") step.status = status;
    }
  }

  /** The step in progress: the latest started and not yet finished (a loop's
   * current child rather than the loop), or null. */
  running() {
    let latest = null;
    for (const step of this.steps.values()) {
      if (step.status === "running" && (!latest || step.startedAt >= latest.startedAt)) {
        latest = step;
      }
    }
    return latest;
  }
}

function elapsed(from, to) {
  const start = Date.parse(from);
  const end = Date.parse(to);
  return Number.isNaN(start) || Number.isNaN(end) ? null : Math.max(end - start, 0);
}

/** A duration for people: 840 ms, 12.4 s, 3 min 05 s. */
export function formatDuration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
}

// The waterfall shows the latest steps only: a run of 10,000 steps draws this many rows,
// and the timeline below pages through every checkpoint.
export const WATERFALL_ROWS = 60;

/** The steps a run's checkpoints describe, for a log with no events (a store or run
 * from before the log, or one whose events were not kept): each checkpoint ends its
 * step, which began when the checkpoint before it was saved. `items`: consecutive
 * checkpoint summaries, oldest first. */
export function progressFromCheckpoints(items, status) {
  const progress = new RunProgress();
  progress.fromCheckpoints = items.length > 1;  // said on the page only when it drew any
  let previous = null;
  for (const item of items) {
    if (item.stepPath && previous) {
      const step = progress.steps.get(item.stepPath)
        ?? { path: item.stepPath, kind: item.stepKind ?? "", order: progress.steps.size,
          startedAt: previous.createdAt };
      step.status = "completed";
      step.durationMs = elapsed(step.startedAt, item.createdAt);
      progress.steps.set(item.stepPath, step);
    }
    previous = item;
  }
  if (status === "running" && previous) {
    // The next step is running; which one, the checkpoints cannot say.
    progress.steps.set("", { path: "", kind: "", status: "running", order: progress.steps.size,
      startedAt: previous.createdAt, durationMs: null, unnamed: true });
  }
  return progress;
}

/** The steps as a waterfall: path, kind, how it went, how long it took, and a bar from
 * when it started to when it ended (the running step's to now) on one time scale.
 * `inFlight`: {path, kind, startedAt} of a step running that `progress` lacks. */
export function renderSteps(container, progress, now = Date.now(), inFlight = null) {
  const all = [...progress.steps.values()].sort((a, b) => a.order - b.order);
  // A step the effect ledger shows in flight, which the log does not have yet (its
  // events commit with the checkpoint after it).
  if (inFlight && !progress.steps.has(inFlight.path)) {
    all.push({ ...inFlight, status: "running", durationMs: null, order: all.length });
  }
  if (!all.length) {
    fill(container, h("p", { class: "muted" }, "No steps have started yet."));
    return;
  }
  const steps = all.slice(-WATERFALL_ROWS);
  const spans = steps.map((step) => {
    const start = Date.parse(step.startedAt);
    if (Number.isNaN(start)) return null;
    const end = step.status === "running" ? Math.max(now, start)
      : start + (typeof step.durationMs === "number" ? step.durationMs : 0);
    return [start, end];
  });
  const known = spans.filter(Boolean);
  const origin = known.length ? Math.min(...known.map(([start]) => start)) : 0;
  const span = known.length ? Math.max(Math.max(...known.map(([, end]) => end)) - origin, 1) : 1;
  const hidden = all.length - steps.length;
  fill(container,
    progress.fromCheckpoints ? h("p", { class: "muted waterfall-note" }, "From the latest "
      + "checkpoints (the run's event log has no steps); the timeline below has every one.")
      : null,
    hidden && !progress.fromCheckpoints ? h("p", { class: "muted waterfall-note" },
      `The latest ${steps.length} of ${all.length} steps; the timeline below has every `
      + "checkpoint.") : null,
    h("table", { class: "steps waterfall" },
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "Step"), h("th", { scope: "col" }, "Kind"),
        h("th", { scope: "col" }, "Status"), h("th", { scope: "col" }, "Duration"),
        h("th", { scope: "col", class: "bar-col" }, "When"))),
      h("tbody", {}, steps.map((step, index) => {
        const bar = h("span", { class: `bar bar-${step.status}`, "aria-hidden": "true" });
        const extent = spans[index];
        if (extent) {
          // Through the CSSOM: the page's CSP refuses style attributes, not this.
          bar.style.marginLeft = `${((extent[0] - origin) / span) * 100}%`;
          bar.style.width = `${Math.max(((extent[1] - extent[0]) / span) * 100, 0.5)}%`;
        }
        return h("tr", { "data-step": step.path, class: `step-row step-row-${step.status}` },
          h("td", {}, step.unnamed ? h("span", { class: "muted" }, "the next step")
            : h("code", {}, step.path ?? "—")),
          h("td", {}, step.kind ?? ""),
          h("td", { class: `step-status step-${step.status}` }, step.status),
          h("td", { class: "number duration" },
            step.status === "running" ? "running…" : formatDuration(step.durationMs)),
          h("td", { class: "bar-col" }, h("span", { class: "track" }, bar)));
      }))));
}

function detailText(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > DETAIL_CHARS ? `${text.slice(0, DETAIL_CHARS)}…` : text;
}

function details(data) {
  const entries = Object.entries(data ?? {}).filter(([, value]) => value !== null);
  const shown = entries.slice(0, DETAIL_FIELDS).map(([name, value]) =>
    `${name}=${detailText(value)}`);
  if (entries.length > DETAIL_FIELDS) shown.push(`+${entries.length - DETAIL_FIELDS} more`);
  return shown.join(" · ");
}

/** The event log as a table, oldest first; `append` adds the rows of new events only. */
export class EventLog {
  constructor(container) {
    this.list = h("div", {}, h("p", { class: "muted" }, "No events yet."));
    this.note = h("p", { class: "muted log-state" });
    this.body = null;
    this.container = container;
    fill(container, this.list, this.note);
    this.following();
  }

  /** The log is being followed: new events appear as the run commits them. */
  following() {
    this.container.dataset.log = "following";
    fill(this.note, "Following the run: new events appear as its steps commit.");
  }

  /** The log could not be followed (the run is gone, say): why, for a person. */
  stopped(reason) {
    this.container.dataset.log = "stopped";
    fill(this.note, `Not following the run's events: ${reason}`);
  }

  /** The run has ended and every event of its log is shown. */
  whole() {
    this.container.dataset.log = "whole";
    fill(this.note, "The run has ended: this is its whole log.");
  }

  append(events) {
    if (!events.length) return;
    if (!this.body) {
      this.body = h("tbody");
      fill(this.list, h("table", { class: "event-log" },
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "#"), h("th", { scope: "col" }, "Time"),
          h("th", { scope: "col" }, "Event"), h("th", { scope: "col" }, "Step"),
          h("th", { scope: "col" }, "Details"))),
        this.body));
    }
    this.body.append(...events.map((event) => h("tr", { class: "event", "data-cursor": event.cursor },
      h("td", { class: "number" }, String(event.cursor)),
      h("td", {}, zonedTime(event.timestamp, true)),
      h("td", { class: "event-type" }, String(event.type)),
      h("td", {}, event.stepPath ? h("code", {}, String(event.stepPath)) : ""),
      h("td", { class: "event-data" }, details(event.data)))));
    this.total = (this.total ?? 0) + events.length;
    const extra = this.body.childElementCount - LOG_ROWS;
    for (let index = 0; index < extra; index += 1) this.body.firstElementChild.remove();
    if (extra > 0 || this.cut) {
      this.cut = this.cut ?? h("p", { class: "muted log-cut" });
      fill(this.cut, `The latest ${LOG_ROWS.toLocaleString()} of `
        + `${this.total.toLocaleString()} events.`);
      if (!this.cut.isConnected) this.list.prepend(this.cut);
    }
  }
}
