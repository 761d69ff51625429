"""SIGKILL a CLI run in the middle of a multi-step manifest, then resume it at once."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from cli_process import (
    COMMAND,
    RUN_FOUR_STEPS,
    cli_env,
    model_requests,
    run_cli,
    wait_for,
    write_four_steps,
)

LEASE_SECONDS = 600  # far longer than the test: the takeover must not wait for it


@pytest.mark.slow
def test_killed_run_resumes_at_once_without_repeating_finished_steps(
        tmp_path: Path) -> None:
    write_four_steps(tmp_path)
    child = subprocess.Popen(
        [*COMMAND, *RUN_FOUR_STEPS, "--run-id", "killed", "--lease-seconds", str(LEASE_SECONDS)],
        cwd=tmp_path, env=cli_env(tmp_path), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    # `first` finished; `second` awaits its answer.
    wait_for(lambda: len(model_requests(tmp_path)) >= 2, "the run's second step", child=child)
    child.send_signal(signal.SIGKILL)
    child.wait()

    def resume(*flags: str) -> subprocess.CompletedProcess[str]:
        return run_cli(tmp_path, "resume", "killed", "--format", "json", *flags)

    refused = resume()  # the run is still `running`: taking it over is asked for explicitly
    assert refused.returncode == 4  # a conflict: the lease is held
    assert "lease held by" in refused.stderr and " until 20" in refused.stderr
    assert "Traceback" not in refused.stderr

    # Its owner was a process of this host that is gone: confirmed dead, so the
    # takeover needs no wait for the lease (DESIGN section 4).
    done = resume("--allow-running-takeover")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["output"] == "four"
    assert result["attempt"] == 2

    steps = [request["step_id"] for request in model_requests(tmp_path)]
    # `first` was answered and checkpointed before the kill: never asked again.
    # `second` was in flight: asked again on the new attempt. Nothing else repeats.
    assert steps == ["first", "second", "second", "third", "fourth"]
    assert [request["request_index"] for request in model_requests(tmp_path)] == [1, 2, 2, 3, 4]
