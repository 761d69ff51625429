"""Effects whose outcome is unknown after a kill, settled from the CLI; and fork."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

TOOLS = '''
import os, signal
from pathlib import Path
from agent_runtime import ToolContext, tool

HERE = Path(__file__).parent

@tool(idempotent={idempotent})
def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card."""
    with open(HERE / "calls.log", "a") as log:
        log.write(f"{{ctx.idempotency_key}} {{ctx.attempt}}\\n")
    marker = HERE / "killed-once"
    if not marker.exists():
        marker.write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)  # dies after begin_effect, before the checkpoint
    return f"charged {{amount}}"
'''

MANIFEST = """schemaVersion: '1.0'
id: pay
model: {provider: openai, model: gpt-5.6}
steps:
  - {id: pay, type: prompt, prompt: Pay., tools: [charge], includeInFinalOutput: true}
"""

SCRIPT = """responses:
  - toolCalls: [{name: charge, arguments: {amount: 5}}]
  - text: paid
"""


def cli(workdir: Path, *args: str) -> tuple[int, Any, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "agent_runtime.cli", *args], cwd=workdir,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    out = done.stdout.strip()
    try:
        parsed = json.loads(out) if out else None
    except ValueError:
        parsed = out
    return done.returncode, parsed, done.stderr


def setup(tmp_path: Path, idempotent: bool) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS.format(idempotent=idempotent))
    (tmp_path / "pay.agent.yaml").write_text(MANIFEST)
    (tmp_path / "pay.script.yaml").write_text(SCRIPT)
    return tmp_path


def start_and_kill(workdir: Path) -> None:
    code, _, _ = cli(workdir, "run", "pay.agent.yaml", "--model", "scripted/pay.script.yaml",
                     "--tools", "tools.py", "--run-id", "pay-1", "--lease-seconds", "1",
                     "--format", "json")
    assert code == -9  # SIGKILL inside the tool call


def calls(workdir: Path) -> list[str]:
    return (workdir / "calls.log").read_text().splitlines()


@pytest.mark.slow
def test_an_idempotent_call_is_dispatched_again_with_the_same_key(tmp_path: Path) -> None:
    workdir = setup(tmp_path, idempotent=True)
    start_and_kill(workdir)
    import time

    time.sleep(1.2)  # the dead owner's lease expires
    code, result, err = cli(workdir, "resume", "pay-1", "--allow-running-takeover",
                            "--format", "json")
    assert code == 0, err
    assert result["output"] == "paid"
    (key1, attempt1), (key2, attempt2) = (line.split() for line in calls(workdir))
    assert key1 == key2 and (attempt1, attempt2) == ("1", "2")


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "tool_runs", "seen_by_model"), [
    (["--retry"], 2, {"output": "charged 5"}),
    (["--result", '"charged 5 (confirmed by the bank)"'], 1,
     {"output": "charged 5 (confirmed by the bank)"}),
    (["--skip"], 1, {"error": {"type": "skipped",
                               "message": "an operator skipped this tool call"}}),
])
def test_a_non_idempotent_call_suspends_and_each_resolution_completes_the_run(
        tmp_path: Path, flags: list[str], tool_runs: int, seen_by_model: dict[str, Any]) -> None:
    workdir = setup(tmp_path, idempotent=False)
    start_and_kill(workdir)
    import time

    time.sleep(1.2)
    code, result, err = cli(workdir, "resume", "pay-1", "--allow-running-takeover",
                            "--format", "json")
    assert code == 10, err
    assert result["suspension"]["reason"] == "effect-unknown"
    key = result["suspension"]["details"]["key"]
    assert len(calls(workdir)) == 1  # not called again on its own

    code, listed, _ = cli(workdir, "effects", "pay-1", "--format", "json")
    assert code == 0
    assert [(e["key"], e["status"]) for e in listed] == [(key, "reserved")]

    code, result, err = cli(workdir, "effects", "resolve", "pay-1", key, *flags,
                            "--format", "json")
    assert code == 0, err
    assert result["status"] == "completed" and result["output"] == "paid"
    assert len(calls(workdir)) == tool_runs
    assert all(line.split()[0] == key for line in calls(workdir))  # one key throughout
    code, listed, _ = cli(workdir, "effects", "pay-1", "--format", "json")
    assert [(e["key"], e["status"]) for e in listed] == [(key, "completed")]
    assert listed[0]["result"] == seen_by_model


def test_resolve_refuses_a_run_not_waiting_on_that_effect(tmp_path: Path) -> None:
    (tmp_path / "hello.agent.yaml").write_text(
        "schemaVersion: '1.0'\nsteps: [{id: a, type: prompt, prompt: hi}]\n")
    code, result, _ = cli(tmp_path, "run", "hello.agent.yaml", "--model", "scripted/echo",
                          "--format", "json")
    assert code == 0
    code, _, err = cli(tmp_path, "effects", "resolve", result["run_id"], "nope", "--skip")
    # A conflict (exit 4): the run is in a state that cannot take this answer.
    assert code == 4 and "not waiting on effect 'nope'" in err


@pytest.mark.slow
def test_fork_runs_a_new_run_from_a_chosen_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "chain.agent.yaml").write_text("""schemaVersion: '1.0'
steps:
  - {id: a, type: prompt, prompt: one, outputVariable: x}
  - {id: b, type: prompt, prompt: "two {{ x }}"}
  - {id: c, type: prompt, prompt: three, includeInFinalOutput: true}
""")
    code, original, _ = cli(tmp_path, "run", "chain.agent.yaml", "--model", "scripted/echo",
                            "--format", "json")
    assert code == 0
    run_id = original["run_id"]
    code, before, _ = cli(tmp_path, "inspect", run_id, "--checkpoints", "--format", "json")
    code, forked, err = cli(tmp_path, "fork", run_id, "--seq", "1", "--run-id", "forked",
                            "--format", "json")
    assert code == 0, err
    assert forked["run_id"] == "forked" and forked["status"] == "completed"
    assert forked["output"] == original["output"]
    # it started from checkpoint 1: only b and c were asked again
    assert forked["usage"]["model_requests"] == 3
    code, record, _ = cli(tmp_path, "inspect", "forked", "--format", "json")
    assert record["options"]["forked_from"] == {"run_id": run_id, "seq": 1}
    code, after, _ = cli(tmp_path, "inspect", run_id, "--checkpoints", "--format", "json")
    assert after == before  # the original is unchanged
    code, _, err = cli(tmp_path, "fork", run_id, "--seq", "99")
    assert code == 2 and "has no checkpoint 99" in err
