// Start a run: a manifest (pasted, or one of the examples), a variables form
// built from its declarations, a model override and a token budget.
//
// The declarations and the manifest's problems come from the server
// (POST /manifests/validate), which reads the manifest with the same code as
// POST /runs: the form and the server never read one manifest differently.

import { api } from "./api.js";
import { fill, h, jsonText } from "./dom.js";
import { announce, describeError, navigate } from "./notice.js";

// Each edit of the manifest asks the server (POST /manifests/validate) after this pause.
const CHECK_DELAY_MS = 300;

function variableField(declaration, index) {
  const id = `var-${index}`;
  const hint = `${id}-hint`;
  const hasDefault = declaration.hasDefault === true;
  const required = declaration.required === true;
  const value = declaration.default;
  const common = { id, name: declaration.key, "aria-describedby": hint, required,
    "data-key": declaration.key, "data-type": declaration.type };
  let control;
  if (declaration.type === "boolean") {
    control = h("select", common,
      h("option", { value: "" }, hasDefault ? `Default (${value})` : "Not set"),
      h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
  } else if (declaration.type === "string" && !(hasDefault && String(value).includes("\n"))) {
    control = h("input", { ...common, type: "text", autocomplete: "off",
      placeholder: hasDefault ? String(value) : "" });
  } else if (declaration.type === "number") {
    control = h("input", { ...common, type: "number", step: "any",
      placeholder: hasDefault ? String(value) : "" });
  } else {
    control = h("textarea", { ...common, rows: 4, spellcheck: "false",
      placeholder: hasDefault ? jsonText(value) : "" });
  }
  const notes = [`${declaration.type}`];
  if (required) notes.push("required");
  else if (hasDefault) notes.push("empty keeps the default");
  if (["object", "array", "json"].includes(declaration.type)) notes.push("as JSON");
  return h("div", { class: "field" },
    h("label", { for: id }, declaration.key, required ? h("span", { class: "required" }, " *") : null),
    control,
    h("p", { id: hint, class: "hint" }, declaration.description ? `${declaration.description} ` : "",
      `(${notes.join("; ")})`));
}

/** The overrides the form holds: {key: value}; a field left empty is not sent. */
function collectVariables(fieldset) {
  const variables = {};
  for (const control of fieldset.querySelectorAll("[data-key]")) {
    const raw = control.value;
    if (raw === "") continue;
    const { key, type } = control.dataset;
    if (type === "string") variables[key] = raw;
    else if (type === "boolean") variables[key] = raw === "true";
    else if (type === "number") {
      const number = Number(raw);
      if (!Number.isFinite(number)) throw new Error(`variable ${key}: not a number`);
      variables[key] = number;
    } else {
      try {
        variables[key] = JSON.parse(raw);
      } catch (error) {
        throw new Error(`variable ${key}: not JSON (${error.message})`);
      }
    }
  }
  return variables;
}

export function startPage(main) {
  const examples = h("select", { id: "example", name: "example" },
    h("option", { value: "" }, "Paste your own below"));
  const manifest = h("textarea", { id: "manifest", name: "manifest", rows: 16, required: true,
    spellcheck: "false", "aria-describedby": "manifest-hint" });
  const variables = h("fieldset", { class: "variables" });
  const model = h("input", { id: "model", name: "model", type: "text", autocomplete: "off",
    spellcheck: "false", placeholder: "scripted/echo", "aria-describedby": "model-hint" });
  const budget = h("input", { id: "budget", name: "budget", type: "number", min: 1, step: 1,
    "aria-describedby": "budget-hint" });
  const problem = h("div", { class: "form-error", role: "alert" });
  const submit = h("button", { type: "submit", class: "primary" }, "Start run");
  // The manifest's problems as the server words them (errors and warnings).
  const problems = h("div", { id: "manifest-problems", class: "manifest-problems",
    "aria-live": "polite" });
  let rawVariables = null;  // the JSON textarea, when the form cannot be generated
  let asked = 0;  // the latest check asked for: an older answer is ignored

  function variablesAsJson(reason) {
    rawVariables = h("textarea", { id: "variables-json", rows: 4, spellcheck: "false" });
    fill(variables, h("legend", {}, "Variables"), h("p", { class: "hint" }, reason),
      h("label", { for: "variables-json" }, "Variables (a JSON object)"), rawVariables);
  }

  function showProblems(found) {
    if (!found.length) {
      fill(problems);
      return;
    }
    fill(problems, h("ul", { class: "problems" }, found.map((item) => h("li",
      { class: `problem problem-${item.severity}` },
      h("strong", {}, item.severity === "error" ? "Problem: " : "Warning: "), item.message))));
  }

  async function rebuildVariables() {
    const text = manifest.value;
    const ask = ++asked;
    if (!text.trim()) {
      rawVariables = null;
      showProblems([]);
      fill(variables, h("legend", {}, "Variables"),
        h("p", { class: "hint" }, "This manifest declares no variables."));
      return;
    }
    let found;
    try {
      found = await api.validateManifest(text);
    } catch (error) {
      if (ask !== asked) return;
      showProblems([]);
      variablesAsJson(`The server could not check this manifest (${describeError(error)}); `
        + "give the variables as a JSON object.");
      return;
    }
    if (ask !== asked) return;  // the manifest changed meanwhile
    showProblems(found.problems);
    if (!found.valid) {
      variablesAsJson("Fix the manifest's problem to get a form for its variables, "
        + "or give them as a JSON object.");
      return;
    }
    rawVariables = null;
    // What was typed into a field the manifest still declares stays typed.
    const typed = new Map([...variables.querySelectorAll("[data-key]")]
      .map((control) => [`${control.dataset.key}:${control.dataset.type}`, control.value]));
    fill(variables, h("legend", {}, "Variables"),
      found.variables.length ? found.variables.map(variableField)
        : h("p", { class: "hint" }, "This manifest declares no variables."));
    for (const control of variables.querySelectorAll("[data-key]")) {
      const earlier = typed.get(`${control.dataset.key}:${control.dataset.type}`);
      if (earlier) control.value = earlier;
    }
  }

  let timer = null;
  manifest.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(rebuildVariables, CHECK_DELAY_MS);
  });
  examples.addEventListener("change", async () => {
    const option = examples.selectedOptions[0];
    if (!option?.value) return;
    try {
      manifest.value = await api.consoleFile(`examples/${option.value}`);
    } catch (error) {
      announce(describeError(error), "error");
      return;
    }
    if (option.dataset.model && !model.value) model.value = option.dataset.model;
    rebuildVariables();
  });

  const form = h("form", { class: "start card", novalidate: false },
    h("div", { class: "field" }, h("label", { for: "example" }, "Example manifest"), examples),
    h("div", { class: "field" }, h("label", { for: "manifest" }, "Agent manifest (YAML or JSON)"),
      manifest, h("p", { id: "manifest-hint", class: "hint" },
        "Schema 1.0. Sent as written; the server checks it as you type.")),
    problems,
    variables,
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "model" }, "Model override"), model,
        h("p", { id: "model-hint", class: "hint" },
          "PROVIDER/MODEL for every step; empty uses the manifest's. scripted/echo needs "
          + "no network.")),
      h("div", { class: "field" }, h("label", { for: "budget" }, "Token budget"), budget,
        h("p", { id: "budget-hint", class: "hint" },
          "Max total tokens across all attempts; empty for no limit."))),
    problem,
    h("div", { class: "buttons" }, submit));

  // The browser's own checks (a required field left empty) block the submit before
  // the handler runs: the error of an earlier attempt would stay beside them.
  form.addEventListener("invalid", () => fill(problem), true);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fill(problem);
    const body = { manifest: manifest.value };
    try {
      const values = rawVariables ? (rawVariables.value.trim()
        ? JSON.parse(rawVariables.value) : {}) : collectVariables(variables);
      if (Object.keys(values).length) body.variables = values;
    } catch (error) {
      fill(problem, h("p", {}, error.message));
      return;
    }
    if (model.value.trim()) body.options = { model: model.value.trim() };
    if (budget.value) body.budget = { maxTotalTokens: Number(budget.value) };
    submit.disabled = true;
    try {
      const run = await api.createRun(body);
      announce(`Started run ${run.runId}.`);
      navigate(`#/runs/${encodeURIComponent(run.runId)}`);
    } catch (error) {
      fill(problem, h("p", {}, describeError(error)));
      submit.disabled = false;
    }
  });

  fill(main, h("h1", { tabindex: -1 }, "Start a run"), form);
  rebuildVariables();
  api.consoleFile("examples/index.json").then((text) => {
    for (const example of JSON.parse(text).examples) {
      examples.append(h("option", { value: example.file, "data-model": example.model ?? "" },
        `${example.title} — ${example.description}`));
    }
  }).catch(() => announce("The example manifests could not be loaded.", "error"));
  return null;
}
