"""What `list`, `inspect` and `effects` show (docs/design.md section 9): runs newest first with
their times and tokens and a "more" line carrying the cursor; a run's timeline
with the step path and tokens of every checkpoint and one checkpoint's state;
every effect key with its tool and step."""

from __future__ import annotations

import json
import shlex
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_runtime.cli import main
from agent_runtime.run_ids import generate_run_id
from stores.records import RunRecord, RunStatus, utc_now
from stores.sqlite import SqliteRunStore

REPO = Path(__file__).resolve().parents[2]
CHAIN = REPO / "tests" / "fixtures" / "manifests" / "prompt-chain.agent.yaml"
ECHO = ["--model", "scripted/echo", "--events", "none"]

TOOLS = '''
from agent_runtime import tool


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: shipped"
'''

TOOL_MANIFEST = """schemaVersion: '1.0'
id: looker
steps:
  - {id: find, type: prompt, prompt: Find order A., tools: [lookup]}
"""

TOOL_SCRIPT = """responses:
  - toolCalls: [{name: lookup, arguments: {order: A}}]
  - {text: found it}
"""


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_RUNTIME_STORE", raising=False)
    return tmp_path


def test_list_over_150_runs_is_newest_first_and_pages_with_the_cursor_it_prints(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = utc_now()
    created = []
    with SqliteRunStore(cwd / ".agent-runtime" / "runs.sqlite") as store:
        for index in range(150):
            at = start + timedelta(seconds=index)
            run = RunRecord(run_id=generate_run_id(), manifest_hash="sha256:0",
                            manifest={"id": "agent"}, status=RunStatus.CREATED,
                            consumed_tokens=index, created_at=at, updated_at=at)
            store.create_run(run)
            created.append(run.run_id)
    seen: list[str] = []
    argv = ["list"]
    while True:
        assert main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split()[:5] == ["run", "created", "status", "tokens", "duration"]
        rows = [line for line in lines[1:] if line.startswith("run_")]
        seen.extend(row.split()[0] for row in rows)
        more = [line for line in lines if line.startswith("more runs: ")]
        if not more:
            assert len(rows) == 150 - 100
            break
        assert len(rows) == 50
        argv = more[0].removeprefix("more runs: agent-runtime ").split()
    assert seen == created[::-1]  # newest first, every run once
    # Times and tokens of the newest run are on its row.
    assert main(["list", "--limit", "1"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0] == created[-1] and row[3] == "149"
    assert row[1] == (start + timedelta(seconds=149)).isoformat(timespec="seconds")[:19]


def test_list_searches_by_agent_id_prefix_and_time_and_its_more_line_keeps_the_search(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    with SqliteRunStore(cwd / ".agent-runtime" / "runs.sqlite") as store:
        for index in range(12):
            at = start + timedelta(minutes=index)
            store.create_run(RunRecord(
                run_id=f"run_{index:02d}", manifest_hash="sha256:0",
                manifest={"name": "the writer"} if index % 2 else {"id": "reviewer"},
                created_at=at, updated_at=at))

    def listed(*argv: str) -> tuple[list[str], list[str]]:
        assert main(["list", "--format", "pretty", *argv]) == 0
        lines = capsys.readouterr().out.splitlines()
        return ([line.split()[0] for line in lines if line.startswith("run_")],
                [line.removeprefix("more runs: agent-runtime ") for line in lines
                 if line.startswith("more runs: ")])

    rows, more = listed("--agent", "the writer", "--since", "2026-12-03T09:03:00Z",
                        "--until", "2026-12-03T10:09:00+01:00", "--limit", "2")
    assert rows == ["run_07", "run_05"]
    assert more and "--agent 'the writer'" in more[0]
    rows, more = listed(*shlex.split(more[0])[1:])
    assert (rows, more) == (["run_03"], [])
    assert listed("--id-prefix", "run_1")[0] == ["run_11", "run_10"]
    assert listed("--agent", "reviewer", "--id-prefix", "run_1")[0] == ["run_10"]
    assert main(["list", "--since", "2026-12-03T09:00:00"]) == 2  # no zone: a usage error
    assert "with its zone" in capsys.readouterr().err


def test_inspect_shows_the_timeline_and_one_checkpoint_state(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(CHAIN, cwd / "chain.agent.yaml")
    assert main(["run", "chain.agent.yaml", *ECHO, "--run-id", "chain"]) == 0
    capsys.readouterr()
    assert main(["inspect", "chain", "--checkpoints", "--format", "json"]) == 0
    timeline = json.loads(capsys.readouterr().out)["checkpoints"]
    assert [entry["step_path"] for entry in timeline[:3]] == ["draft", "review", "revise"]
    assert {entry["kind"] for entry in timeline} == {"prompt"}
    tokens = [entry["tokens"] for entry in timeline]
    assert tokens == sorted(tokens) and tokens[0] > 0
    assert main(["inspect", "chain", "--checkpoints"]) == 0
    pretty = capsys.readouterr().out
    assert "timeline (" in pretty and f"{tokens[0]:>7}  prompt    draft" in pretty
    assert main(["inspect", "chain", "--seq", "1", "--state", "--format", "json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["seq"] == 1 and state["step_path"] == "draft"
    assert set(state["variables"]) >= {"topic", "articleDraft"}
    assert [entry["step_path"] for entry in state["step_results"]] == ["draft"]
    assert main(["inspect", "chain", "--state"]) == 2
    assert "--state: --state shows one checkpoint: give --seq N" in capsys.readouterr().err


def test_effects_name_the_tool_and_the_step_of_every_key(
        cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cwd / "tools.py").write_text(TOOLS)
    (cwd / "looker.agent.yaml").write_text(TOOL_MANIFEST)
    (cwd / "looker.script.yaml").write_text(TOOL_SCRIPT)
    assert main(["run", "looker.agent.yaml", "--model", "scripted/looker.script.yaml",
                 "--tools", "tools.py", "--events", "none", "--run-id", "look"]) == 0
    capsys.readouterr()
    assert main(["effects", "look", "--format", "json"]) == 0
    (effect,) = json.loads(capsys.readouterr().out)
    assert (effect["tool"], effect["step_path"], effect["status"]) == (
        "lookup", "find", "completed")
    assert main(["effects", "look"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["key", "tool", "step", "status"]
    assert row.split()[1:4] == ["lookup", "find", "completed"]
