"""The step seam: a step kind is its manifest model and its executor, registered together.

An executor runs one step and returns its output. It keeps whatever it needs
to resume in `frame.continuation` (JSON only) and calls `ctx.checkpoint()` at
its own commit points; a composite step (a loop) runs its children with
`ctx.run_sequence`, passing down the `resume` frames below its own. Adding a
step kind is `register_step_kind(kind, model, executor)` (see
`agent_runtime.steps`), never an edit of the engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from stores.records import Frame, JsonValue

from agent_runtime.step_kinds import StepBase, register_step_model

if TYPE_CHECKING:
    from agent_runtime.execution import Execution

S = TypeVar("S", bound=StepBase)
S_contra = TypeVar("S_contra", bound=StepBase, contravariant=True)


class StepExecutor(Protocol[S_contra]):
    """Runs the steps of one kind, `S_contra` being that kind's manifest model."""

    async def execute(self, step: S_contra, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        """Run `step` (resuming from `frame.continuation` and `resume`); return its output."""
        ...


@dataclass(frozen=True)
class StepKind(Generic[S]):
    """A step kind: the model its manifest entries validate with, and its executor."""

    kind: str
    model: type[S]
    executor: StepExecutor[S]

    async def execute(self, step: StepBase, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        if not isinstance(step, self.model):
            # A manifest parsed while another model was registered for this kind.
            raise TypeError(f"step {frame.step_path}: a {type(step).__name__} is not a "
                            f"{self.model.__name__}, the model of {self.kind!r} steps here")
        return await self.executor.execute(step, frame, ctx, resume)


class RunsSteps(Protocol):
    """A step kind as the engine sees it, whatever its model."""

    @property
    def kind(self) -> str: ...

    async def execute(self, step: StepBase, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue: ...


class StepRegistry:
    """The step kinds one runtime executes (`AgentRuntime(steps=...)`), by kind."""

    def __init__(self, kinds: Iterable[RunsSteps] = ()) -> None:
        self._kinds: dict[str, RunsSteps] = {kind.kind: kind for kind in kinds}

    def register(self, kind: str, model: type[S], executor: StepExecutor[S]) -> None:
        """Run `kind` steps (validated with `model`) with `executor` in this runtime,
        replacing its executor if it had one. A kind manifests do not know yet
        becomes parseable with `model` (as `register_step_kind` would make it); one
        parsed with another model in this process is refused (`StepKindError`),
        since its manifests would not give this executor its model."""
        register_step_model(kind, model)
        self._kinds[kind] = StepKind(kind, model, executor)

    def get(self, kind: str) -> RunsSteps | None:
        return self._kinds.get(kind)
