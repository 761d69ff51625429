"""What a cold start loads: the run state machine's module serves the start
function too, which never builds a runtime (nor does an Advance that ends
before it executes), so importing it must not load the engine, its steps,
providers' HTTP client or JSON Schema (issue 16: a handler loads only what its
path uses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("agent_runtime.engine", "agent_runtime.steps", "agent_runtime.config", "httpx",
         "jsonschema")


def _loaded_by(module: str) -> dict[str, bool]:
    probe = (f"import json, sys; import {module}; "
             f"print(json.dumps({{m: m in sys.modules for m in {list(HEAVY)!r}}}))")
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, check=True,
                          capture_output=True, text=True)
    loaded: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_the_step_module_loads_no_engine_until_advance_needs_one() -> None:
    assert _loaded_by("functions.step.app") == dict.fromkeys(HEAVY, False)


def test_the_reconciler_loads_the_engine_only_to_resume_a_run() -> None:
    loaded = _loaded_by("functions.reconciler.app")
    assert not loaded["agent_runtime.engine"] and not loaded["httpx"]
