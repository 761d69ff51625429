"""Interrupts and output of a real `agent-runtime` process on a real SQLite store
(docs/design.md section 6): a closed pipe never touches the run, the first SIGINT or
SIGTERM lets the tool call in flight finish and suspends the run as
`interrupted` so `resume` continues at once, a second signal exits at once,
and after a SIGKILL `reconcile --once` takes the run over without waiting
for its lease."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import cli_process
import pytest

LEASE = "600"  # far longer than any test: nothing here may wait for a lease

SHIP_TOOL = '''
import os
import time

from agent_runtime import tool


@tool(idempotent=False)
def ship(order: str) -> str:
    """Ship an order: not safe to repeat."""
    log = os.environ["SHIP_LOG"]
    with open(log, "a") as out:
        out.write(f"start {order}\\n")
    time.sleep(float(os.environ["SHIP_SECONDS"]))
    with open(log, "a") as out:
        out.write(f"done {order}\\n")
    return f"shipped {order}"
'''

SHIP_MANIFEST = """schemaVersion: '1.0'
id: shipper
model: {provider: openai, model: gpt-5.6}
steps:
  - {id: ship-it, type: prompt, prompt: Ship order A., tools: [ship], outputVariable: shipped}
  - {id: report, type: prompt, prompt: "Report {{ shipped }}", includeInFinalOutput: true}
"""

SHIP_SCRIPT = """responses:
  - toolCalls: [{name: ship, arguments: {order: A}}]
  - {text: shipped}
  - {text: reported}
"""

@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for name, text in (("ship.agent.yaml", SHIP_MANIFEST), ("ship.script.yaml", SHIP_SCRIPT),
                       ("ship_tools.py", SHIP_TOOL)):
        (tmp_path / name).write_text(text)
    cli_process.write_four_steps(tmp_path)
    return tmp_path


def _env(workdir: Path, ship_seconds: float = 2.0) -> dict[str, str]:
    return cli_process.cli_env(workdir, SHIP_LOG=str(workdir / "ship.log"),
                               SHIP_SECONDS=str(ship_seconds))


def cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_process.run_cli(workdir, *args, env=_env(workdir))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _status(workdir: Path, run_id: str) -> dict[str, Any]:
    shown = cli(workdir, "inspect", run_id, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    body: dict[str, Any] = json.loads(shown.stdout)
    return body


def _start_ship(workdir: Path, *flags: str, ship_seconds: float = 2.0
                ) -> subprocess.Popen[str]:
    child = cli_process.spawn_cli(
        workdir, "run", "ship.agent.yaml", "--model", "scripted/ship.script.yaml",
        "--tools", "ship_tools.py", "--run-id", "ship-1", "--lease-seconds", LEASE, *flags,
        env=_env(workdir, ship_seconds), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    cli_process.wait_for(lambda: "start A" in _lines(workdir / "ship.log"), "the tool started",
                         child=child)
    return child


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_lets_the_call_finish_saves_it_and_resume_continues_at_once(
        workdir: Path, sig: signal.Signals) -> None:
    child = _start_ship(workdir)
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "Traceback" not in err + out
    assert "continue: agent-runtime resume ship-1" in out
    # The call in flight finished within the grace, and its result was saved.
    assert _lines(workdir / "ship.log") == ["start A", "done A"]
    record = _status(workdir, "ship-1")
    assert record["status"] == "suspended" and record["suspension"]["reason"] == "interrupted"
    assert record["lease_owner"] is None  # released: no takeover, no wait

    done = cli(workdir, "resume", "ship-1", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert _lines(workdir / "ship.log") == ["start A", "done A"]  # the tool ran once


@pytest.mark.slow
def test_a_second_signal_exits_at_once_and_the_run_is_recovered_as_after_a_crash(
        workdir: Path) -> None:
    child = _start_ship(workdir, ship_seconds=30)
    child.send_signal(signal.SIGINT)
    time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=20)  # not the 30 s the tool would take
    assert child.returncode == 130
    assert "again: exiting now" in err and "Traceback" not in err + out
    assert _lines(workdir / "ship.log") == ["start A"]
    # Its owner is gone: taken over at once; the tool is not safe to repeat and
    # its outcome is unknown, so an operator decides (docs/design.md section 6).
    taken = cli(workdir, "resume", "ship-1", "--allow-running-takeover", "--format", "json")
    assert taken.returncode == 10, taken.stderr
    assert json.loads(taken.stdout)["suspension"]["reason"] == "effect-unknown"
    assert _lines(workdir / "ship.log") == ["start A"]


@pytest.mark.slow
def test_a_call_longer_than_the_grace_ends_the_process_after_the_grace(workdir: Path) -> None:
    child = _start_ship(workdir, "--grace-seconds", "0.5", ship_seconds=30)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 130
    assert "still busy after 0.5s" in err and "resume ship-1" in err
    assert "Traceback" not in err + out


@pytest.mark.slow
def test_a_closed_pipe_never_touches_the_run(workdir: Path) -> None:
    child = cli_process.spawn_cli(
        workdir, *cli_process.RUN_FOUR_STEPS, "--run-id", "piped", "--stream", "--format",
        "ndjson", env=_env(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stderr is not None
    assert json.loads(child.stdout.readline())["run_id"] == "piped"  # `| head -1`
    child.stdout.close()
    child.stderr.close()
    assert child.wait(timeout=60) == 0
    record = _status(workdir, "piped")
    assert record["status"] == "completed" and record["output"] == "four"

    # `events | head -1` on the log the run wrote: one line, no traceback.
    reader = cli_process.spawn_cli(workdir, "events", env=_env(workdir), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    assert reader.stdout is not None
    assert "run.started" in reader.stdout.readline()
    reader.stdout.close()
    _, err = reader.communicate(timeout=60)
    assert reader.returncode == 0 and err == ""


@pytest.mark.slow
def test_reconcile_right_after_a_sigkill_takes_the_run_over_without_a_lease_wait(
        workdir: Path) -> None:
    child = cli_process.spawn_cli(
        workdir, *cli_process.RUN_FOUR_STEPS, "--run-id", "killed", "--lease-seconds", LEASE,
        env=_env(workdir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli_process.wait_for_requests(workdir, 2, child)
    child.send_signal(signal.SIGKILL)
    child.wait()
    done = cli(workdir, "reconcile", "--once", "--format", "json")
    assert done.returncode == 0, done.stderr
    (outcome,) = json.loads(done.stdout)["runs"]
    assert (outcome["run_id"], outcome["action"], outcome["status"]) == (
        "killed", "resumed", "completed")
    assert _status(workdir, "killed")["output"] == "four"
    steps = [request["step_id"] for request in cli_process.model_requests(workdir)]
    assert steps == ["first", "second", "second", "third", "fourth"]
