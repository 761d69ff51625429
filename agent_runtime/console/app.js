// The console's entry point: the token, the sections and the router.
//
// Addresses are fragments, so every page is this one file and the server
// sees no run ids in page requests:
//   #/            runs list; a search in the query (#/?agent=triage&status=failed)
//   #/waiting     suspended runs, with what each waits for
//   #/start       start a run
//   #/runs/ID     a run
//   #/runs/ID/checkpoints/SEQ   one checkpoint's state, "fork from here"

import {
  ApiError, api, forgetToken, onTokenForgottenElsewhere, setToken, takeTokenFromAddress, token,
} from "./api.js";
import { fill, h } from "./dom.js";
import { clearStaleNotice } from "./notice.js";
import { checkpointPage } from "./checkpoint.js";
import { runPage } from "./run.js";
import { runsPage, waitingPage } from "./runs.js";
import { startPage } from "./start.js";

const main = document.getElementById("main");
const signOut = document.getElementById("sign-out");
const tenantLabel = document.getElementById("tenant");
let leave = null;  // stops the current page's live refresh
// A token from a link that differs from this tab's: held here (never stored)
// until the person chooses between the two.
let offeredToken = null;
let shownTenantOf = null;  // the token whose tenant the header shows

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
      " (or the --token you gave). This browser remembers it, so a new tab does not ask "
      + "again, until you choose Forget token."),
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

/** The tenant a token names, as text for a person. */
async function tenantOf(asToken) {
  try {
    return { tenant: await api.whoami(asToken) };
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      return { refused: "this server does not accept it" };
    }
    return { refused: `the server could not say (${error.message})` };
  }
}

/** The header names the tenant every page acts for, once per token. */
async function showTenant() {
  const current = token();
  if (!current || current === shownTenantOf) return;
  shownTenantOf = current;
  tenantLabel.hidden = true;
  const { tenant } = await tenantOf();
  if (token() !== current) return;  // signed out or replaced meanwhile
  if (tenant === undefined) {
    shownTenantOf = null;
    return;
  }
  fill(tenantLabel, "Tenant ", h("strong", {}, tenant));
  tenantLabel.title = `Every run shown and started here is tenant ${tenant}'s`;
  tenantLabel.hidden = false;
}

function hideTenant() {
  shownTenantOf = null;
  tenantLabel.hidden = true;
  fill(tenantLabel);
}

function replaceTokenPage() {
  const offered = offeredToken;
  const current = h("dd", {}, "…");
  const incoming = h("dd", {}, "…");
  const keep = h("button", { type: "button", class: "primary" }, "Keep the current token");
  const replace = h("button", { type: "button" }, "Use the link's token");
  const card = h("section", { class: "card sign-in", "aria-labelledby": "replace-title" },
    h("h1", { id: "replace-title", tabindex: -1 }, "Replace this tab's token?"),
    h("p", {}, "The address you opened carries a bearer token that is not the one this tab "
      + "signed in with. A token decides whose runs you see and act on, and any page can "
      + "link here with a token of its choosing: replace yours only if you meant to."),
    h("dl", { class: "facts" },
      h("div", {}, h("dt", {}, "This tab's token"), current),
      h("div", {}, h("dt", {}, "The link's token"), incoming)),
    h("div", { class: "buttons" }, keep, replace));
  const decide = (adopt) => {
    offeredToken = null;
    if (adopt) {
      setToken(offered);
      hideTenant();
    }
    route();
  };
  keep.addEventListener("click", () => decide(false));
  replace.addEventListener("click", () => decide(true));
  fill(main, card);
  keep.focus();
  const describe = ({ tenant, refused }) => (tenant !== undefined
    ? ["tenant ", h("strong", {}, tenant)] : [refused]);
  // The choice names the change it makes, once both tenants are known.
  Promise.all([tenantOf(), tenantOf(offered)]).then(([mine, theirs]) => {
    fill(current, ...describe(mine));
    fill(incoming, ...describe(theirs));
    if (mine.tenant !== undefined && theirs.tenant !== undefined) {
      replace.textContent = mine.tenant === theirs.tenant
        ? `Use the link's token (same tenant ${theirs.tenant})`
        : `Use the link's token (switch from tenant ${mine.tenant} to ${theirs.tenant})`;
    }
  });
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
    hideTenant();
    markSection(null);
    signInPage();
    return;
  }
  signOut.hidden = false;
  showTenant();
  if (offeredToken !== null) {
    markSection(null);
    replaceTokenPage();
    return;
  }
  const { parts, query } = parseHash();
  let section = null;
  if (parts.length === 0 || (parts[0] === "runs" && parts.length === 1)) {
    section = "runs";
    leave = runsPage(main, { query });
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
  hideTenant();
  if (leave) leave();
  leave = null;
  signOut.hidden = true;
  signInPage("The server did not accept the token. Sign in again.");
});
signOut.addEventListener("click", () => {
  forgetToken();
  route();
});
onTokenForgottenElsewhere(() => route());
// A token can arrive with any address, also one opened in this tab later.
function arrive() {
  const offered = takeTokenFromAddress();
  if (offered !== null) offeredToken = offered;
  route();
}

window.addEventListener("hashchange", arrive);
arrive();
