"""What a cold start loads: the run state machine's module serves the start
function too, which never builds a runtime (nor does an Advance that ends
before it executes), so importing it must not load the engine, its steps,
providers' HTTP client or JSON Schema (issue 16: a handler loads only what its
path uses). The API builds the engine only for a route that needs one (creating,
forking, cancelling or answering a run), and reads a manifest only for a route
given one: its import loads neither, nor JSON Schema, an HTTP client, a provider
or the MCP SDK; those load with the first run created, schema compiled, webhook
sent or model called (issue 34; the time itself: bench/layer_cold_import.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What no handler's import needs: executing a step loads them.
STEP_MACHINERY = ("httpx", "jsonschema", "referencing", "re2", "agent_runtime.schemas",
                  "aiohttp", "anthropic", "mcp")
# What the stores and the functions make their AWS clients without (stores/aws_clients.py):
# boto3's import, and s3transfer's under it.
BOTO3 = ("boto3", "s3transfer")
# What only a path that builds a runtime (or runs a reconcile pass) needs.
ENGINE = ("agent_runtime.engine", "agent_runtime.steps", "agent_runtime.config",
          "agent_runtime.reconcile", "agent_runtime.events", "asyncio", "yaml",
          "stores.memory")


def _loaded_by(module: str, names: tuple[str, ...]) -> list[str]:
    probe = (f"import json, sys; import {module}; "
             f"print(json.dumps([m for m in {list(names)!r} if m in sys.modules]))")
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, check=True,
                          capture_output=True, text=True, timeout=120)
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_the_step_module_loads_no_engine_until_advance_needs_one() -> None:
    assert _loaded_by("functions.step.app", ENGINE + STEP_MACHINERY) == []


def test_the_reconciler_loads_the_engine_only_to_resume_a_run() -> None:
    assert _loaded_by("functions.reconciler.app",
                      ("agent_runtime.engine", "agent_runtime.steps", "yaml", *STEP_MACHINERY)
                      ) == []


def test_the_api_loads_no_step_machinery_until_a_step_needs_it() -> None:
    assert _loaded_by("functions.api.app", ("agent_runtime.reconcile", *STEP_MACHINERY)) == []


def test_the_api_loads_the_engine_and_the_manifest_reader_only_for_a_route_that_needs_them(
        ) -> None:
    # Not among them: asyncio (Powertools' event_handler package loads it) and the
    # events module (a run's view names its trace, agent_runtime.telemetry).
    engine = tuple(name for name in ENGINE if name not in ("asyncio", "agent_runtime.events"))
    assert _loaded_by("functions.api.app", (*engine, "agent_runtime.manifest",
                                            "agent_runtime.manifest_input",
                                            "agent_runtime.checkpoint_check",
                                            "agent_runtime.execution")) == []


def test_the_retention_function_loads_no_engine() -> None:
    assert _loaded_by("functions.retention.app", ENGINE + STEP_MACHINERY) == []


def test_no_handler_imports_boto3_for_clients_botocore_makes() -> None:
    for handler in ("functions.step.app", "functions.reconciler.app", "functions.api.app",
                    "functions.retention.app", "functions.code_runner.app"):
        assert _loaded_by(handler, BOTO3) == [], handler


def test_the_functions_ship_their_bytecode(tmp_path: Path) -> None:
    """Lambda's file system is read-only: without bytecode in the package every cold
    start compiles the handler's modules. functions/Makefile compiles them with the
    python3.13 it finds (here: this interpreter), with unchecked-hash pycs, which no
    file time (a zip's) can make stale."""
    copy, artifacts = tmp_path / "copy", tmp_path / "artifacts"
    shutil.copytree(REPO / "functions", copy, ignore=shutil.ignore_patterns("__pycache__"))
    artifacts.mkdir()
    subprocess.run(["make", "-s", "-C", str(copy), "-f", str(REPO / "functions" / "Makefile"),
                    "build-ApiFunction", f"ARTIFACTS_DIR={artifacts}", f"PY313={sys.executable}"],
                   check=True, timeout=300)
    tag = sys.implementation.cache_tag
    for module in ("step/app", "api/app", "reconciler/executions", "telemetry"):
        folder, name = (artifacts / "functions" / module).parent, Path(module).name
        pyc = (folder / "__pycache__" / f"{name}.{tag}.pyc").read_bytes()
        assert int.from_bytes(pyc[4:8], "little") == 0b01, module  # hash-based, unchecked
