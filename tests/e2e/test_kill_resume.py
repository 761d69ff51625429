"""SIGKILL a CLI run in the middle of a multi-step manifest, then resume it at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

MANIFEST = """schemaVersion: '1.0'
id: four-steps
model: {provider: openai, model: gpt-5.6}
steps:
  - {id: first, type: prompt, prompt: One., outputVariable: one}
  - {id: second, type: prompt, prompt: "Two after {{ one }}", outputVariable: two}
  - {id: third, type: prompt, prompt: "Three after {{ two }}"}
  - {id: fourth, type: prompt, prompt: Four., includeInFinalOutput: true}
"""

SCRIPT = """responses:
  - {text: one, delayMs: 300}
  - {text: two, delayMs: 1500}
  - {text: three, delayMs: 300}
  - {text: four, delayMs: 300}
"""

LEASE_SECONDS = 600  # far longer than the test: the takeover must not wait for it


def _env(log: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), AGENT_RUNTIME_SCRIPTED_LOG=str(log))


def _requests(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_killed_run_resumes_at_once_without_repeating_finished_steps(
        tmp_path: Path) -> None:
    (tmp_path / "four.agent.yaml").write_text(MANIFEST)
    (tmp_path / "four.script.yaml").write_text(SCRIPT)
    log = tmp_path / "requests.jsonl"
    command = [sys.executable, "-m", "agent_runtime.cli"]
    errors = tmp_path / "run.stderr"
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [*command, "run", "four.agent.yaml", "--model", "scripted/four.script.yaml",
             "--run-id", "killed", "--lease-seconds", str(LEASE_SECONDS)],
            cwd=tmp_path, env=_env(log), stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 60
        while len(_requests(log)) < 2:  # `first` finished; `second` awaits its answer
            assert child.poll() is None, errors.read_text()
            assert time.monotonic() < deadline, "the run never reached its second step"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()

    def resume(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, "resume", "killed", "--format", "json", *flags],
                              cwd=tmp_path, env=_env(log), capture_output=True, text=True,
                              timeout=120, check=False)

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

    steps = [request["step_id"] for request in _requests(log)]
    # `first` was answered and checkpointed before the kill: never asked again.
    # `second` was in flight: asked again on the new attempt. Nothing else repeats.
    assert steps == ["first", "second", "second", "third", "fourth"]
    assert [request["request_index"] for request in _requests(log)] == [1, 2, 2, 3, 4]
