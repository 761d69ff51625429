"""Processes that host runs freeze their startup heap before the first run; a
caller's process is left alone (agent_runtime/startup_heap.py)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.api.collector_pace import YOUNG_COLLECTION_EVERY
from agent_runtime.cli.main import main
from tests.api.serve_process import start_serve

REPO = Path(__file__).resolve().parents[2]

# A tool that writes down how many objects the collector had frozen when the run called it.
TOOLS = '''
import gc
from pathlib import Path
from agent_runtime import tool

@tool
def frozen() -> int:
    """Objects in the collector's permanent generation."""
    count = gc.get_freeze_count()
    (Path(__file__).parent / "frozen.txt").write_text(str(count))
    return count
'''

MANIFEST = """schemaVersion: '1.0'
id: heap
model: {provider: openai, model: gpt-5.6}
steps:
  - {id: ask, type: prompt, prompt: Count., tools: [frozen], outputVariable: answer,
     includeInFinalOutput: true}
"""

SCRIPT = """responses:
  - toolCalls: [{name: frozen, arguments: {}}]
  - text: counted
"""


def _environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def test_a_cli_run_freezes_what_the_process_imported_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "heap.agent.yaml").write_text(MANIFEST)
    (tmp_path / "heap.script.yaml").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "agent_runtime.cli", "run", "heap.agent.yaml", "--model",
         "scripted/heap.script.yaml", "--tools", "tools.py", "--store", "runs.sqlite",
         "--format", "json"],
        cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=300,
        check=False)
    assert done.returncode == 0, done.stderr
    # The engine, the stores and the tools file were imported before the run:
    # tens of thousands of objects at least.
    assert int((tmp_path / "frozen.txt").read_text()) > 10_000


@pytest.mark.parametrize("module", ["functions.step.app", "functions.api.app",
                                    "functions.reconciler.app", "functions.retention.app"])
def test_a_lambda_handler_freezes_its_imports(module: str) -> None:
    environment = {**_environment(), "AWS_DEFAULT_REGION": "us-east-1",
                   "AGENT_RUNTIME_STORE": "runs?bucket=blobs&kms_key=alias/test",
                   "POWERTOOLS_SERVICE_NAME": "test", "POWERTOOLS_METRICS_NAMESPACE": "Test"}
    done = subprocess.run(
        [sys.executable, "-c", f"import gc, {module}; print(gc.get_freeze_count())"],
        env=environment, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) > 10_000


def test_the_cli_called_in_process_leaves_its_callers_heap_alone(tmp_path: Path) -> None:
    (tmp_path / "heap.agent.yaml").write_text(MANIFEST.replace(
        ", tools: [frozen]", ""))
    (tmp_path / "heap.script.yaml").write_text("responses:\n  - text: counted\n")
    before = gc.get_freeze_count()
    code = main(["run", str(tmp_path / "heap.agent.yaml"), "--model",
                 f"scripted/{tmp_path / 'heap.script.yaml'}",
                 "--store", str(tmp_path / "runs.sqlite"), "--format", "json"])
    assert code == 0
    assert gc.get_freeze_count() == before


def _collector_as_serve_exits(tmp_path: Path) -> dict[str, Any]:
    """How many objects serve's collector held frozen, and its thresholds, as it exited."""
    # Python imports a `sitecustomize` from the path at start-up: this one writes
    # both down from an exit hook.
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sitecustomize.py").write_text(
        "import atexit, gc, json, pathlib\n"
        "atexit.register(lambda: pathlib.Path('collector.json').write_text(json.dumps("
        "{'frozen': gc.get_freeze_count(), 'thresholds': gc.get_threshold()})))\n")
    serve = start_serve(tmp_path, pythonpath=[plugin])
    assert serve.stop() == 0, serve.output()
    found: dict[str, Any] = json.loads((tmp_path / "collector.json").read_text())
    return found


def test_serve_freezes_what_it_imported_before_it_serves(tmp_path: Path) -> None:
    assert _collector_as_serve_exits(tmp_path)["frozen"] > 10_000


def test_serve_collects_its_young_generation_less_often(tmp_path: Path) -> None:
    young, middle, old = _collector_as_serve_exits(tmp_path)["thresholds"]
    assert young == YOUNG_COLLECTION_EVERY > gc.get_threshold()[0]
    assert (middle, old) == gc.get_threshold()[1:]
