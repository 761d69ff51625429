"""Sandboxes for `code` steps: the `SandboxAdapter` seam and the local bubblewrap adapter.

docs/sandbox.md says what each adapter guarantees and limits.
"""

from agent_runtime.sandbox.contract import (
    SandboxAdapter,
    SandboxRequest,
    SandboxResult,
    SandboxUnavailable,
)
from agent_runtime.sandbox.selection import build_sandbox, code_step_problem
from agent_runtime.sandbox.settings import SandboxSettings

__all__ = ["SandboxAdapter", "SandboxRequest", "SandboxResult", "SandboxSettings",
           "SandboxUnavailable", "build_sandbox", "code_step_problem"]
