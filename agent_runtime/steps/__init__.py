"""Step kinds, one module each, and the default registry the engine uses."""

from __future__ import annotations

from agent_runtime.steps.approval import ApprovalStepExecutor
from agent_runtime.steps.base import StepExecutor, StepRegistry
from agent_runtime.steps.code import CodeStepExecutor
from agent_runtime.steps.loop import LoopStepExecutor
from agent_runtime.steps.prompt import PromptStepExecutor
from agent_runtime.steps.subrun import SubRunStepExecutor
from agent_runtime.steps.webhook import WebhookStepExecutor

__all__ = ["StepExecutor", "StepRegistry", "default_steps"]


def default_steps() -> StepRegistry:
    return StepRegistry({
        "prompt": PromptStepExecutor(),
        "loop": LoopStepExecutor(),
        "approval": ApprovalStepExecutor(),
        "code": CodeStepExecutor(),
        "sub-run": SubRunStepExecutor(),
        "webhook": WebhookStepExecutor(),
    })
