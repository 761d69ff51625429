// The runs list (status filter, newest first, paging, find by id, live
// refresh) and "waiting for me": the suspended runs and what each waits for.

import { api } from "./api.js";
import { fill, formatNumber, h, statusBadge, time } from "./dom.js";
import { announce, describeError, every, navigate } from "./notice.js";

const STATUSES = ["created", "running", "suspended", "completed", "failed", "cancelled"];
const PAGE_SIZE = 25;
const REFRESH_MS = 2000;

export const REASONS = {
  approval: "Approval",
  "token-budget": "Token budget reached",
  "effect-unknown": "Tool call outcome unknown",
  "sub-run": "Waiting for a sub-run",
  interrupted: "Interrupted",
};

function agentLabel(run) {
  return run.agent?.name || run.agent?.id || "—";
}

function tokensLabel(usage) {
  const used = formatNumber(usage.consumedTokens);
  return usage.maxTotalTokens ? `${used} / ${formatNumber(usage.maxTotalTokens)}` : used;
}

export function runLink(runId) {
  return h("a", { href: `#/runs/${encodeURIComponent(runId)}`, class: "run-id" }, runId);
}

export function runsPage(main, { status }) {
  const pages = [undefined];  // the cursor of every page shown so far; the last is this one's
  const body = h("tbody");
  const table = h("table", { class: "runs", "aria-describedby": "runs-caption" },
    h("caption", { id: "runs-caption" }, "Runs, newest first"),
    h("thead", {}, h("tr", {},
      ["Run", "Agent", "Status", "Attempt", "Tokens", "Updated"].map(
        (name) => h("th", { scope: "col" }, name)))),
    body);
  const older = h("button", { type: "button", disabled: true }, "Older runs");
  const newer = h("button", { type: "button", disabled: true }, "Newer runs");
  const position = h("span", { class: "muted", "aria-live": "polite" });
  const live = h("input", { type: "checkbox", id: "live", checked: true });
  const filter = h("select", { id: "status-filter", name: "status" },
    h("option", { value: "" }, "Any status"),
    STATUSES.map((name) => h("option", { value: name, selected: name === status }, name)));
  const find = h("input", { id: "find-run", name: "run", type: "search", autocomplete: "off",
    spellcheck: "false", placeholder: "run_…" });
  const findForm = h("form", { class: "find", role: "search" },
    h("label", { for: "find-run" }, "Find a run by id"), find,
    h("button", { type: "submit" }, "Open"));

  filter.addEventListener("change", () => {
    navigate(filter.value ? `#/?status=${encodeURIComponent(filter.value)}` : "#/");
  });
  findForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const id = find.value.trim();
    if (!id) return;
    try {
      await api.getRun(id);
      navigate(`#/runs/${encodeURIComponent(id)}`);
    } catch (error) {
      announce(error.status === 404 ? `No run with id ${id}.` : describeError(error), "error");
    }
  });

  let shown = null;  // what the table shows, so an unchanged refresh keeps focus in place
  async function load() {
    let page;
    try {
      page = await api.listRuns({ status, limit: PAGE_SIZE, cursor: pages[pages.length - 1] });
    } catch (error) {
      shown = null;
      fill(body, h("tr", {}, h("td", { colspan: 6, class: "error" }, describeError(error))));
      return;
    }
    const signature = `${pages.length}:${JSON.stringify(page)}`;
    if (signature === shown) return;
    shown = signature;
    const rows = page.runs.map((run) => h("tr", { "data-run-id": run.runId },
      h("td", {}, runLink(run.runId)),
      h("td", {}, agentLabel(run)),
      h("td", {}, statusBadge(run.status),
        run.status === "suspended" && run.suspension ? h("span", { class: "muted" }, ` ${REASONS[run.suspension.reason]
          ?? run.suspension.reason}`) : null),
      h("td", { class: "number" }, String(run.attempt)),
      h("td", { class: "number" }, tokensLabel(run.usage)),
      h("td", {}, time(run.updatedAt))));
    fill(body, rows.length ? rows
      : h("tr", {}, h("td", { colspan: 6, class: "muted" },
        status ? `No ${status} runs.` : "No runs yet. Start one.")));
    older.disabled = !page.cursor;
    older.dataset.cursor = page.cursor ?? "";
    newer.disabled = pages.length === 1;
    position.textContent = `Page ${pages.length}`;
  }
  older.addEventListener("click", () => {
    pages.push(older.dataset.cursor);
    load();
  });
  newer.addEventListener("click", () => {
    pages.pop();
    load();
  });

  fill(main,
    h("div", { class: "page-head" }, h("h1", { tabindex: -1 }, "Runs"),
      h("a", { href: "#/start", class: "button primary" }, "Start a run")),
    h("div", { class: "toolbar" },
      h("div", { class: "field-inline" }, h("label", { for: "status-filter" }, "Status"), filter),
      findForm,
      h("div", { class: "field-inline" }, live, h("label", { for: "live" }, "Live refresh"))),
    table,
    h("div", { class: "pager" }, newer, position, older));
  return every(REFRESH_MS, () => (live.checked ? load() : null));
}

function waitingFor(run) {
  const details = run.suspension?.details ?? {};
  switch (run.suspension?.reason) {
    case "approval":
      return [h("p", { class: "prompt" }, details.prompt ?? ""),
        details.stepPath ? h("p", { class: "muted" }, `Step ${details.stepPath}`) : null];
    case "token-budget":
      return h("p", {}, `Used ${formatNumber(details.consumedTokens)} of `
        + `${formatNumber(details.maxTotalTokens)} tokens: resume it with a new limit.`);
    case "effect-unknown":
      return h("p", {}, `A call of tool ${details.tool ?? "?"} may or may not have happened: `
        + "retry it, supply its result or skip it.");
    case "sub-run":
      return h("p", {}, "Its sub-run ", details.childRunId ? runLink(details.childRunId) : "?",
        " is not finished.");
    case "interrupted":
      return h("p", {}, "It was stopped gracefully and can be resumed.");
    default:
      return null;
  }
}

export function waitingPage(main) {
  const list = h("ul", { class: "waiting", "aria-labelledby": "waiting-title" });
  async function load() {
    const runs = [];
    try {
      let cursor;
      do {
        const page = await api.listRuns({ status: "suspended", limit: 100, cursor });
        runs.push(...page.runs);
        cursor = page.cursor;
      } while (cursor && runs.length < 500);
    } catch (error) {
      fill(list, h("li", { class: "error" }, describeError(error)));
      return;
    }
    fill(list, runs.length ? runs.map((run) => h("li", { class: "card waiting-run" },
      h("h2", {}, REASONS[run.suspension?.reason] ?? run.suspension?.reason ?? "Suspended",
        h("span", { class: "muted" }, ` · ${agentLabel(run)}`)),
      waitingFor(run),
      h("p", { class: "meta" }, runLink(run.runId), " · since ", time(run.updatedAt))))
      : h("li", { class: "muted" }, "Nothing is waiting for you."));
  }
  fill(main, h("h1", { id: "waiting-title", tabindex: -1 }, "Waiting for me"),
    h("p", { class: "muted" }, "Suspended runs, newest first, with what each needs."), list);
  return every(REFRESH_MS, load);
}
