"""The step seam: one executor per step kind, looked up by `type`.

An executor runs one step and returns its output. It keeps whatever it needs
to resume in `frame.continuation` (JSON only) and calls `ctx.checkpoint()` at
its own commit points; a composite step (a loop) runs its children with
`ctx.run_sequence`, passing down the `resume` frames below its own. Adding a
step kind is a new module registered in `agent_runtime.steps`, never an edit
of the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from stores.records import Frame

if TYPE_CHECKING:
    from agent_runtime.execution import Execution


class StepExecutor(Protocol):
    async def execute(self, step: Any, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> Any:
        """Run `step` (resuming from `frame.continuation` and `resume`); return its output."""
        ...


class StepRegistry:
    def __init__(self, executors: dict[str, StepExecutor] | None = None) -> None:
        self._executors: dict[str, StepExecutor] = dict(executors or {})

    def register(self, kind: str, executor: StepExecutor) -> None:
        self._executors[kind] = executor

    def get(self, kind: str) -> StepExecutor | None:
        return self._executors.get(kind)

    def kinds(self) -> list[str]:
        return sorted(self._executors)

    def copy(self) -> StepRegistry:
        return StepRegistry(self._executors)
