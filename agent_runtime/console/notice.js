// What every page shares: the status message and moving between pages.

import { fill, h } from "./dom.js";

let shownAt = 0;

/** A short message in the status region (screen readers announce it). */
export function announce(message, kind = "info") {
  const notice = document.getElementById("notice");
  shownAt = Date.now();
  fill(notice, message ? h("p", { class: `notice notice-${kind}` }, message) : null);
}

/** On a new page: forget a message unless it was just shown (by the action that led here). */
export function clearStaleNotice() {
  if (Date.now() - shownAt > 2000) announce("");
}

/** Go to a page (`#/runs/ID`); the same page again is drawn anew. */
export function navigate(hash) {
  if (window.location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else window.location.hash = hash;
}

/** An error for a person: the API's problem detail, as text. */
export function describeError(error) {
  return error?.message || String(error);
}

/** Run `task` now, then again `ms` after each run ends, while the page is shown
 * (never two at once); returns the stop function. */
export function every(ms, task) {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    if (stopped) return;
    try {
      await task();
    } finally {
      if (!stopped) timer = setTimeout(tick, ms);
    }
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
