// Edit, then fork: the checkpoint to start from, its variables as JSON (editable) and the
// new run's token limit; a confirmation that says what the fork starts with (tokens
// already consumed, of the budget) before POST /runs/{id}/fork.

import { api } from "./api.js";
import { fill, formatNumber, h } from "./dom.js";
import { announce, describeError, navigate } from "./notice.js";
import { forkRun } from "./run_api.js";

/** The form as an element; `seq` the checkpoint offered first, `latestSeq` the newest;
 * `onClose` when the person leaves it without forking. */
export function forkForm(runId, { seq, latestSeq, onClose = () => {} }) {
  const point = h("input", { id: "fork-seq", type: "number", min: 1, max: latestSeq,
    required: true, value: String(seq), inputmode: "numeric" });
  const variables = h("textarea", { id: "fork-variables", rows: 8, spellcheck: "false",
    "aria-describedby": "fork-variables-hint" });
  const limit = h("input", { id: "fork-budget", type: "number", min: 1, step: 1,
    inputmode: "numeric", "aria-describedby": "fork-budget-hint" });
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const confirm = h("div", { class: "fork-confirm", hidden: true });
  const review = h("button", { type: "submit", class: "primary" }, "Review the fork…");
  const close = h("button", { type: "button" }, "Close");
  close.addEventListener("click", () => onClose());
  const form = h("form", { class: "card fork-form", "aria-labelledby": "fork-title",
    novalidate: true },
  h("h2", { id: "fork-title" }, "Fork this run"),
  h("p", { class: "hint" }, "A new run starts from the checkpoint, with the same manifest; "
    + "this run is left as it is."),
  h("div", { class: "field" }, h("label", { for: "fork-seq" }, "Fork from checkpoint"), point),
  h("div", { class: "field" }, h("label", { for: "fork-variables" }, "Variables (JSON)"),
    variables, h("p", { id: "fork-variables-hint", class: "hint" },
      "The checkpoint's variables; what you change here replaces them in the new run.")),
  h("div", { class: "field" }, h("label", { for: "fork-budget" }, "Token limit"), limit,
    h("p", { id: "fork-budget-hint", class: "hint" },
      "The new run's budget; empty keeps the checkpoint's own.")),
  problem, h("div", { class: "buttons" }, review, close), confirm);

  let loaded = null;  // the checkpoint the fields were filled from
  let asked = 0;
  async function load(number) {
    const ask = ++asked;
    problem.hidden = true;
    confirm.hidden = true;
    form.setAttribute("aria-busy", "true");
    try {
      const checkpoint = await api.getCheckpoint(runId, number);
      if (ask !== asked) return;
      loaded = checkpoint;
      variables.value = JSON.stringify(checkpoint.variables, null, 2);
      limit.value = checkpoint.budget.maxTotalTokens ? String(checkpoint.budget.maxTotalTokens) : "";
    } catch (error) {
      if (ask !== asked) return;
      loaded = null;
      fill(problem, describeError(error));
      problem.hidden = false;
    } finally {
      if (ask === asked) form.removeAttribute("aria-busy");
    }
  }
  point.addEventListener("change", () => {
    const number = Number(point.value);
    if (Number.isInteger(number) && number >= 1 && number <= latestSeq) load(number);
  });

  function refuse(message, field) {
    fill(problem, message);
    problem.hidden = false;
    confirm.hidden = true;
    field?.focus();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    problem.hidden = true;
    const number = Number(point.value);
    if (!Number.isInteger(number) || number < 1 || number > latestSeq) {
      refuse(`Fork from checkpoint: a number from 1 to ${latestSeq}.`, point);
      return;
    }
    if (!loaded || loaded.seq !== number) {
      refuse("The checkpoint is still loading; try again in a moment.", point);
      return;
    }
    let edited;
    try {
      edited = JSON.parse(variables.value);
    } catch (error) {
      refuse(`Variables: not JSON (${error.message}).`, variables);
      return;
    }
    if (!edited || typeof edited !== "object" || Array.isArray(edited)) {
      refuse("Variables: a JSON object, {\"name\": value, …}.", variables);
      return;
    }
    const text = limit.value.trim();
    const budget = text === "" ? null : Number(text);
    if (budget !== null && (!Number.isInteger(budget) || budget < 1)) {
      refuse("Token limit: a whole number of tokens, at least 1, or empty.", limit);
      return;
    }
    const consumed = loaded.budget.consumedTokens;
    const effective = budget ?? loaded.budget.maxTotalTokens ?? null;
    const changed = JSON.stringify(edited) !== JSON.stringify(loaded.variables);
    const yes = h("button", { type: "button", class: "primary" }, "Yes, fork");
    const back = h("button", { type: "button" }, "Back");
    fill(confirm,
      h("p", { class: "cost" }, `The new run starts from checkpoint ${number} with `
        + `${formatNumber(consumed)} tokens already consumed`
        + (effective ? ` of its ${formatNumber(effective)}-token budget `
          + `(${formatNumber(Math.max(effective - consumed, 0))} left).` : " and no token limit.")),
      h("p", {}, changed ? "Its variables are the ones you edited." :
        "Its variables are the checkpoint's, unchanged."),
      effective !== null && effective <= consumed
        ? h("p", { class: "error" }, "The budget is already spent at this checkpoint: the "
          + "new run will stop at its first model call.") : null,
      h("div", { class: "buttons" }, yes, back));
    confirm.hidden = false;
    back.addEventListener("click", () => {
      confirm.hidden = true;
      review.focus();
    });
    yes.addEventListener("click", async () => {
      yes.disabled = true;
      try {
        const created = await forkRun(runId, { seq: number,
          variables: changed ? edited : undefined,
          maxTotalTokens: budget !== null && budget !== loaded.budget.maxTotalTokens
            ? budget : undefined });
        announce(`Forked from checkpoint ${number} as run ${created.runId}.`);
        navigate(`#/runs/${encodeURIComponent(created.runId)}`);
      } catch (error) {
        refuse(describeError(error));
        yes.disabled = false;
      }
    });
    yes.focus();
  });
  load(seq);
  queueMicrotask(() => point.focus());
  return form;
}
