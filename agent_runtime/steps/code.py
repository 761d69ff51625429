"""`code` steps: parsed and validated, but executing them needs a sandbox adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stores.records import Frame, JsonValue

from agent_runtime.errors import StepFailed
from agent_runtime.manifest import CodeStep

if TYPE_CHECKING:
    from agent_runtime.execution import Execution


class CodeStepExecutor:
    async def execute(self, step: CodeStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        raise StepFailed(
            "sandbox_unavailable",
            f"step {frame.step_path}: code steps run only in a sandbox, and no sandbox "
            "adapter is configured for this runtime",
        )
