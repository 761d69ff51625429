// What every page shares: the status message and moving between pages.

import { fill, h } from "./dom.js";

// A message belongs to the page it was shown on. The one exception: the action that
// shows it and then moves to another page (started a run, then its page) carries it
// there, once. A page left any other way (a link, the back button) leaves it behind.
let shownAt = 0;
let carried = false;
const CARRY_MS = 2000;  // "just shown": by the action that is navigating now

/** A short message in the status region (screen readers announce it). */
export function announce(message, kind = "info") {
  const notice = document.getElementById("notice");
  shownAt = Date.now();
  fill(notice, message ? h("p", { class: `notice notice-${kind}` }, message) : null);
}

/** On a new page: forget the message unless the action that led here carried it. */
export function clearStaleNotice() {
  if (!carried) announce("");
  carried = false;
}

/** Go to a page (`#/runs/ID`), taking a message this action just showed along; the
 * same page again is drawn anew. */
export function navigate(hash) {
  carried = Date.now() - shownAt < CARRY_MS;
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
