"""A code step's process runs alike on asyncio's loop (the CLI's) and on uvloop's (the loop
of `serve`'s runs when uvloop is installed): uvloop refuses `subprocess`'s `user`,
`group` and `extra_groups` arguments, so the child becomes its user itself."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from sandbox_kit import GENEROUS_MS, bubblewrap_sandbox

from agent_runtime.sandbox import SandboxRequest
from agent_runtime.sandbox.process import ProcessLimits, run_limited

T = TypeVar("T")
LOOPS = ["asyncio", "uvloop"]
LIMITS = ProcessLimits(address_space_bytes=1 << 31, cpu_seconds=30, processes=4096,
                       file_bytes=1 << 20, output_bytes=4096, timeout_seconds=120.0)
NOBODY = 65_534


def run_on(loop: str, coroutine: Coroutine[Any, Any, T]) -> T:
    if loop == "asyncio":
        return asyncio.run(coroutine)
    if importlib.util.find_spec("uvloop") is None:
        coroutine.close()
        pytest.skip("uvloop is not installed (the serve extra installs it)")
    import uvloop

    return uvloop.run(coroutine)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_process_runs_as_its_user_on_either_loop(loop: str) -> None:
    user = NOBODY if os.geteuid() == 0 else None
    result = run_on(loop, run_limited(["sh", "-c", "id -u; id -G"], env={"PATH": os.defpath},
                                      limits=LIMITS, user=user))
    assert result.exit_code == 0, result.stderr
    uid, groups = result.stdout.splitlines()
    if user is None:
        assert int(uid) == os.getuid()
    else:  # its own group only: none of root's
        assert int(uid) == NOBODY
        assert groups.split() == [str(NOBODY)]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_code_step_runs_in_the_sandbox_on_either_loop(loop: str) -> None:
    sandbox = bubblewrap_sandbox()
    request = SandboxRequest(run_id="run", step_path="steps[0]", language="python",
                             code="print(6 * 7)", variables={}, timeout_ms=GENEROUS_MS,
                             environment={})
    result = run_on(loop, sandbox.execute(request))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "42\n"
