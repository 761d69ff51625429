"""Parallel waves from the command line: `validate --plan` shows the waves of a run
manifest, `run` keeps the setting with the run, and the event log shows a
wave's members side by side, each with its start and end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_runtime.cli import main

AGENT = """schemaVersion: '1.0'
id: fan
model: {provider: scripted, model: script.yaml}
steps:
  - {id: facts, type: prompt, prompt: Facts, outputVariable: facts}
  - {id: audience, type: prompt, prompt: Audience, outputVariable: audience}
  - {id: style, type: prompt, prompt: Style, outputVariable: style}
  - {id: final, type: prompt, prompt: "Use {{ facts }}, {{ audience }}, {{ style }}",
     includeInFinalOutput: true}
"""
RUN = """schemaVersion: '1.0'
agent: {ref: agent.yaml}
execution: {mode: parallel, maxConcurrency: 3}
"""
SCRIPT = """byStep:
  facts: [{text: some facts, delayMs: 30}]
  audience: [{text: engineers, delayMs: 10}]
  style: [{text: terse, delayMs: 20}]
  final: [{text: done}]
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "agent.yaml").write_text(AGENT, encoding="utf-8")
    (tmp_path / "run.yaml").write_text(RUN, encoding="utf-8")
    (tmp_path / "script.yaml").write_text(SCRIPT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_validate_plan_shows_the_waves(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "run.yaml", "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["plan: parallel, maxConcurrency 3 (host cap 8), 2 waves",
                       "  wave 1: facts, audience, style", "  wave 2: final"]
    (workdir / "config.yaml").write_text("version: '1.0'\nexecution: {maxConcurrency: 2}\n",
                                         encoding="utf-8")
    assert main(["validate", "run.yaml", "--plan", "--config", "config.yaml",
                 "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan == {"mode": "parallel", "max_concurrency": 3, "host_max_concurrency": 2,
                    "waves": [["facts", "audience"], ["style"], ["final"]]}
    assert main(["validate", "agent.yaml", "--plan"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "plan: sequential, 4 waves"


def test_the_events_show_a_waves_members_side_by_side(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "run.yaml", "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "completed" and result["output"] == "done"
    assert main(["inspect", result["run_id"], "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["options"]["execution"] == {"mode": "parallel", "maxConcurrency": 3}

    assert main(["events", ".agent-runtime/events.jsonl", "--type", "step.*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    kinds = [(line.split()[3], line.split()[4]) for line in lines]
    # the three members all start before any ends; each line has its time
    assert kinds[:3] == [("step.started", "facts"), ("step.started", "audience"),
                         ("step.started", "style")]
    assert {path for kind, path in kinds[3:6]} == {"facts", "audience", "style"}
    assert all(kind == "step.completed" for kind, _ in kinds[3:6])
    assert kinds[6:] == [("step.started", "final"), ("step.completed", "final")]
    assert main(["events", ".agent-runtime/events.jsonl", "--type", "wave.*",
                 "--format", "ndjson"]) == 0
    waves = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [event["type"] for event in waves] == ["wave.started", "wave.completed"]
    assert waves[0]["data"]["steps"] == ["facts", "audience", "style"]
