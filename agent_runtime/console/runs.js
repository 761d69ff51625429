// The runs list (a search kept in the address, newest first, paging, live
// refresh, a selection to act on in bulk) and "waiting for me": the suspended
// runs and what each waits for.

import { api } from "./api.js";
import { bulkActions } from "./bulk.js";
import { fill, formatNumber, h, statusBadge, time } from "./dom.js";
import { announce, describeError, every, navigate } from "./notice.js";
import { PAGE_SIZES, addressOf, searchForm, searchOf, zoneLabel } from "./search.js";
import { savedViewsPanel } from "./views.js";

const REFRESH_MS = 2000;
const MAX_MATCHING = 500;  // "select all matching" selects at most this many runs

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

/** The runs list: the search in the address (`query`), a page of matches, the
 * selection and what can be done with it. */
export function runsPage(main, { query }) {
  const { search, limit } = searchOf(query);
  const searching = Object.keys(search).length > 0;
  const pages = [undefined];  // the cursor of every page shown so far; the last is this one's
  const selection = new Set();  // run ids, kept across pages and refreshes
  let onPage = [];  // the run ids the table shows
  const body = h("tbody");
  const all = h("input", { type: "checkbox", id: "select-page",
    "aria-label": "Select all runs on this page" });
  const table = h("table", { class: "runs", "aria-describedby": "runs-caption" },
    h("caption", { id: "runs-caption" }, searching ? "Matching runs, newest first"
      : "Runs, newest first", h("span", { class: "muted" }, ` · times in ${zoneLabel()}`)),
    h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "select" }, all),
      ["Run", "Agent", "Status", "Attempt", "Tokens", "Created", "Updated"].map(
        (name) => h("th", { scope: "col" }, name)))),
    body);
  const older = h("button", { type: "button", disabled: true }, "Older runs");
  const newer = h("button", { type: "button", disabled: true }, "Newer runs");
  const position = h("span", { class: "muted", "aria-live": "polite" });
  const live = h("input", { type: "checkbox", id: "live", checked: true });
  const size = h("select", { id: "page-size", name: "limit" },
    PAGE_SIZES.map((value) => h("option", { value, selected: value === limit }, String(value))));
  const bulk = bulkActions({ selected: () => [...selection], runLink,
    onDone: () => load(true) });

  const form = searchForm(search, {
    onSearch: (wanted) => find(wanted),
    onClear: () => navigate(addressOf({}, limit)),
  });
  // A whole run id opens the run (whatever else the form holds); anything else lists
  // what matches, a prefix among it.
  async function find(wanted) {
    const id = wanted.idPrefix;
    if (id && id !== search.idPrefix) {
      try {
        await api.getRun(id);
        navigate(`#/runs/${encodeURIComponent(id)}`);
        return;
      } catch (error) {
        if (error.status !== 404 && error.status !== 422) {  // 422: not even an id
          announce(describeError(error), "error");
          return;
        }
      }
    }
    navigate(addressOf(wanted, limit));
  }
  size.addEventListener("change", () => navigate(addressOf(search, Number(size.value))));

  function setAll(checked) {
    for (const id of onPage) {
      if (checked) selection.add(id);
      else selection.delete(id);
    }
    for (const box of body.querySelectorAll("input[data-select]")) box.checked = checked;
    syncSelection();
  }
  function syncSelection() {
    const chosen = onPage.filter((id) => selection.has(id)).length;
    all.checked = onPage.length > 0 && chosen === onPage.length;
    all.indeterminate = chosen > 0 && chosen < onPage.length;
    bulk.update();
  }
  all.addEventListener("change", () => setAll(all.checked));
  // A bulk action over the search, not only the page: every match, read page by page,
  // at most MAX_MATCHING (a bound the person is told about).
  const everyMatch = h("button", { type: "button" }, `Select all matching (up to ${MAX_MATCHING})`);
  const clearSelection = h("button", { type: "button" }, "Clear selection");
  everyMatch.addEventListener("click", async () => {
    everyMatch.disabled = true;
    let cursor;
    let found = 0;
    try {
      do {
        const page = await api.listRuns({ ...search, limit: 100, cursor });
        for (const run of page.runs.slice(0, MAX_MATCHING - found)) selection.add(run.runId);
        found += page.runs.length;
        cursor = page.cursor;
      } while (cursor && found < MAX_MATCHING);
      announce(cursor ? `Selected the first ${MAX_MATCHING} matching runs; there are more.`
        : `Selected all ${Math.min(found, MAX_MATCHING)} matching runs.`);
    } catch (error) {
      announce(describeError(error), "error");
    } finally {
      everyMatch.disabled = false;
    }
    for (const box of body.querySelectorAll("input[data-select]")) {
      box.checked = selection.has(box.dataset.select);
    }
    syncSelection();
  });
  clearSelection.addEventListener("click", () => {
    selection.clear();
    for (const box of body.querySelectorAll("input[data-select]")) box.checked = false;
    syncSelection();
  });

  let shown = null;  // what the table shows, so an unchanged refresh keeps focus in place
  async function load(force = false) {
    let page;
    try {
      page = await api.listRuns({ ...search, limit, cursor: pages[pages.length - 1] });
    } catch (error) {
      shown = null;
      onPage = [];
      fill(body, h("tr", {}, h("td", { colspan: 8, class: "error" }, describeError(error))));
      syncSelection();
      return;
    }
    const signature = `${pages.length}:${JSON.stringify(page)}`;
    if (signature === shown && !force) return;
    shown = signature;
    onPage = page.runs.map((run) => run.runId);
    const rows = page.runs.map((run) => {
      const box = h("input", { type: "checkbox", "data-select": run.runId,
        checked: selection.has(run.runId), "aria-label": `Select run ${run.runId}` });
      box.addEventListener("change", () => {
        if (box.checked) selection.add(run.runId);
        else selection.delete(run.runId);
        syncSelection();
      });
      return h("tr", { "data-run-id": run.runId, "data-status": run.status },
        h("td", { class: "select" }, box),
        h("td", {}, runLink(run.runId)),
        h("td", {}, agentCell(run, search, limit)),
        h("td", {}, statusBadge(run.status),
          run.status === "suspended" && run.suspension ? h("span", { class: "muted" },
            ` ${REASONS[run.suspension.reason] ?? run.suspension.reason}`) : null),
        h("td", { class: "number" }, String(run.attempt)),
        h("td", { class: "number" }, tokensLabel(run.usage)),
        h("td", {}, time(run.createdAt, "compact")),
        h("td", {}, time(run.updatedAt, "compact")));
    });
    fill(body, rows.length ? rows
      : h("tr", {}, h("td", { colspan: 8, class: "muted" }, emptyText(search))));
    older.disabled = !page.cursor;
    older.dataset.cursor = page.cursor ?? "";
    newer.disabled = pages.length === 1;
    position.textContent = `Page ${pages.length}`;
    syncSelection();
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
    form,
    h("div", { class: "toolbar" },
      h("div", { class: "field-inline" }, live, h("label", { for: "live" }, "Live refresh")),
      h("div", { class: "field-inline" }, h("label", { for: "page-size" }, "Runs per page"), size),
      searching ? h("a", { href: addressOf(search, limit), class: "view-link",
        title: "Bookmark or share this link to come back to this search" },
      "Link to this search") : null),
    savedViewsPanel(searching ? addressOf(search, limit) : null),
    h("div", { class: "selection-tools" }, everyMatch, clearSelection),
    bulk.bar,
    bulk.results,
    h("div", { class: "table-scroll", tabindex: 0, role: "region",
      "aria-labelledby": "runs-caption" }, table),
    h("div", { class: "pager" }, newer, position, older));
  return every(REFRESH_MS, () => (live.checked ? load() : null));
}

// The agent a search by `agent` finds a run by: its manifest's id, else its name (the
// store's `agent_of`); the cell links to that search, as a person would type it.
function agentCell(run, search, limit) {
  const key = run.agent?.id || run.agent?.name;
  if (!key || search.agent === key) return agentLabel(run);
  return h("a", { href: addressOf({ ...search, agent: key }, limit), class: "agent-link",
    title: `Show the runs of agent ${key}` }, agentLabel(run));
}

function emptyText(search) {
  if (search.idPrefix && Object.keys(search).length === 1) {
    return `No run id starts with ${search.idPrefix}.`;
  }
  if (Object.keys(search).length) return "No runs match this search.";
  return "No runs yet. Start one.";
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
