// The console's entry point: the token, the sections and the router.
//
// Addresses are fragments, so every page is this one file and the server
// sees no run ids in page requests:
//   #/            runs list (#/?status=suspended)
//   #/waiting     suspended runs, with what each waits for
//   #/start       start a run
//   #/runs/ID     a run
//   #/runs/ID/checkpoints/SEQ   one checkpoint's state, "fork from here"

import { adoptTokenFromAddress, forgetToken, setToken, token } from "./api.js";
import { fill, h } from "./dom.js";
import { clearStaleNotice } from "./notice.js";
import { checkpointPage } from "./checkpoint.js";
import { runPage } from "./run.js";
import { runsPage, waitingPage } from "./runs.js";
import { startPage } from "./start.js";

const main = document.getElementById("main");
const signOut = document.getElementById("sign-out");
let leave = null;  // stops the current page's live refresh

function parseHash() {
  const raw = window.location.hash.replace(/^#/, "") || "/";
  const [path, query = ""] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent),
    query: new URLSearchParams(query) };
}

function signInPage(reason) {
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off",
    required: true, spellcheck: "false" });
  const form = h("form", { class: "card sign-in", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title", tabindex: -1 }, "Sign in"),
    reason ? h("p", { class: "error", role: "alert" }, reason) : null,
    h("p", {}, "The API needs a bearer token. With ", h("code", {}, "agent-runtime serve"),
      " it is in ", h("code", {}, ".agent-runtime/serve.token"),
      " (or the --token you gave). It is kept in this tab only."),
    h("label", { for: "token" }, "Bearer token"), input,
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Sign in")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    route();
  });
  fill(main, form);
  input.focus();
}

function markSection(section) {
  for (const link of document.querySelectorAll("nav a[data-section]")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route() {
  if (leave) leave();
  leave = null;
  clearStaleNotice();
  if (!token()) {
    signOut.hidden = true;
    markSection(null);
    signInPage();
    return;
  }
  signOut.hidden = false;
  const { parts, query } = parseHash();
  let section = null;
  if (parts.length === 0 || (parts[0] === "runs" && parts.length === 1)) {
    section = "runs";
    leave = runsPage(main, { status: query.get("status") || "" });
  } else if (parts[0] === "waiting") {
    section = "waiting";
    leave = waitingPage(main);
  } else if (parts[0] === "start") {
    section = "start";
    leave = startPage(main);
  } else if (parts[0] === "runs" && parts.length === 2) {
    leave = runPage(main, { runId: parts[1] });
  } else if (parts[0] === "runs" && parts[2] === "checkpoints" && parts.length === 4) {
    leave = checkpointPage(main, { runId: parts[1], seq: parts[3] });
  } else {
    fill(main, h("h1", { tabindex: -1 }, "Not found"),
      h("p", {}, "No such page. ", h("a", { href: "#/" }, "Back to the runs")));
  }
  markSection(section);
  const heading = main.querySelector("h1");
  if (heading && document.activeElement === document.body) heading.focus({ preventScroll: true });
}

window.addEventListener("console:unauthorized", () => {
  forgetToken();
  if (leave) leave();
  leave = null;
  signOut.hidden = true;
  signInPage("The server did not accept the token. Sign in again.");
});
signOut.addEventListener("click", () => {
  forgetToken();
  route();
});
// A token can arrive with any address, also one opened in this tab later.
function arrive() {
  adoptTokenFromAddress();
  route();
}

window.addEventListener("hashchange", arrive);
arrive();
