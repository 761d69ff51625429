// The runs list's search: the form, and the address that holds it.
//
// A search lives in the address (`#/?agent=triage&status=failed&createdAfter=...`),
// so a link or a bookmark reproduces the view: that is what a saved view is. Times
// are entered in the browser's local time (the form names the zone) and kept in the
// address as UTC ISO 8601, so a link shows the same runs to someone in another zone.

import { h } from "./dom.js";

export const STATUSES = ["created", "running", "suspended", "completed", "failed", "cancelled"];
// GET /runs' filters, as the address and the API name them.
export const FILTERS = ["idPrefix", "agent", "status", "createdAfter", "createdBefore", "parent"];
export const PAGE_SIZES = [25, 50, 100];

/** The search an address's query holds: {filter: value} (only those given) and `limit`. */
export function searchOf(query) {
  const search = {};
  for (const name of FILTERS) {
    const value = (query.get(name) || "").trim();
    if (value) search[name] = value;
  }
  const limit = Number(query.get("limit"));
  return { search, limit: PAGE_SIZES.includes(limit) ? limit : PAGE_SIZES[0] };
}

/** The address of a search (`#/` for none). */
export function addressOf(search, limit) {
  const query = new URLSearchParams();
  for (const name of FILTERS) {
    if (search[name]) query.set(name, search[name]);
  }
  if (limit !== PAGE_SIZES[0]) query.set("limit", String(limit));
  const text = query.toString();
  return text ? `#/?${text}` : "#/";
}

/** The browser's time zone, as a person reads it: "Europe/Berlin, UTC+01:00". */
export function zoneLabel(at = new Date()) {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  const minutes = -at.getTimezoneOffset();
  const sign = minutes < 0 ? "-" : "+";
  const hours = String(Math.floor(Math.abs(minutes) / 60)).padStart(2, "0");
  const rest = String(Math.abs(minutes) % 60).padStart(2, "0");
  return `${zone}, UTC${sign}${hours}:${rest}`;
}

/** A `datetime-local` value (local time) as UTC ISO 8601; "" when empty or not a time. */
export function localToIso(value) {
  if (!value) return "";
  const date = new Date(value);  // no zone in the text: local time, as the field means
  return Number.isNaN(date.getTime()) ? "" : date.toISOString();
}

/** UTC ISO 8601 as a `datetime-local` value in local time. */
export function isoToLocal(iso) {
  const date = new Date(iso);
  if (!iso || Number.isNaN(date.getTime())) return "";
  const pad = (number) => String(number).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`
    + `T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

/** The search form, filled from `search`; `onSearch(search)` when submitted (or the
 * status is changed), `onClear()` when cleared. */
export function searchForm(search, { onSearch, onClear }) {
  const text = (id, name, label, attributes = {}) => {
    const input = h("input", { id, name, type: "text", autocomplete: "off", spellcheck: "false",
      value: search[name] ?? "", ...attributes });
    return { input, field: h("div", { class: "field" }, h("label", { for: id }, label), input) };
  };
  const idPrefix = text("find-run", "idPrefix", "Run id or prefix", { placeholder: "run_…",
    type: "search" });
  const agent = text("search-agent", "agent", "Agent", {
    placeholder: "its manifest's id", title: "The manifest's id (its name when it has no id)" });
  const parent = text("search-parent", "parent", "Parent run", { placeholder: "run_…" });
  const status = h("select", { id: "status-filter", name: "status" },
    h("option", { value: "" }, "Any status"),
    STATUSES.map((name) => h("option", { value: name, selected: name === search.status }, name)));
  const zone = zoneLabel();
  const when = (id, name, label) => {
    const input = h("input", { id, name, type: "datetime-local", value: isoToLocal(search[name]),
      "aria-describedby": "search-zone" });
    return { input, field: h("div", { class: "field" }, h("label", { for: id }, label), input) };
  };
  const after = when("search-after", "createdAfter", "Created from");
  const before = when("search-before", "createdBefore", "Created to");
  const clear = h("button", { type: "button" }, "Clear filters");
  const form = h("form", { class: "search card", role: "search", "aria-label": "Search runs" },
    h("div", { class: "search-fields" },
      idPrefix.field, agent.field,
      h("div", { class: "field" }, h("label", { for: "status-filter" }, "Status"), status),
      after.field, before.field, parent.field),
    h("p", { id: "search-zone", class: "hint" }, `Times are your local time (${zone}).`),
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Search"),
      clear));
  const read = () => ({
    idPrefix: idPrefix.input.value.trim(), agent: agent.input.value.trim(),
    status: status.value, parent: parent.input.value.trim(),
    createdAfter: localToIso(after.input.value), createdBefore: localToIso(before.input.value),
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onSearch(read());
  });
  status.addEventListener("change", () => onSearch(read()));
  clear.addEventListener("click", onClear);
  return form;
}
