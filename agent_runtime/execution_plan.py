"""Which top-level steps of a run may execute side by side: waves.

A run manifest's `execution: {mode: parallel, maxConcurrency}` asks for
independent steps to run concurrently. The grouping is the reference
implementation's (`buildExecutionWaves`), because a manifest must plan the
same way on both runtimes:

- only prompt steps without tools and without `extensions` are eligible;
  every other step is a barrier and runs in a wave of its own;
- eligible steps join the current wave until one reads (in its prompt, system
  prompt or `when`) or writes a variable that a member of the wave writes;
- `maxConcurrency` (default 4) and the host's cap (default 8) split waves;
- the `step-output-state-v1` state projection extension plans sequentially.

Waves are contiguous runs of step indexes, so the checkpoint cursor (the
index of the next step) stays enough to recover a sequential plan.

One deliberate difference: the text of a prompt's `messages` counts as a read
too. The reference looks only at `prompt`, `systemPrompt` and `when`, so a
message template reading a wave member's output would run before it exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeGuard

from agent_runtime.excerpts import printable
from agent_runtime.manifest import PromptStep
from agent_runtime.state_projection import projects
from agent_runtime.step_kinds import Step

if TYPE_CHECKING:
    from agent_runtime.config import RuntimeConfig
    from agent_runtime.manifest import AgentManifest
    from agent_runtime.run_manifest import LoadedManifest, RunExecution

DEFAULT_MAX_CONCURRENCY = 4
DEFAULT_HOST_MAX_CONCURRENCY = 8


@dataclass(frozen=True)
class ExecutionWave:
    """Indexes into `manifest.steps` that may run concurrently, in order."""

    step_indexes: tuple[int, ...]


def build_execution_waves(manifest: AgentManifest, start_step_index: int = 0,
                          execution: RunExecution | None = None, *,
                          host_max_concurrency: int = DEFAULT_HOST_MAX_CONCURRENCY,
                          ) -> list[ExecutionWave]:
    """The waves of `manifest.steps[start_step_index:]` under `execution`."""
    requested = DEFAULT_MAX_CONCURRENCY
    if execution is not None and execution.max_concurrency is not None:
        requested = execution.max_concurrency
    width = max(1, min(requested, max(1, host_max_concurrency)))
    parallel = (execution is not None and execution.mode == "parallel" and width > 1
                and not _projects_step_state(manifest))

    waves: list[ExecutionWave] = []
    current: list[int] = []

    def flush() -> None:
        while current:
            waves.append(ExecutionWave(tuple(current[:width])))
            del current[:width]

    for index in range(start_step_index, len(manifest.steps)):
        step = manifest.steps[index]
        if not parallel or not _eligible(step):
            flush()
            waves.append(ExecutionWave((index,)))
            continue
        if _depends_on(step, (manifest.steps[member] for member in current)):
            flush()
        current.append(index)
        if len(current) == width:
            flush()
    flush()
    return waves


def _projects_step_state(manifest: AgentManifest) -> bool:
    return projects(manifest.extensions)


def _eligible(step: Step) -> TypeGuard[PromptStep]:
    return isinstance(step, PromptStep) and not step.tools and step.extensions is None


def _depends_on(step: PromptStep, wave: Iterable[Step]) -> bool:
    for member in wave:
        written = member.output_variable
        if written and (step.output_variable == written or _reads(step, written)):
            return True
    return False


def _reads(step: PromptStep, key: str) -> bool:
    templates: list[str | None] = [step.system_prompt, step.prompt]
    templates.extend(_message_texts(step))
    return (any(_template_reads(text, key) for text in templates)
            or _condition_reads(step.when, key))


def _message_texts(step: PromptStep) -> Sequence[str]:
    texts: list[str] = []
    for message in step.messages or []:
        texts.append(message.model_dump_json())
    return texts


def _template_reads(text: str | None, key: str) -> bool:
    if not text:
        return False
    pattern = r"\{\{\s*" + re.escape(key) + r"(?:\.|\s*\}\})"
    return re.search(pattern, text, re.IGNORECASE) is not None


def _condition_reads(expression: str | None, key: str) -> bool:
    if not expression:
        return False
    if _template_reads(expression, key):
        return True
    pattern = r"(?:^|[^A-Za-z0-9_.\-])" + re.escape(key) + r"(?=$|\.|[^A-Za-z0-9_.\-])"
    return re.search(pattern, expression, re.IGNORECASE) is not None


def plan_json(loaded: LoadedManifest, config: RuntimeConfig | None) -> dict[str, Any]:
    """The plan of a manifest file as `validate --plan` reports it: the mode, the
    width asked for, the host's cap (`config`'s, else the default) and the waves
    by step id. An agent manifest alone runs sequentially."""
    execution = loaded.run.execution if loaded.run is not None else None
    host = DEFAULT_HOST_MAX_CONCURRENCY if config is None \
        else config.execution.max_concurrency
    requested = DEFAULT_MAX_CONCURRENCY
    if execution is not None and execution.max_concurrency is not None:
        requested = execution.max_concurrency
    steps = loaded.agent.steps
    waves = build_execution_waves(loaded.agent, 0, execution, host_max_concurrency=host)
    return {"mode": "sequential" if execution is None else execution.mode,
            "max_concurrency": requested, "host_max_concurrency": host,
            "waves": [[steps[index].id for index in wave.step_indexes] for wave in waves]}


def print_plan(plan: dict[str, Any], out: TextIO) -> None:
    """The plan for people: one line per wave, its steps side by side."""
    head = f"plan: {plan['mode']}"
    if plan["mode"] == "parallel":
        head += (f", maxConcurrency {plan['max_concurrency']} "
                 f"(host cap {plan['host_max_concurrency']})")
    out.write(f"{head}, {len(plan['waves'])} waves\n")
    for number, wave in enumerate(plan["waves"], start=1):
        out.write(printable(f"  wave {number}: {', '.join(wave)}", multiline=False) + "\n")
