"""`extensions.agentRuntime.stateProjection: "step-output-state-v1"`, as the reference has it.

With it, each step's output (parsed when it is JSON or YAML text, fenced or
not) is also kept in the run's variables under `step-N` (N: the step's place
among the manifest's top-level steps, counted from 1; a step inside a loop
writes its loop's key) — or the key the step's `extensions.agentRuntime.
stateKey` names — and under `step-previous`; a step's `outputVariable` gets
the parsed value too. `step-previous` depends on order, so such a manifest
runs its steps one at a time (execution_plan.py). The run's output is its
marked steps' outputs as text joined by blank lines, falling back to the last
step's that has any (approvals and webhooks aside), else "".

Any other `stateProjection` value is refused when the manifest is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

from agent_runtime.js_json import js_json
from agent_runtime.step_kinds import StepBase

SEQUENTIAL_PROJECTION = "step-output-state-v1"
PREVIOUS = "step-previous"
RUNTIME_NAMESPACE = "agentRuntime"
_FENCE = re.compile(r"^```([^\n\r]*)\r?\n([\s\S]*?)\r?\n```$")
_NOT_SHOWN = ("approval", "webhook")  # kinds the output fallback passes over


def runtime_extension(extensions: dict[str, Any] | None) -> dict[str, Any] | None:
    """`extensions.agentRuntime` when it is an object."""
    value = (extensions or {}).get(RUNTIME_NAMESPACE)
    return value if isinstance(value, dict) else None


def projects(extensions: dict[str, Any] | None) -> bool:
    """Whether a manifest with these `extensions` projects step outputs into state."""
    runtime = runtime_extension(extensions)
    return runtime is not None and runtime.get("stateProjection") == SEQUENTIAL_PROJECTION


def projection_problem(extensions: dict[str, Any] | None) -> str | None:
    """Why a manifest's `extensions.agentRuntime.stateProjection` cannot be honoured."""
    runtime = runtime_extension(extensions)
    if runtime is None or "stateProjection" not in runtime:
        return None
    if runtime["stateProjection"] == SEQUENTIAL_PROJECTION:
        return None
    return (f"unknown state projection {runtime['stateProjection']!r}: the one this "
            f"runtime knows is {SEQUENTIAL_PROJECTION!r}")


def parsed_output(value: Any) -> Any:
    """A text output parsed as the data it holds (JSON, or fenced JSON or YAML), else as it is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    fence = _FENCE.match(text)
    if fence:
        language = fence.group(1).strip().lower()
        if language in ("json", "yaml", "yml", ""):
            text = fence.group(2).strip()
            if language in ("yaml", "yml"):
                try:
                    loaded = yaml.safe_load(text)
                except yaml.YAMLError:
                    return value
                return loaded if isinstance(loaded, dict | list) else value
    if not text.startswith(("{", "[")):
        return value
    try:
        return json.loads(text)
    except ValueError:
        return value


def projected(step: StepBase, top_index: int, output: Any) -> dict[str, Any]:
    """The variables step `step` (under top-level step `top_index`, from 0) sets."""
    value = parsed_output(output)
    own = runtime_extension(step.extensions) or {}
    key = own.get("stateKey")
    variables = {key if isinstance(key, str) else f"step-{top_index + 1}": value,
                 PREVIOUS: value}
    if step.output_variable:
        variables[step.output_variable] = value
    return variables


def as_text(value: Any) -> str:
    """An output as the run's text output shows it (strings as they are, the rest as JSON)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else js_json(value)


def projected_run_output(chosen: Sequence[Any],
                         completed: Sequence[tuple[str, Any]]) -> str:
    """The run's output: the marked outputs (`chosen`) as text joined by blank lines,
    else the last text of `completed` ((kind, output) of top-level steps, in order)
    that an approval or webhook did not write, else ""."""
    texts = [text for text in map(as_text, chosen) if text]
    if texts:
        return "\n\n".join(texts)
    for kind, output in reversed(completed):
        text = as_text(output)
        if kind not in _NOT_SHOWN and text:
            return text
    return ""


__all__ = ["PREVIOUS", "SEQUENTIAL_PROJECTION", "as_text", "parsed_output", "projected",
           "projected_run_output", "projection_problem", "projects", "runtime_extension"]
