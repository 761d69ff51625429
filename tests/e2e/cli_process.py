"""The `agent-runtime` command as real processes, for the end-to-end tests that
kill, stop or signal it: the command line, its environment, the scripted
model's request log, and a four-step run slow enough to catch mid-way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "agent_runtime.cli"]
REQUEST_LOG = "requests.jsonl"

FOUR_STEPS_MANIFEST = """schemaVersion: '1.0'
id: four-steps
model: {provider: openai, model: gpt-5.6}
steps:
  - {id: first, type: prompt, prompt: One., outputVariable: one}
  - {id: second, type: prompt, prompt: "Two after {{ one }}", outputVariable: two}
  - {id: third, type: prompt, prompt: "Three after {{ two }}"}
  - {id: fourth, type: prompt, prompt: Four., includeInFinalOutput: true}
"""

# `second` is slow, so a process can be killed (or stopped) while it waits for it.
FOUR_STEPS_SCRIPT = """responses:
  - {text: one, delayMs: 300}
  - {text: two, delayMs: 1500}
  - {text: three, delayMs: 300}
  - {text: four, delayMs: 300}
"""

# `agent-runtime run` of the four-step run, given the lease and run id after it.
RUN_FOUR_STEPS = ("run", "four.agent.yaml", "--model", "scripted/four.script.yaml")


def write_four_steps(workdir: Path) -> None:
    """`four.agent.yaml` and `four.script.yaml` in `workdir`."""
    (workdir / "four.agent.yaml").write_text(FOUR_STEPS_MANIFEST)
    (workdir / "four.script.yaml").write_text(FOUR_STEPS_SCRIPT)


def cli_env(workdir: Path, **extra: str) -> dict[str, str]:
    """The environment of a command run in `workdir`: this checkout importable, and
    the scripted model logging each request to `workdir/requests.jsonl`."""
    return dict(os.environ, PYTHONPATH=str(REPO),
                AGENT_RUNTIME_SCRIPTED_LOG=str(workdir / REQUEST_LOG), **extra)


def run_cli(workdir: Path, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`agent-runtime ARGS` in `workdir`, to its end (two minutes at most: a guard
    against a hung child, not a speed limit)."""
    return subprocess.run([*COMMAND, *args], cwd=workdir, env=env or cli_env(workdir),
                          capture_output=True, text=True, timeout=120, check=False)


def spawn_cli(workdir: Path, *args: str, env: dict[str, str] | None = None,
              **streams: Any) -> subprocess.Popen[Any]:
    """`agent-runtime ARGS` started in `workdir`; `streams` are Popen's `stdout`,
    `stderr` and `text`."""
    return subprocess.Popen([*COMMAND, *args], cwd=workdir, env=env or cli_env(workdir),
                            **streams)


def wait_for_requests(workdir: Path, count: int, child: subprocess.Popen[Any]) -> None:
    """Until the scripted model got its `count`-th request (with 2, the four-step
    run is waiting in its slow `second` step), or `child` ends."""
    wait_for(lambda: len(model_requests(workdir)) >= count,
             f"model request {count}", child=child)


def model_requests(workdir: Path) -> list[dict[str, Any]]:
    """The scripted model's requests so far, in order (step_id, request_index, ...)."""
    log = workdir / REQUEST_LOG
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def wait_for(condition: Callable[[], bool], what: str, *,
             child: subprocess.Popen[Any] | None = None, timeout: float = 300) -> None:
    """Poll until `condition` holds; fail naming `what` if `child` ends first or the
    (generous: the machine may be loaded) timeout passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if child is not None:
            assert child.poll() is None, f"the process ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
