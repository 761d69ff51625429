"""What `inspect` and `validate` print, through the real command, against what the
reference's own CLI tests expect of them: `inspect RUN` shows the latest
checkpoint's state; `validate --format json` and `config validate --format
json` print a summary carrying the reference's fields."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cli_process

FIXTURES = cli_process.REPO / "tests" / "fixtures" / "manifests"


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_process.cli_env(workdir)
    env.pop("AGENT_RUNTIME_STORE", None)
    done = cli_process.run_cli(workdir, *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_inspect_without_flags_shows_the_latest_checkpoints_state(tmp_path: Path) -> None:
    # The approval fixture suspends at its second step, with `proposal` written.
    waiting = _cli(tmp_path, "run", str(FIXTURES / "approval.agent.yaml"), "--model",
                   "scripted/echo", "--run-id", "waits", "--events", "none")
    assert waiting.returncode == 10, waiting.stderr

    shown = _cli(tmp_path, "inspect", "waits", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    checkpoint = run["checkpoint"]
    assert checkpoint["seq"] == run["checkpoint_seq"] and checkpoint["run_id"] == "waits"
    assert checkpoint["variables"]["proposal"].startswith("[echo] Prepare the proposed")
    assert [result["step_id"] for result in checkpoint["step_results"]] == ["prepare"]

    pretty = _cli(tmp_path, "inspect", "waits")
    assert pretty.returncode == 0, pretty.stderr
    assert f"state at checkpoint {checkpoint['seq']} (attempt 1, at " in pretty.stdout
    # One line a variable, its value quoted briefly; `--state` shows it whole.
    assert '  proposal  "[echo] Prepare the proposed' in pretty.stdout
    assert f"in full: agent-runtime inspect waits --seq {checkpoint['seq']} --state" \
        in pretty.stdout
