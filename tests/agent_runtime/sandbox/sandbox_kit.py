"""The bubblewrap sandbox with small limits, for tests; skipped, saying why, only
where this machine cannot run bubblewrap."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.sandbox import SandboxRequest, SandboxResult, SandboxSettings
from agent_runtime.sandbox.bubblewrap import BubblewrapSandbox

SMALL_LIMITS: dict[str, Any] = {
    "memoryMb": 128, "maxProcesses": 16, "maxOutputBytes": 4096,
    "maxFileBytes": 1024 * 1024, "workspaceBytes": 4 * 1024 * 1024, "cpuSeconds": 30,
    "allowedEnvironment": ["GREETING", "PRIVATE_TOKEN"]}
# A guard against a hung sandbox, not a speed limit.
GENEROUS_MS = 120_000


def bubblewrap_sandbox(**settings: Any) -> BubblewrapSandbox:
    sandbox = BubblewrapSandbox(SandboxSettings.model_validate({**SMALL_LIMITS, **settings}))
    refusal = sandbox.availability()
    if refusal is not None:
        pytest.skip(f"bubblewrap cannot run on this machine: {refusal}")
    return sandbox


def run_code(sandbox: BubblewrapSandbox, code: str, *, language: str = "python",
             timeout_ms: int = GENEROUS_MS, variables: dict[str, Any] | None = None,
             environment: dict[str, str] | None = None) -> SandboxResult:
    request = SandboxRequest(run_id="run", step_path="steps[0]", language=language, code=code,
                             variables=variables or {}, timeout_ms=timeout_ms,
                             environment=environment or {})
    return asyncio.run(sandbox.execute(request))


def processes_with(token: str) -> list[int]:
    """The host's processes whose command line holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
