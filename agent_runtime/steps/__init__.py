"""Step kinds, one module each, and the registry the engine runs them from.

A step kind is a manifest model and an executor, registered together:

    class EchoStep(StepBase):
        type: Literal["echo"] = "echo"
        text: str

    class EchoExecutor:
        async def execute(self, step: EchoStep, frame, ctx, resume) -> JsonValue:
            return step.text

    register_step_kind("echo", EchoStep, EchoExecutor())

From then on manifests in this process may use `{type: echo, id: ..., text:
...}` (validated with `EchoStep`), and every runtime built without its own
`steps=` registry runs them (`default_steps()`).
"""

from __future__ import annotations

from agent_runtime.manifest import (
    ApprovalStep,
    CodeStep,
    LoopStep,
    PromptStep,
    SubRunStep,
    WebhookStep,
)
from agent_runtime.step_kinds import register_step_model, unregister_step_model
from agent_runtime.steps.approval import ApprovalStepExecutor
from agent_runtime.steps.base import RunsSteps, S, StepExecutor, StepKind, StepRegistry
from agent_runtime.steps.code import CodeStepExecutor
from agent_runtime.steps.loop import LoopStepExecutor
from agent_runtime.steps.prompt import PromptStepExecutor
from agent_runtime.steps.subrun import SubRunStepExecutor
from agent_runtime.steps.webhook import WebhookStepExecutor

__all__ = ["StepExecutor", "StepKind", "StepRegistry", "default_steps", "register_step_kind",
           "unregister_step_kind"]

_KINDS: dict[str, RunsSteps] = {kind.kind: kind for kind in (
    StepKind("prompt", PromptStep, PromptStepExecutor()),
    StepKind("loop", LoopStep, LoopStepExecutor()),
    StepKind("approval", ApprovalStep, ApprovalStepExecutor()),
    StepKind("code", CodeStep, CodeStepExecutor()),
    StepKind("sub-run", SubRunStep, SubRunStepExecutor()),
    StepKind("webhook", WebhookStep, WebhookStepExecutor()),
)}


def register_step_kind(kind: str, model: type[S], executor: StepExecutor[S], *,
                       replace: bool = False) -> None:
    """Add a step kind to this process: manifests may use it, runtimes run it.

    `model` is a `StepBase` subclass declaring `type: Literal[kind] = kind`;
    its fields and validators are the step's schema, and its errors are
    reported like a built-in step's (`steps[2].text: required field is
    missing`). A kind already registered is refused (`StepKindError`)
    unless `replace`. Runtimes built afterwards without their own `steps=`
    registry run it with `executor`.
    """
    register_step_model(kind, model, replace=replace)
    _KINDS[kind] = StepKind(kind, model, executor)


def unregister_step_kind(kind: str) -> None:
    """Remove a kind `register_step_kind` added (a plug-in unloaded, a test's own kind)."""
    unregister_step_model(kind)
    _KINDS.pop(kind, None)


def default_steps() -> StepRegistry:
    """Every step kind registered in this process, for one runtime."""
    return StepRegistry(_KINDS.values())
