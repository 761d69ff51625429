// Times on the run page, always with their time zone: a person reading "14:03:22"
// cannot tell whose afternoon it is, and runs are read from other zones than they ran in.

import { h } from "./dom.js";

const when = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
});

const clock = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
});

/** A timestamp with its zone (`short`: the time of day only), the exact ISO text in a <time>. */
export function zonedTime(iso, short = false) {
  const date = new Date(iso);
  const shown = Number.isNaN(date.getTime()) ? String(iso)
    : (short ? clock : when).format(date);
  return h("time", { datetime: iso, title: iso }, shown);
}
