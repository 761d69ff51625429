"""Names a manifest's templates and conditions read that nothing in it declares.

`{{ outlin }}` for `{{ outline }}` renders as empty text, as in the reference
implementation (a missing value is ""), and a condition reading a misspelled
name sees null: the run goes on, quietly wrong. `validate` reports each such
name by field, as a warning (an error with `--strict`).

A name is declared by the manifest's `variables`, any step's `outputVariable`
(a loop may read, in a later iteration, what a step after it wrote), a loop's
`resultVariable`, `step-N`, `step-previous` and `stateKey`s under a state
projection (state_projection.py), and, inside a loop, its `itemVariable`,
`indexVariable` and `loop`. Lookups ignore case, as rendering does. Only a name's first segment
is checked: what a value holds is known only when the run has it.

An approval's `prompt` is not rendered (the reference shows it as written),
so a placeholder there is reported too: it will be shown verbatim.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from agent_runtime.conditions import condition_identifiers
from agent_runtime.errors import ConditionSyntaxError
from agent_runtime.manifest import (
    AgentManifest,
    ApprovalStep,
    LoopStep,
    PromptStep,
    iter_steps,
)
from agent_runtime.state_projection import PREVIOUS, projects, runtime_extension
from agent_runtime.step_kinds import StepBase
from agent_runtime.templates import RESERVED_SEGMENTS, template_paths

LOOP_SCOPE = "loop"


@dataclass(frozen=True)
class TemplateFinding:
    field: str  # where, as `steps[1].prompt`
    message: str


def undeclared_references(manifest: AgentManifest) -> list[TemplateFinding]:
    """Each template or condition name `manifest` reads that it never declares, and
    each placeholder in an approval prompt (shown verbatim), in field order."""
    declared = {variable.key.lower() for variable in manifest.variables}
    declared |= {name.lower() for name in _written(manifest.steps)}
    if any(isinstance(step, LoopStep) for _, step in iter_steps(manifest.steps)):
        declared.add(LOOP_SCOPE)  # a loop's scope stays readable after it ends
    if projects(manifest.extensions):  # each output kept as step-N and step-previous
        declared |= {PREVIOUS, *(f"step-{number}" for number in
                                 range(1, len(manifest.steps) + 1))}
        for _, step in iter_steps(manifest.steps):
            key = (runtime_extension(step.extensions) or {}).get("stateKey")
            if isinstance(key, str):
                declared.add(key.lower())
    return list(_findings(manifest.steps, "steps", frozenset(declared)))


def _written(steps: Sequence[StepBase]) -> Iterator[str]:
    for step in steps:
        if step.output_variable is not None:
            yield step.output_variable
        if isinstance(step, LoopStep) and step.loop.result_variable is not None:
            yield _top(step.loop.result_variable)
        yield from _written(step.child_steps())


def _findings(steps: Sequence[StepBase], prefix: str,
              declared: frozenset[str]) -> Iterator[TemplateFinding]:
    for index, step in enumerate(steps):
        path = f"{prefix}[{index}]"
        yield from _unknown_in_condition(step.when, f"{path}.when", declared)
        if isinstance(step, PromptStep):
            yield from _unknown_in_text(step.prompt, f"{path}.prompt", declared)
            yield from _unknown_in_text(step.system_prompt, f"{path}.systemPrompt", declared)
            for number, message in enumerate(step.messages or []):
                for part_number, part in enumerate(message.content):
                    text = getattr(part, "text", None)
                    if getattr(part, "type", None) == "text" and isinstance(text, str):
                        yield from _unknown_in_text(
                            text, f"{path}.messages[{number}].content[{part_number}].text",
                            declared)
        elif isinstance(step, ApprovalStep) and template_paths(step.prompt):
            yield TemplateFinding(f"{path}.prompt", (
                "an approval's prompt is shown as written, not rendered: "
                f"{{{{ {template_paths(step.prompt)[0]} }}}} will appear verbatim"))
        inner = declared
        if isinstance(step, LoopStep):
            spec = step.loop
            for name, field in ((spec.condition, "condition"), (spec.goal, "goal")):
                yield from _unknown_in_condition(name, f"{path}.loop.{field}",
                                                 _in_loop(declared, step))
            if spec.source is not None and spec.source.strip():
                yield from _unknown_names([_source_name(spec.source)], f"{path}.loop.source",
                                          declared)
            inner = _in_loop(declared, step)
        children = step.child_steps()
        if children:
            yield from _findings(children, f"{path}.{step.child_steps_field}", inner)


def _in_loop(declared: frozenset[str], step: LoopStep) -> frozenset[str]:
    names = {LOOP_SCOPE}
    for variable in (step.loop.item_variable, step.loop.index_variable):
        if variable is not None:
            names.add(_top(variable).lower())
    return declared | names


def _top(path: str) -> str:
    return path.split(".", 1)[0].strip()


def _source_name(source: str) -> str:
    text = source.strip()
    if text.startswith("{{") and text.endswith("}}"):
        text = text[2:-2]
    return _top(text)


def _unknown_in_text(text: str | None, field: str,
                     declared: frozenset[str]) -> Iterator[TemplateFinding]:
    if text:
        yield from _unknown_names([_top(path) for path in template_paths(text)], field,
                                  declared)


def _unknown_in_condition(expression: str | None, field: str,
                          declared: frozenset[str]) -> Iterator[TemplateFinding]:
    if not expression:
        return
    try:
        names = condition_identifiers(expression)
    except ConditionSyntaxError:
        return  # the manifest's own validation reports it
    yield from _unknown_names(names, field, declared)


def _unknown_names(names: list[str], field: str,
                   declared: frozenset[str]) -> Iterator[TemplateFinding]:
    reported: set[str] = set()
    for name in names:
        key = name.lower()
        if key in declared or key in reported or key in RESERVED_SEGMENTS:
            continue
        reported.add(key)
        yield TemplateFinding(field, (
            f"{name!r} is not a declared variable or any step's outputVariable: it "
            "reads as empty (null in a condition)"))


__all__ = ["TemplateFinding", "undeclared_references"]
