"""The `agent-runtime` command on the default SQLite store: fixtures, exit codes,
bad input, approvals and manifest changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_runtime.cli import main
from agent_runtime.cli.reports import camel_fields

REPO = Path(__file__).resolve().parents[2]
# The reference implementation's manifests, kept in the repo so a clean clone
# tests them; test_fixture_copies_match_shared keeps the copy honest.
FIXTURES = REPO / "tests" / "fixtures" / "manifests"
SHARED = REPO.parent / "shared" / "fixtures" / "manifests"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command in a child process, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "agent_runtime.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def run_json(*args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    done = cli(*args, "--format", "json", cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES, tmp_path / "manifests")
    return tmp_path


@pytest.fixture
def inside_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in tmp_path, so anything a command leaves behind stays there."""
    monkeypatch.chdir(tmp_path)


def test_fixture_copies_match_shared() -> None:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is not beside this checkout")
    shared = {p.name: p.read_bytes() for p in SHARED.iterdir()}
    assert {p.name: p.read_bytes() for p in FIXTURES.iterdir()} == shared


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.yaml")
                                        if not p.name.endswith(".config.yaml")))
def test_every_fixture_validates(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(FIXTURES / name)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "extra"), [
    ("hello.agent.yaml", []),
    ("prompt-chain.agent.yaml", []),
    ("collection-loop.agent.yaml", []),
    ("release-brief.agent.yaml", ["--variables", '{"audience": "partners"}']),
    ("release-brief.run.yaml", []),
])
def test_fixtures_run_to_completion_with_the_echo_model(workdir: Path, name: str,
                                                        extra: list[str]) -> None:
    code, result = run_json("run", f"manifests/{name}", "--model", "scripted/echo", *extra,
                            cwd=workdir)
    assert code == 0
    assert result["status"] == "completed"
    assert result["output"]
    assert (workdir / ".agent-runtime" / "runs.sqlite").is_file()  # the default store
    assert (workdir / ".agent-runtime" / "events.jsonl").is_file()


@pytest.mark.slow
def test_approval_fixture_suspends_then_approve_and_resume_complete(workdir: Path) -> None:
    code, result = run_json("run", "manifests/approval.agent.yaml", "--model", "scripted/echo",
                            cwd=workdir)
    assert (code, result["status"]) == (10, "suspended")
    run_id = result["run_id"]
    assert result["suspension"]["reason"] == "approval"
    approved = cli("approve", run_id, cwd=workdir)
    assert approved.returncode == 0, approved.stderr
    code, result = run_json("resume", run_id, cwd=workdir)  # reuses --model from the run
    assert (code, result["status"]) == (0, "completed")
    assert result["output"].startswith("[echo] Return the approved proposal")
    inspect = cli("inspect", run_id, "--checkpoints", cwd=workdir)
    assert "completed" in inspect.stdout and "checkpoints" in inspect.stdout
    listing = cli("list", "--status", "completed", cwd=workdir)
    assert run_id in listing.stdout


@pytest.mark.slow
def test_changed_manifest_is_refused_on_resume(workdir: Path) -> None:
    code, result = run_json("run", "manifests/approval.agent.yaml", "--model", "scripted/echo",
                            cwd=workdir)
    assert code == 10
    path = workdir / "manifests" / "approval.agent.yaml"
    path.write_text(path.read_text().replace("Approve the proposed response?", "Approve?"))
    before = cli("inspect", result["run_id"], "--format", "json", cwd=workdir).stdout
    assert cli("approve", result["run_id"], cwd=workdir).returncode == 0
    refused = cli("resume", result["run_id"], cwd=workdir)
    assert refused.returncode == 2
    assert "approval.agent.yaml" in refused.stderr and "manifest changed" in refused.stderr
    assert "Traceback" not in refused.stderr
    after = json.loads(cli("inspect", result["run_id"], "--format", "json", cwd=workdir).stdout)
    assert after["status"] == "suspended"
    assert after["attempt"] == json.loads(before)["attempt"]


def test_json_and_ndjson_formats(workdir: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)  # restored after the test
    assert main(["run", "manifests/hello.agent.yaml", "--model", "scripted/echo",
                 "--format", "ndjson"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["type"] == "run.started"
    assert set(lines[-1]) >= {"run_id", "status", "attempt", "output", "suspension", "usage"}
    assert main(["events", ".agent-runtime/events.jsonl", "--run", lines[-1]["run_id"],
                 "--type", "step.*", "--format", "ndjson"]) == 0
    types = [json.loads(line)["type"] for line in capsys.readouterr().out.splitlines()]
    assert types == ["step.started", "step.completed"]


def test_ndjson_in_the_reference_shape(workdir: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`--ndjson-shape reference`: the reference CLI's `{type, event}` lines and a last
    `{type: result, result}`, camelCased."""
    monkeypatch.chdir(workdir)
    assert main(["run", "manifests/hello.agent.yaml", "--model", "scripted/echo",
                 "--format", "ndjson", "--ndjson-shape", "reference"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["type"] for line in lines[:-1]} == {"event"}
    first = lines[0]["event"]
    assert first["type"] == "run.started" and {"runId", "sequence", "timestamp"} <= set(first)
    assert any(line["event"].get("stepPath") == "explain" for line in lines[:-1])
    result = lines[-1]
    assert result["type"] == "result"
    assert result["result"]["status"] == "completed"
    assert result["result"]["usage"]["consumedTokens"] > 0
    assert main(["events", ".agent-runtime/events.jsonl", "--run", result["result"]["runId"],
                 "--type", "step.*", "--format", "ndjson", "--ndjson-shape", "reference"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["type"], line["event"]["type"]) for line in shown] == [
        ("event", "step.started"), ("event", "step.completed")]


def test_the_reference_shape_leaves_a_runs_own_data_as_written() -> None:
    body = {"run_id": "r", "output": {"snake_case": [{"inner_key": 1}]},
            "suspension": {"details": {"approval_id": "a"}}, "variables": {"my_value": 2}}
    assert camel_fields(body) == {"runId": "r", "output": {"snake_case": [{"inner_key": 1}]},
                                  "suspension": {"details": {"approvalId": "a"}},
                                  "variables": {"my_value": 2}}


BAD_AGENT = """schemaVersion: '1.0'
steps:
  - id: a
    type: prompt
    prompt: hi
"""


@pytest.mark.parametrize(("content", "field", "reason"), [
    ("schemaVersion: '1.0'\nsteps: [\n", None, "line"),
    (BAD_AGENT + "    colour: red\n", "steps[0].colour", "unknown field"),
    (BAD_AGENT + "    includeInFinalOutput: maybe\n", "steps[0].includeInFinalOutput", "bool"),
    (BAD_AGENT + "  - id: a\n    type: prompt\n    prompt: again\n", "steps[1].id", "uplicate"),
    (BAD_AGENT + "    outputVariable: a.b\n", "steps[0].outputVariable", "dot"),
    (BAD_AGENT + "    messages: [{role: user, content: [{type: text, text: x}]}]\n",
     "steps[0]", "either prompt or messages, not both"),
    ("schemaVersion: '1.0'\nvariables: [{key: __proto__, type: string}]\nsteps: []\n",
     "variables[0].key", "reserved name"),
    ("schemaVersion: '2.0'\nsteps: []\n", "schemaVersion", "1.0"),
    (BAD_AGENT + "    when: a ==\n", "steps[0].when", "unparsable condition"),
])
def test_bad_manifests_exit_2_naming_file_field_and_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, field: str | None,
        reason: str) -> None:
    path = tmp_path / "bad.agent.yaml"
    path.write_text(content)
    store = tmp_path / "runs.sqlite"
    for command in (["validate", str(path)],
                    ["run", str(path), "--model", "scripted/echo", "--store", str(store),
                     "--events", "none"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err
        assert str(path) in err
        if field:
            assert f": {field}:" in err
        assert reason in err
    assert not store.exists()  # nothing was created
    assert not (tmp_path / ".agent-runtime").exists()  # no artifacts or events either


@pytest.mark.parametrize(("variables", "field", "reason"), [
    (None, "variables.audience", "requires"),  # requiresOverride not supplied
    ('{"audience": "x", "colour": 1}', "variables.colour", "unknown"),
    ('{"audience": 5}', "variables.audience", "string"),
])
@pytest.mark.usefixtures("inside_tmp_path")
def test_bad_variables_exit_2_and_create_no_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], variables: str | None, field: str,
        reason: str) -> None:
    store = tmp_path / "runs.sqlite"
    command = ["run", str(FIXTURES / "release-brief.agent.yaml"), "--model", "scripted/echo",
               "--store", str(store), "--events", "none"]
    if variables:
        command += ["--variables", variables]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"{field}:" in err and reason in err.lower()
    assert not store.exists()  # nothing was created


def test_subprocess_errors_show_no_traceback(tmp_path: Path) -> None:
    done = cli("run", "missing.agent.yaml", cwd=tmp_path)
    assert done.returncode == 3  # not found
    assert "missing.agent.yaml" in done.stderr and "Traceback" not in done.stderr
    done = cli("resume", "run_nope", cwd=tmp_path)
    assert done.returncode == 3 and "no sqlite store" in done.stderr  # and none is created
    assert not (tmp_path / ".agent-runtime").exists()
