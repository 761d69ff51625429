"""agent-runtime: a durable runtime for LLM agent runs.

Runs of schema 1.0 agent manifests are checkpointed at every commit point and
resume from their latest checkpoint after any crash, without repeating
finished work, double-spending their token budget or re-running a saved tool
call.

The names below are imported on first use: `import agent_runtime.manifest`
(or the CLI's `--help`) does not load the engine, its providers and tools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stores.records import Budget, RunStatus

    from agent_runtime.clock import Clock, SystemClock
    from agent_runtime.engine import AgentRuntime
    from agent_runtime.errors import InvalidInput, ManifestError, ManifestMismatch, StepFailed
    from agent_runtime.results import RunResult
    from agent_runtime.tools import Tool, ToolContext, tool

__version__ = "0.1.0"

_HOMES = {
    "AgentRuntime": "agent_runtime.engine",
    "Budget": "stores.records",
    "Clock": "agent_runtime.clock",
    "InvalidInput": "agent_runtime.errors",
    "ManifestError": "agent_runtime.errors",
    "ManifestMismatch": "agent_runtime.errors",
    "RunResult": "agent_runtime.results",
    "RunStatus": "stores.records",
    "StepFailed": "agent_runtime.errors",
    "SystemClock": "agent_runtime.clock",
    "Tool": "agent_runtime.tools",
    "ToolContext": "agent_runtime.tools",
    "tool": "agent_runtime.tools",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


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
