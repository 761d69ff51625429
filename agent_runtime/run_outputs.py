"""A run's outputs: the output it ends with, and what the host lets its steps' outputs take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stores.records import JsonObject, JsonValue

from agent_runtime.errors import StepFailed
from agent_runtime.serde import json_size
from agent_runtime.state import COMPLETED, STEP
from agent_runtime.state_projection import projected_run_output

if TYPE_CHECKING:
    from agent_runtime.manifest import AgentManifest
    from agent_runtime.policy import HostPolicy
    from agent_runtime.step_kinds import StepBase


def final_output(manifest: AgentManifest, step_results: Sequence[JsonObject], *,
                 projecting: bool) -> JsonValue:
    """Marked top-level outputs in manifest order (one value or a list), else the
    last completed top-level step's output."""
    marked = {step.id for step in manifest.steps if step.include_in_final_output}
    # In manifest order: a parallel wave's members complete in any order.
    order = {step.id: index for index, step in enumerate(manifest.steps)}
    completed = sorted((entry for entry in step_results
                        if entry["kind"] == STEP and entry["depth"] == 0
                        and entry["status"] == COMPLETED),
                       key=lambda entry: order.get(entry["step_id"], -1))
    chosen = [entry["output"] for entry in completed if entry["step_id"] in marked]
    if chosen and projecting:
        kinds = {step.id: step.type for step in manifest.steps}
        return projected_run_output(chosen, [(kinds.get(entry["step_id"], ""),
                                              entry["output"]) for entry in completed])
    if chosen:
        return chosen[0] if len(chosen) == 1 else chosen
    return completed[-1]["output"] if completed else None


def kept_output_bytes(step_results: Sequence[JsonObject]) -> int:
    """JSON bytes of the completed steps' outputs, steps with child steps left out
    (their outputs are made of their children's)."""
    completed = [entry for entry in step_results if entry.get("status") == COMPLETED]
    containers: set[str] = set()
    for entry in completed:
        parts = str(entry.get("step_path", "")).split("/")
        containers.update("/".join(parts[:end]) for end in range(1, len(parts)))
    return sum(json_size(entry.get("output")) for entry in completed
               if entry.get("step_path") not in containers)


class OutputAllowance:
    """The host policy's bounds on step outputs (`policy.maxStepOutputBytes`,
    `maxRunOutputBytes`) over one attempt: what earlier attempts kept is counted
    once, at the first output, and each output adds to it."""

    def __init__(self, policy: HostPolicy, step_results: Sequence[JsonObject]) -> None:
        self._policy = policy
        self._limited = policy.max_step_output_bytes is not None \
            or policy.max_run_output_bytes is not None
        self._kept = kept_output_bytes(step_results) if self._limited else 0

    def take(self, step: StepBase, step_path: str, output: JsonValue) -> None:
        """Count a step's output, or fail the step (`output_too_large`) when it is more
        than the policy keeps, alone or with the run's earlier outputs."""
        if not self._limited or getattr(step, "steps", None) is not None:
            return  # a step with child steps: its output is made of theirs, counted already
        size = json_size(output)
        refusal = self._policy.output_refusal(size, self._kept + size)
        if refusal is not None:
            raise StepFailed("output_too_large", f"step {step_path}: {refusal}")
        self._kept += size
