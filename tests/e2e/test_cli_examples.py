"""`agent-runtime examples` through the real command: every example manifest the
package ships is listed with a line on what it shows, and the reference's
standalone example names run offline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cli_process
import pytest

PACKAGE = cli_process.REPO / "agent_runtime"


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_process.cli_env(workdir)
    env.pop("AGENT_RUNTIME_STORE", None)
    done = cli_process.run_cli(workdir, *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _shipped() -> set[str]:
    return {path.name.removesuffix(".agent.yaml")
            for folder in (PACKAGE / "examples", PACKAGE / "console" / "examples")
            for path in folder.glob("*.agent.yaml")}


def test_list_names_every_packaged_manifest_with_a_description(tmp_path: Path) -> None:
    done = _cli(tmp_path, "examples", "list")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split(None, 1) for line in done.stdout.splitlines())
    assert set(rows) == _shipped()
    assert {"hello", "variables", "conditions", "loops", "triage"} <= set(rows)
    assert all(len(text.strip()) > 20 for text in rows.values()), rows
    assert list(rows) == sorted(rows)


@pytest.mark.parametrize(("name", "shows"), [
    ("variables", "systemPrompt: You write release headlines for {{ product }}."),
    ("conditions", "when: review.enabled && rating.score >= review.threshold"),
    ("loops", "condition: service.changed == true"),
    ("hello", "id: hello"),
])
def test_the_reference_example_names_show_and_run_offline(
        tmp_path: Path, name: str, shows: str) -> None:
    shown = _cli(tmp_path, "examples", "show", name)
    assert shown.returncode == 0 and shows in shown.stdout
    done = _cli(tmp_path, "examples", "run", name, "--events", "none", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"


def test_the_examples_do_what_they_say(tmp_path: Path) -> None:
    output = {}
    for name in ("variables", "conditions", "loops"):
        done = _cli(tmp_path, "examples", "run", name, "--events", "none", "--format", "json")
        output[name] = json.loads(done.stdout)["output"]
    # One step's output rendered into the next step's prompt.
    assert output["variables"].startswith("Month-end close in half the time: Acme Ledger")
    # The score passed the threshold: `publish` ran and `rework` was skipped.
    assert output["conditions"] == "Ready to publish (clarity 8 of 10)."
    # `search` did not change: its iteration was skipped, two notes remain.
    assert [note.split(":")[0] for note in output["loops"]] == ["billing", "exports"]
    steps = [request["step_id"] for request in cli_process.model_requests(tmp_path)]
    assert steps == ["headline", "summary", "score", "publish", "note", "note"]
