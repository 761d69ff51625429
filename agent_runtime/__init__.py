"""agent-runtime: a durable runtime for LLM agent runs.

Runs of schema 1.0 agent manifests are checkpointed at every commit point and
resume from their latest checkpoint after any crash, without repeating
finished work, double-spending their token budget or re-running a saved tool
call.
"""

from __future__ import annotations

from stores.records import Budget, RunStatus

from agent_runtime.clock import Clock, SystemClock
from agent_runtime.engine import AgentRuntime
from agent_runtime.errors import InvalidInput, ManifestError, ManifestMismatch, StepFailed
from agent_runtime.results import RunResult
from agent_runtime.tools import Tool, ToolContext, tool

__version__ = "0.1.0"

__all__ = [
    "AgentRuntime",
    "Budget",
    "Clock",
    "InvalidInput",
    "ManifestError",
    "ManifestMismatch",
    "RunResult",
    "RunStatus",
    "StepFailed",
    "SystemClock",
    "Tool",
    "ToolContext",
    "__version__",
    "tool",
]
