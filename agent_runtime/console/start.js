// Start a run: a manifest (pasted, or one of the examples), a variables form
// built from its declarations, a model override and a token budget.

import { api } from "./api.js";
import { fill, h, jsonText } from "./dom.js";
import { announce, describeError, navigate } from "./notice.js";
import { parseManifestText } from "./yaml.js";

const TYPES = new Set(["string", "number", "boolean", "object", "array", "json"]);

/** The declarations the form is built from, or a reason it cannot be. */
function declarations(text) {
  if (!text.trim()) return { declared: [] };
  let manifest;
  try {
    manifest = parseManifestText(text);
  } catch (error) {
    return { reason: `The form cannot read this manifest here (${error.message}); give the `
      + "variables as a JSON object. The server checks the manifest when you start it." };
  }
  const declared = manifest && typeof manifest === "object" ? manifest.variables : undefined;
  if (declared === undefined || declared === null) return { declared: [] };
  if (!Array.isArray(declared) || !declared.every(
    (item) => item && typeof item.key === "string" && TYPES.has(item.type))) {
    return { reason: "The manifest's `variables` are not a list of {key, type} declarations; "
      + "give the variables as a JSON object." };
  }
  return { declared };
}

function variableField(declaration, index) {
  const id = `var-${index}`;
  const hint = `${id}-hint`;
  const hasDefault = Object.hasOwn(declaration, "value");
  const required = declaration.requiresOverride === true;
  const common = { id, name: declaration.key, "aria-describedby": hint, required,
    "data-key": declaration.key, "data-type": declaration.type };
  let control;
  if (declaration.type === "boolean") {
    control = h("select", common,
      h("option", { value: "" }, hasDefault ? `Default (${declaration.value})` : "Not set"),
      h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
  } else if (declaration.type === "string" && !(hasDefault && String(declaration.value).includes("\n"))) {
    control = h("input", { ...common, type: "text", autocomplete: "off",
      placeholder: hasDefault ? String(declaration.value) : "" });
  } else if (declaration.type === "number") {
    control = h("input", { ...common, type: "number", step: "any",
      placeholder: hasDefault ? String(declaration.value) : "" });
  } else {
    control = h("textarea", { ...common, rows: 4, spellcheck: "false",
      placeholder: hasDefault ? jsonText(declaration.value) : "" });
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
  let rawVariables = null;  // the JSON textarea, when the form cannot be generated

  function rebuildVariables() {
    const found = declarations(manifest.value);
    rawVariables = null;
    if (found.reason) {
      rawVariables = h("textarea", { id: "variables-json", rows: 4, spellcheck: "false" });
      fill(variables, h("legend", {}, "Variables"), h("p", { class: "hint" }, found.reason),
        h("label", { for: "variables-json" }, "Variables (a JSON object)"), rawVariables);
      return;
    }
    fill(variables, h("legend", {}, "Variables"),
      found.declared.length ? found.declared.map(variableField)
        : h("p", { class: "hint" }, "This manifest declares no variables."));
  }

  let timer = null;
  manifest.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(rebuildVariables, 250);
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
        "Schema 1.0. Sent as written; the server validates it.")),
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
