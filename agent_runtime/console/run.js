// A run: status, attempt, tokens against the budget, the suspension card,
// output or error and the step timeline, kept live while the run moves.

import { api, followEvents, TERMINAL } from "./api.js";
import { comparePanel } from "./checkpoint_diff.js";
import { fill, formatNumber, h, jsonText, pre, statusBadge } from "./dom.js";
import { EventLog, progressFromCheckpoints, RunProgress, renderSteps } from "./events.js";
import { forkForm } from "./fork_form.js";
import { announce, describeError } from "./notice.js";
import { renderValue } from "./output.js";
import { zonedTime } from "./run_time.js";
import { runLink } from "./runs.js";
import { showRejectOutcome, suspensionCard } from "./suspension.js";
import { Timeline } from "./timeline.js";

// Events after which the run's summary or timeline is worth reading again: those that
// come with a checkpoint or change the run's status. (Events commit with checkpoints,
// so in practice every page that has events carries one of these.)
// Kinds of step that hold steps of their own.
const CONTAINER_KINDS = new Set(["loop"]);
const CHANGES_RUN = /^(checkpoint\.|run\.|approval\.|budget\.)/;

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
    ["Created", zonedTime(run.createdAt)],
    ["Updated", zonedTime(run.updatedAt)],
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
  const runningNow = h("p", { class: "running-now", "aria-live": "polite", hidden: true });
  const steps = h("div", { id: "steps" });
  const timeline = h("div", { id: "timeline" });
  const eventLog = h("div", { id: "event-log" });
  const forkSlot = h("div", { class: "fork-slot" });
  const compare = comparePanel(runId);
  fill(main, head, actions, forkSlot, facts, runningNow, card, result,
    h("section", { "aria-labelledby": "steps-title", class: "steps-section" },
      h("h2", { id: "steps-title" }, "Steps"), steps),
    tabs([["timeline", "Timeline", timeline], ["compare", "Compare", compare.element],
      ["events", "Events", eventLog]]));

  let shownRun = "";
  let shownCard = "";
  let confirming = false;
  let finished = false;
  let shownStatus = null;  // the status the summary shows
  const progress = new RunProgress();
  const log = new EventLog(eventLog);
  // The waterfall comes from the event log; a run whose log is empty (kept by a store
  // or a version without one) has it drawn from its latest checkpoints instead.
  let latestCheckpoints = [];
  let inFlightStep = null;  // a step the ledger shows in flight that the log does not yet
  const drawSteps = () => renderSteps(steps, progress.steps.size ? progress
    : progressFromCheckpoints(latestCheckpoints, shownStatus), Date.now(), inFlightStep);
  const pages = new Timeline(timeline, runId, {
    onLatest(items) {
      latestCheckpoints = items;
      if (!progress.steps.size) drawSteps();
    },
  });

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
      const fork = h("button", { type: "button", "aria-expanded": forkSlot.childElementCount
        ? "true" : "false" }, "Fork…");
      fork.addEventListener("click", () => {
        if (forkSlot.childElementCount) {
          fill(forkSlot);
          fork.setAttribute("aria-expanded", "false");
          return;
        }
        fork.setAttribute("aria-expanded", "true");
        fill(forkSlot, forkForm(runId, { seq: run.checkpointSeq, latestSeq: run.checkpointSeq,
          onClose() {
            fill(forkSlot);
            fork.setAttribute("aria-expanded", "false");
            fork.focus();
          } }));
      });
      buttons.push(fork);
    }
    fill(actions, buttons);
  }

  function draw(run) {
    const signature = JSON.stringify(run);
    shownStatus = run.status;
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
      fill(card, cardKey ? suspensionCard(run, () => refresh(true), progress.approvals) : null);
    }
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
    compare.latest(run.checkpointSeq ?? 0);
    // One page, the latest: a long timeline is paged, never read whole (a failed read
    // is said in the timeline).
    await pages.update(run.checkpointSeq ?? 0);
    // Terminal runs do not change; a suspended one changes when someone answers.
    finished = TERMINAL.has(run.status);
  }

  // What is running: the latest step the log shows started and not finished. A step's
  // events commit with the checkpoint after it, so while a step runs the log may not
  // show it yet; a webhook or tool call in flight is in the effect ledger already
  // (reserved before it is sent), and names its step.
  let asked = 0;
  async function drawRunning(status) {
    const ask = ++asked;
    if (status !== "running") {
      runningNow.hidden = true;
      if (inFlightStep) {
        inFlightStep = null;
        drawSteps();
      }
      return;
    }
    const before = inFlightStep;
    inFlightStep = null;
    const open = progress.running();
    let shown;
    // A step with steps inside (a loop) is open while its children run: what it is
    // running now may be in flight in the ledger.
    if (open && !CONTAINER_KINDS.has(open.kind)) {
      shown = ["Running now: ", h("code", { class: "step-path" }, open.path),
        open.kind ? h("span", { class: "muted" }, ` (${open.kind})`) : null];
    } else {
      let inFlight = null;
      const done = new Set([...progress.steps.values()]
        .filter((step) => step.status === "completed").map((step) => step.path));
      try {
        const effects = await api.listEffects(runId);
        inFlight = effects.filter((effect) => effect.status === "reserved" && effect.stepPath
          && !done.has(effect.stepPath) && (!open || effect.stepPath.startsWith(`${open.path}/`)))
          .at(-1) ?? null;
      } catch {
        inFlight = null;  // the ledger is a hint; the log stays the source
      }
      if (ask !== asked) return;  // a newer page answered meanwhile
      const last = [...progress.steps.values()].filter((step) => step.status === "completed")
        .at(-1);
      if (inFlight) {
        inFlightStep = { path: inFlight.stepPath, startedAt: inFlight.createdAt,
          kind: inFlight.tool === "webhook" ? "webhook" : "" };
        shown = ["Running now: ", h("code", { class: "step-path" }, inFlight.stepPath),
          h("span", { class: "muted" },
            inFlight.tool === "webhook" ? " (a webhook call in flight)"
              : ` (a call of ${inFlight.tool ?? "a tool"} in flight)`)];
      } else if (open) {
        shown = ["Running now: ", h("code", { class: "step-path" }, open.path),
          h("span", { class: "muted" }, ` (${open.kind})`)];
      } else {
        shown = last ? ["Running now: the step after ", h("code", {}, last.path)]
          : "Running now: the first step";
      }
    }
    fill(runningNow, shown);
    runningNow.hidden = false;
    if (inFlightStep || before) drawSteps();
  }

  // The page follows the run's event log (long-polled) instead of reading the run
  // every second: the summary and timeline are read again when an event says they
  // changed. A finished run is read once; its log is read to the end once.
  // The run and its latest checkpoints are read first, then the log is followed: a long
  // run's log takes longest to read, and is not what a person needs to see first.
  let first = true;
  let stopFollowing = null;
  let left = false;
  refresh(true).finally(() => {
    if (left) return;
    stopFollowing = followEvents(runId, {
      async onPage(page) {
        progress.add(page.events);
        log.append(page.events);
        showRejectOutcome(card, progress.approvals);
        if (page.events.length || first) drawSteps();
        const changed = page.status !== shownStatus
          || page.events.some((event) => CHANGES_RUN.test(String(event.type)));
        first = false;
        if (changed) await refresh(true);
        await drawRunning(page.status);
      },
      onEnd(error) {
        if (error) {
          log.stopped(describeError(error));
          refresh(true);  // the summary says what went wrong (no such run, say)
        } else {
          log.whole();
        }
      },
    });
  });
  const stop = () => {
    left = true;
    stopFollowing?.();
  };
  return stop;
}

/** Panels behind a row of tabs, the first shown; arrow keys move between the tabs. */
function tabs(panels) {
  const list = h("div", { role: "tablist", class: "tabs", "aria-label": "Run details" });
  const buttons = [];
  const sections = [];
  panels.forEach(([key, label, content], index) => {
    const tab = h("button", { type: "button", role: "tab", id: `tab-${key}`,
      "aria-controls": `panel-${key}`, "aria-selected": index === 0 ? "true" : "false",
      tabindex: index === 0 ? 0 : -1 }, label);
    const panel = h("section", { role: "tabpanel", id: `panel-${key}`,
      "aria-labelledby": `tab-${key}`, hidden: index !== 0 }, content);
    buttons.push(tab);
    sections.push(panel);
    list.append(tab);
  });
  const select = (chosen) => {
    buttons.forEach((tab, index) => {
      const on = index === chosen;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      sections[index].hidden = !on;
    });
    buttons[chosen].focus();
  };
  buttons.forEach((tab, index) => {
    tab.addEventListener("click", () => select(index));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) select((index + step + buttons.length) % buttons.length);
    });
  });
  return h("div", { class: "run-tabs" }, list, sections);
}
