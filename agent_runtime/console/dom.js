// Building the page: elements from data, never from HTML strings.
//
// Every text that comes from a run (model output, variables, step results,
// error messages) reaches the page as a text node or through `markdown`,
// which builds elements itself and knows no raw HTML. The page's CSP enforces
// Trusted Types, so an `innerHTML = string` anywhere would throw.

/** An element: h("a", {href: "#/"}, "Runs", child, ...). */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "on") {
      for (const [event, handler] of Object.entries(value)) element.addEventListener(event, handler);
    } else if (name === "class") {
      element.className = value;
    } else if (name === "value" || name === "checked") {
      element[name] = value;
    } else if (name === "text") {
      element.textContent = String(value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace everything inside `element`. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A JSON value as indented text (strings as themselves). */
export function jsonText(value) {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  return JSON.stringify(value, null, 2);
}

/** A value in a <pre>, as text. */
export function pre(value, className = "value") {
  return h("pre", { class: className }, jsonText(value));
}

const when = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit",
});

const clock = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit", minute: "2-digit", second: "2-digit",
});

// For a table of many rows: no year, 24-hour clock (the exact time is in the title).
const compact = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
  hourCycle: "h23",
});

/** A timestamp for people (`short`: the time of day only; "compact": no year), the exact
 * ISO text in a <time>. */
export function time(iso, short = false) {
  const date = new Date(iso);
  const format = short === "compact" ? compact : (short ? clock : when);
  const shown = Number.isNaN(date.getTime()) ? String(iso) : format.format(date);
  return h("time", { datetime: iso, title: iso }, shown);
}

export function formatNumber(value) {
  return typeof value === "number" ? value.toLocaleString() : "—";
}

/** A status as a labelled badge. */
export function statusBadge(status) {
  return h("span", { class: `status status-${status}` }, status);
}

// -- markdown ------------------------------------------------------------------
//
// Enough of it for model answers: paragraphs, headings, lists, fenced code,
// inline code, bold, italics and http(s) links. Everything else stays text.

/** Markdown text as a fragment of elements. */
export function markdown(text) {
  const fragment = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let index = 0;
  while (index < lines.length) {
    const line = lines[index];
    const fence = line.match(/^\s*(```|~~~)/);
    if (fence) {
      const body = [];
      index += 1;
      while (index < lines.length && !lines[index].trim().startsWith(fence[1])) {
        body.push(lines[index]);
        index += 1;
      }
      index += 1;
      fragment.append(h("pre", { class: "code" }, h("code", {}, body.join("\n"))));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      const level = Math.min(heading[1].length + 2, 6);  // below the page's own headings
      fragment.append(h(`h${level}`, { class: "md-heading" }, inline(heading[2])));
      index += 1;
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+/);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const list = h(ordered ? "ol" : "ul");
      while (index < lines.length) {
        const current = lines[index].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (!current || /\d/.test(current[1]) !== ordered) break;
        list.append(h("li", {}, inline(current[2])));
        index += 1;
      }
      fragment.append(list);
      continue;
    }
    if (!line.trim()) {
      index += 1;
      continue;
    }
    const paragraph = [];
    while (index < lines.length && lines[index].trim()
           && !/^(\s*(```|~~~)|#{1,6}\s|\s*([-*+]|\d+[.)])\s)/.test(lines[index])) {
      paragraph.push(lines[index]);
      index += 1;
    }
    const p = h("p");
    paragraph.forEach((part, position) => {
      if (position > 0) p.append(h("br"));
      p.append(inline(part));
    });
    fragment.append(p);
  }
  return fragment;
}

const INLINE = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*)|(\[[^\]]+\]\([^)\s]+\))/;

function inline(text) {
  const fragment = document.createDocumentFragment();
  let rest = text;
  while (rest) {
    const found = rest.match(INLINE);
    if (!found) {
      fragment.append(rest);
      break;
    }
    fragment.append(rest.slice(0, found.index));
    const token = found[0];
    if (found[1]) {
      fragment.append(h("code", {}, token.slice(1, -1)));
    } else if (found[2]) {
      fragment.append(h("strong", {}, token.slice(2, -2)));
    } else if (found[3]) {
      fragment.append(h("em", {}, token.slice(1, -1)));
    } else {
      const link = token.match(/^\[([^\]]+)\]\(([^)\s]+)\)$/);
      fragment.append(safeLink(link[1], link[2]) ?? token);
    }
    rest = rest.slice(found.index + token.length);
  }
  return fragment;
}

function safeLink(label, target) {
  let url;
  try {
    url = new URL(target);
  } catch {
    return null;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return null;
  return h("a", { href: url.href, rel: "noopener noreferrer nofollow", target: "_blank" }, label);
}
