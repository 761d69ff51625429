"""SIGKILL a CLI run while its code step runs in the bubblewrap sandbox, then take
it over (issue 38, acceptance 4): the sandbox dies with its owner, and the
documented effect semantics hold: the run suspends `effect-unknown` rather than
running the code again, unless the host marks the sandbox idempotent, when the
code runs again and the run completes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import cli_process
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent_runtime" / "sandbox"))
from sandbox_kit import bubblewrap_sandbox, processes_with

LEASE_SECONDS = 600  # far longer than the test: the takeover must not wait for it
EVENTS = Path(".agent-runtime/events.jsonl")


def _write(workdir: Path, token: str, *, idempotent: bool) -> None:
    # The code starts a marked process (so the test can see the sandbox's
    # processes), then takes a few seconds: long enough to be killed mid-way.
    code = (f"import subprocess, time\n"
            f"subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(3600)', "
            f"'{token}'])\n"
            "time.sleep(3)\nprint('done')\n")
    (workdir / "code.agent.yaml").write_text(json.dumps(
        {"schemaVersion": "1.0", "id": "crashy",
         "steps": [{"id": "calc", "type": "code", "language": "python", "code": code,
                    "timeoutMs": 600_000}]}))
    (workdir / "agent-runtime.config.yaml").write_text(json.dumps(
        {"version": "1.0", "sandbox": {"adapter": "bubblewrap", "idempotent": idempotent}}))


def _code_events(workdir: Path, kind: str) -> int:
    path = workdir / EVENTS
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text().splitlines():
        try:
            count += json.loads(line)["type"] == kind
        except (ValueError, KeyError):
            continue  # a line still being written
    return count


def _kill_during_the_code_step(workdir: Path, token: str) -> None:
    child = cli_process.spawn_cli(workdir, "run", "code.agent.yaml", "--run-id", "crashy",
                                  "--lease-seconds", str(LEASE_SECONDS),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli_process.wait_for(lambda: bool(processes_with(token)), "the sandboxed code",
                         child=child)
    child.send_signal(signal.SIGKILL)
    child.wait()
    # bwrap dies with its parent (--die-with-parent), and its pid namespace with it.
    deadline = time.monotonic() + 60
    while processes_with(token):
        assert time.monotonic() < deadline, "the sandbox outlived the killed runtime"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_crash_mid_code_step_suspends_effect_unknown(tmp_path: Path) -> None:
    bubblewrap_sandbox()  # skips, saying why, where bubblewrap cannot run
    token = f"crash-{uuid.uuid4().hex}"
    _write(tmp_path, token, idempotent=False)
    _kill_during_the_code_step(tmp_path, token)

    done = cli_process.run_cli(tmp_path, "resume", "crashy", "--allow-running-takeover",
                               "--format", "json")
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "suspended", result
    assert result["suspension"]["reason"] == "effect-unknown"
    assert result["suspension"]["details"]["key"] == "crashy:calc"
    assert result["suspension"]["details"]["reserved_by_attempt"] == 1
    assert _code_events(tmp_path, "code.started") == 1  # not run again
    assert not processes_with(token)

    # An operator who knows running it again is harmless says so; it runs once more.
    retried = cli_process.run_cli(tmp_path, "effects", "resolve", "crashy", "crashy:calc",
                                  "--retry", "--format", "json")
    assert retried.returncode == 0, retried.stderr
    assert _code_events(tmp_path, "code.started") == 2


@pytest.mark.slow
def test_a_crash_mid_code_step_runs_it_again_when_the_sandbox_is_idempotent(
        tmp_path: Path) -> None:
    bubblewrap_sandbox()
    token = f"crash-{uuid.uuid4().hex}"
    _write(tmp_path, token, idempotent=True)
    _kill_during_the_code_step(tmp_path, token)

    done = cli_process.run_cli(tmp_path, "resume", "crashy", "--allow-running-takeover",
                               "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed", result
    assert result["output"] == "done\n"
    assert result["attempt"] == 2
    assert _code_events(tmp_path, "code.started") == 2
