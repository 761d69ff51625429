"""SIGKILL a CLI run in the middle of a multi-step manifest, then resume it at once."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import cli_process
import pytest

LEASE_SECONDS = 600  # far longer than the test: the takeover must not wait for it


@pytest.mark.slow
def test_killed_run_resumes_at_once_without_repeating_finished_steps(
        tmp_path: Path) -> None:
    cli_process.write_four_steps(tmp_path)
    child = cli_process.spawn_cli(
        tmp_path, *cli_process.RUN_FOUR_STEPS, "--run-id", "killed", "--lease-seconds",
        str(LEASE_SECONDS), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli_process.wait_for_requests(tmp_path, 2, child)  # `first` done; `second` awaits its answer
    child.send_signal(signal.SIGKILL)
    child.wait()

    def resume(*flags: str) -> subprocess.CompletedProcess[str]:
        return cli_process.run_cli(tmp_path, "resume", "killed", "--format", "json", *flags)

    refused = resume()  # the run is still `running`: taking it over is asked for explicitly
    assert refused.returncode == 4  # a conflict: the lease is held
    message = json.loads(refused.stderr)["error"]["message"]
    assert "lease held by" in message and " until 20" in message
    # ...and the refusal says what to do: the owner is confirmed gone, so no wait.
    assert "but that owner was a process of this host that is gone" in message
    assert "no need to wait for the lease, take the run over now with " \
           "--allow-running-takeover: agent-runtime resume killed --allow-running-takeover" \
           in message
    assert "Traceback" not in refused.stderr

    # Its owner was a process of this host that is gone: confirmed dead, so the
    # takeover needs no wait for the lease (docs/design.md section 4).
    done = resume("--allow-running-takeover")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["output"] == "four"
    assert result["attempt"] == 2

    requests = cli_process.model_requests(tmp_path)
    steps = [request["step_id"] for request in requests]
    # `first` was answered and checkpointed before the kill: never asked again.
    # `second` was in flight: asked again on the new attempt. Nothing else repeats.
    assert steps == ["first", "second", "second", "third", "fourth"]
    assert [request["request_index"] for request in requests] == [1, 2, 2, 3, 4]


@pytest.mark.slow
def test_resume_of_a_run_whose_owner_is_alive_says_so(tmp_path: Path) -> None:
    cli_process.write_four_steps(tmp_path)
    # `second` waits far longer than the test: its owner is alive throughout.
    (tmp_path / "four.script.yaml").write_text(
        "responses:\n  - {text: one}\n  - {text: two, delayMs: 3600000}\n")
    child = cli_process.spawn_cli(
        tmp_path, *cli_process.RUN_FOUR_STEPS, "--run-id", "busy", "--lease-seconds",
        str(LEASE_SECONDS), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cli_process.wait_for_requests(tmp_path, 2, child)  # executing, its lease held
        for flags in ((), ("--allow-running-takeover",)):
            refused = cli_process.run_cli(tmp_path, "resume", "busy", *flags)
            assert refused.returncode == 4, refused.stderr
            assert f"its owner is a live process of this host (process {child.pid} on " \
                   in refused.stderr
            assert "stop that process (Ctrl-C suspends the run) and resume it then" \
                   in refused.stderr
            assert "--allow-running-takeover" in refused.stderr
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
