// A value a run produced (an output, a step result): text as markdown built as
// elements, an object key by key, anything else as JSON text. Never HTML.

import { h, markdown, pre } from "./dom.js";

// Past this many characters a value is folded, so a long loop output does
// not push the rest of the page out of reach.
const FOLD_AT = 4000;
// A list past this many items shows its first ones, the rest behind a fold.
const LIST_AT = 100;

function folded(text, element) {
  if (text.length <= FOLD_AT) return element;
  return h("details", { class: "fold" },
    h("summary", {}, `Show all (${text.length.toLocaleString()} characters)`), element);
}

export function renderValue(value) {
  if (typeof value === "string") {
    return folded(value, h("div", { class: "markdown" }, markdown(value)));
  }
  if (value && typeof value === "object" && !Array.isArray(value)) {
    return h("dl", { class: "output-fields" }, Object.entries(value).map(([key, item]) => [
      h("dt", {}, key), h("dd", {}, renderValue(item))]));
  }
  if (Array.isArray(value) && value.length) {
    // A list of texts (a loop's answers, say) reads as a list, each as text with its
    // line breaks, not as JSON with \n escapes.
    const item = (each) => h("li", {}, renderValue(each));
    const list = h("ol", { class: "output-list" }, value.slice(0, LIST_AT).map(item));
    if (value.length <= LIST_AT) return list;
    return h("div", {}, list, h("details", { class: "fold" },
      h("summary", {}, `Show the other ${(value.length - LIST_AT).toLocaleString()} items`),
      h("ol", { class: "output-list", start: LIST_AT + 1 }, value.slice(LIST_AT).map(item))));
  }
  const text = JSON.stringify(value, null, 2) ?? "";
  return folded(text, pre(value));
}
