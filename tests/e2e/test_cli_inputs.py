"""The CLI's inputs from the reference implementation's habits (issue 13):
`--variables FILE` with a `[{key, value}]` list, `events --tail N` as a count
(following is `--follow`), a damaged event log named by file and line, and
`config validate`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent_runtime.cli import main

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "tests" / "fixtures" / "manifests" / "hello.agent.yaml"
ECHO = ["--model", "scripted/echo", "--format", "json"]


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    shutil.copy(HELLO, tmp_path / "hello.agent.yaml")
    return tmp_path


@pytest.mark.parametrize("flag", ["vars.yaml", "@vars.yaml"])
def test_variables_file_as_a_key_value_list(cwd: Path, capsys: pytest.CaptureFixture[str],
                                            flag: str) -> None:
    (cwd / "vars.yaml").write_text("- {key: topic, value: fencing tokens}\n")
    assert main(["run", "hello.agent.yaml", *ECHO, "--variables", flag]) == 0
    assert "fencing tokens" in json.loads(capsys.readouterr().out)["output"]


def test_inline_key_value_list_and_its_refusals(cwd: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    pairs = '[{"key": "topic", "value": "leases"}]'
    assert main(["run", "hello.agent.yaml", *ECHO, "--variables", pairs]) == 0
    assert "leases" in json.loads(capsys.readouterr().out)["output"]
    twice = '[{"key": "topic", "value": "a"}, {"key": "topic", "value": "b"}]'
    assert main(["run", "hello.agent.yaml", "--model", "scripted/echo", "--variables",
                 twice]) == 2
    assert "variables[1].key" in capsys.readouterr().err
    assert main(["run", "hello.agent.yaml", "--model", "scripted/echo", "--variables",
                 '[{"key": "topic"}]']) == 2
    assert "exactly `key` and `value`" in capsys.readouterr().err


def test_events_tail_is_a_count(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hello.agent.yaml", *ECHO]) == 0
    capsys.readouterr()
    assert main(["events", "--format", "ndjson"]) == 0
    every = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["events", "--tail", "2", "--format", "ndjson"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == every[-2:]
    assert main(["events", "--tail", "3", "--type", "step.*", "--format", "ndjson"]) == 0
    tail = [json.loads(line)["type"] for line in capsys.readouterr().out.splitlines()]
    assert tail and len(tail) <= 3 and all(kind.startswith("step.") for kind in tail)


def test_a_damaged_event_log_is_named_by_file_and_line(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = cwd / "events.jsonl"
    log.write_text('{"not": "an event"}\n')
    assert main(["events", "events.jsonl"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: events.jsonl: line 1: not an event")


def test_config_validate(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cwd / "agent-runtime.config.yaml").write_text(
        "version: '1.0'\nstore: 'sqlite:./runs.sqlite'\n")
    assert main(["config", "validate"]) == 0
    assert "store sqlite:./runs.sqlite" in capsys.readouterr().out
    (cwd / "bad.yaml").write_text("version: '1.0'\nstore: 'postgres:db'\n")
    assert main(["config", "validate", "bad.yaml", "--format", "json"]) == 2
    error = json.loads(capsys.readouterr().err)["error"]
    assert "bad.yaml" in error["message"] and "DRIVER:LOCATION" in error["message"]


def test_config_validate_checks_the_host_policy_and_its_hooks(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cwd / "policy.yaml").write_text("version: '1.0'\npolicy: {scripted: none, maxSteps: 9}\n")
    assert main(["config", "validate", "policy.yaml", "--format", "json"]) == 0
    policy = json.loads(capsys.readouterr().out)["policy"]
    assert (policy["scripted"], policy["maxSteps"], policy["maxLoopIterations"]) == (
        "none", 9, 1000)  # what is not said takes the safe default
    for text, field in [("{maxLoop: 3}", "policy.maxLoop"),
                        ("{authorizeTool: 'no_such_module_here:f'}", "policy.authorizeTool")]:
        (cwd / "bad.yaml").write_text(f"version: '1.0'\npolicy: {text}\n")
        assert main(["config", "validate", "bad.yaml", "--format", "json"]) == 2
        assert json.loads(capsys.readouterr().err)["error"]["field"] == field


def test_examples_list_show_and_run(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["examples", "list"]) == 0
    assert "\ntriage " in capsys.readouterr().out
    assert main(["examples", "show", "triage"]) == 0
    assert "id: support-triage" in capsys.readouterr().out
    assert main(["examples", "run", "triage", "--format", "json", "--events", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert main(["examples", "run", "nope"]) == 3
    assert 'NAME: no example "nope"; there are: approval, collection-loop, conditions' \
        in capsys.readouterr().err


def test_the_packaged_examples_are_the_repositorys_own() -> None:
    # `agent-runtime examples` reads the copies inside the package (so an
    # installed wheel has them); the README and `make run` use examples/.
    repo = Path(__file__).resolve().parents[2]
    packaged = repo / "agent_runtime" / "examples"
    sources = {path.name for path in (repo / "examples").iterdir() if path.is_file()}
    assert {path.name for path in packaged.iterdir() if path.is_file()} == sources
    for name in sources:
        assert (packaged / name).read_bytes() == (repo / "examples" / name).read_bytes(), \
            f"agent_runtime/examples/{name} differs from examples/{name}: copy it again"


def test_next_step_hints_carry_the_store_flags(cwd: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    approval = REPO / "tests" / "fixtures" / "manifests" / "approval.agent.yaml"
    assert main(["run", str(approval), "--model", "scripted/echo", "--events", "none",
                 "--run-id", "ask", "--store", "my runs.sqlite"]) == 10
    out = capsys.readouterr().out
    assert "agent-runtime approve ask --resume --store-driver sqlite --store 'my runs.sqlite'" \
        in out
    assert main(["cancel", "ask", "--store", "my runs.sqlite", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "cancelled"
