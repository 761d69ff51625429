// Saved searches: a name for a runs-list address, kept in this browser's localStorage.
//
// The address is the view (search.js); this only names a few of them so they are a
// click away. Only addresses of the runs list are kept (`#/?...`), at most MAX_VIEWS,
// and what is read back is checked again: storage is this origin's, but a link's
// href must never become anything but a runs-list address.

import { fill, h } from "./dom.js";

const VIEWS_KEY = "agent-runtime.views";
const MAX_VIEWS = 20;
const MAX_NAME = 60;

function isRunsAddress(address) {
  return typeof address === "string" && /^#\/\?[^#\s]{1,2000}$/.test(address);
}

export function savedViews() {
  let stored;
  try {
    stored = JSON.parse(localStorage.getItem(VIEWS_KEY) || "[]");
  } catch {
    return [];
  }
  if (!Array.isArray(stored)) return [];
  return stored.filter((view) => view && typeof view.name === "string" && view.name
    && view.name.length <= MAX_NAME && isRunsAddress(view.address)).slice(0, MAX_VIEWS);
}

function keep(views) {
  localStorage.setItem(VIEWS_KEY, JSON.stringify(views.slice(0, MAX_VIEWS)));
}

/** The saved searches, and (when `address` is a search) a form to save it by name. */
export function savedViewsPanel(address) {
  const list = h("ul", { class: "saved-views-list" });
  const name = h("input", { id: "view-name", name: "view", type: "text", autocomplete: "off",
    maxlength: MAX_NAME, required: true, placeholder: "e.g. failed triage runs" });
  const save = isRunsAddress(address) ? h("form", { class: "save-view" },
    h("label", { for: "view-name" }, "Save this search as"), name,
    h("button", { type: "submit" }, "Save")) : null;

  function draw() {
    const views = savedViews();
    fill(list, views.map((view) => {
      const remove = h("button", { type: "button", class: "link-button",
        "aria-label": `Remove saved search ${view.name}` }, "Remove");
      remove.addEventListener("click", () => {
        keep(savedViews().filter((other) => other.name !== view.name));
        draw();
      });
      return h("li", {}, h("a", { href: view.address }, view.name), " ", remove);
    }));
    panel.hidden = !views.length && !save;
  }
  save?.addEventListener("submit", (event) => {
    event.preventDefault();
    const title = name.value.trim().slice(0, MAX_NAME);
    if (!title) return;
    keep([{ name: title, address }, ...savedViews().filter((view) => view.name !== title)]);
    name.value = "";
    draw();
  });
  const panel = h("section", { class: "saved-views", "aria-label": "Saved searches" },
    h("h2", {}, "Saved searches"), list, save);
  draw();
  return panel;
}
