"""Users' Python tools on Lambda: the tools/ package that sam build ships beside the
functions, named in the runtime config as `module:function` (docs/design.md section 10)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from aws_stack import Deployment

from agent_runtime import RunStatus
from functions.executions import execution_name

REPO = Path(__file__).resolve().parents[2]
MANIFEST = {"schemaVersion": "1.0", "id": "counting",
            "steps": [{"id": "count", "type": "prompt", "prompt": "Count the words.",
                       "tools": ["word_count"]}]}
SCRIPT = {"byStep": {"count": [
    {"toolCalls": [{"name": "word_count", "arguments": {"text": "one two three"}}]},
    {"text": "Three words."}]}}


def test_the_functions_build_ships_the_tools_package(tmp_path: Path) -> None:
    """functions/Makefile (what sam build runs, in a copy of functions/) copies tools/."""
    copy, artifacts = tmp_path / "copy", tmp_path / "artifacts"
    shutil.copytree(REPO / "functions", copy, ignore=shutil.ignore_patterns("__pycache__"))
    artifacts.mkdir()
    subprocess.run(["make", "-s", "-C", str(copy), "-f", str(REPO / "functions" / "Makefile"),
                    "build-AdvanceFunction", f"ARTIFACTS_DIR={artifacts}"], check=True)
    assert (artifacts / "tools" / "example.py").is_file()
    assert (artifacts / "functions" / "step" / "app.py").is_file()
    # Importable from the function's root, as Lambda puts it on sys.path.
    probe = subprocess.run(
        [sys.executable, "-c", "import tools.example as m; print(m.word_count.name)"],
        cwd=artifacts, capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "word_count"


def test_a_run_on_lambda_calls_a_tool_the_runtime_config_names(
        deployment: Deployment, tmp_path: Path) -> None:
    config = tmp_path / "runtime.config.yaml"
    config.write_text(yaml.safe_dump(
        {"version": "1.0", "tools": {"word_count": "tools.example:word_count"},
         "policy": {"scriptFiles": [str(tmp_path / "count.script.yaml")]}}))
    script = tmp_path / "count.script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    deployment.configure(config)
    run_id = deployment.services.runtime().create_run(
        manifest=MANIFEST, options={"model": f"scripted/{script}"}).run_id
    deployment.stack.put_resume_request(run_id, attempt=0, reason="run-created")
    deployment.stack.deliver_resume_requests()
    assert deployment.stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    [effect] = deployment.services.store.list_effects(run_id)
    assert effect.result == {"output": {"words": 3, "characters": 13}}
