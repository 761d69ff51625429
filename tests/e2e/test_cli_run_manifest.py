"""`agent-runtime run-manifest FILE` through the real command: the reference's command
for a run manifest (an agent by reference, with its variables, run id and budget)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cli_process

AGENT = """schemaVersion: '1.0'
id: release
model: {provider: openai, model: gpt-5.6}
variables:
  - {key: audience, type: string, requiresOverride: true}
steps:
  - {id: answer, type: prompt, prompt: "Write for {{ audience }}.", includeInFinalOutput: true}
"""
RUN = """schemaVersion: '1.0'
agent: {ref: agents/release.agent.yaml}
runId: release-run-1
budget: {maxTotalTokens: 5000}
variables:
  - {key: audience, value: partners}
"""


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_process.cli_env(workdir)
    env.pop("AGENT_RUNTIME_STORE", None)
    done = cli_process.run_cli(workdir, *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _files(workdir: Path) -> None:
    (workdir / "agents").mkdir()
    (workdir / "agents" / "release.agent.yaml").write_text(AGENT)
    (workdir / "release.run.yaml").write_text(RUN)


def test_run_manifest_runs_the_agent_it_names_with_its_id_variables_and_budget(
        tmp_path: Path) -> None:
    _files(tmp_path)
    done = _cli(tmp_path, "run-manifest", "release.run.yaml", "--model", "scripted/echo",
                "--events", "none", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["run_id"], result["status"]) == ("release-run-1", "completed")
    assert result["output"] == "[echo] Write for partners."
    shown = json.loads(_cli(tmp_path, "inspect", "release-run-1", "--format", "json").stdout)
    assert shown["budget"]["max_total_tokens"] == 5000

    again = _cli(tmp_path, "run-manifest", "release.run.yaml", "--model", "scripted/echo",
                 "--events", "none")
    assert again.returncode == 4  # its runId is taken
    assert "release-run-1" in again.stderr


def test_run_manifest_refuses_what_belongs_in_the_file(tmp_path: Path) -> None:
    _files(tmp_path)
    for flags in (["--variables", '{"audience": "x"}'], ["--run-id", "other"],
                  ["--max-total-tokens", "9"]):
        refused = _cli(tmp_path, "run-manifest", "release.run.yaml", "--model",
                       "scripted/echo", *flags)
        assert refused.returncode == 2, flags
        assert f"error: {flags[0]}: {flags[0]} cannot be combined with a run manifest: " \
               "declare variables, runId and budget.maxTotalTokens in it" in refused.stderr
    agent = _cli(tmp_path, "run-manifest", "agents/release.agent.yaml", "--model",
                 "scripted/echo")
    assert agent.returncode == 2
    assert "error: agents/release.agent.yaml: agent: this is an agent manifest; " \
           "run-manifest runs a run manifest" in agent.stderr
    assert not (tmp_path / ".agent-runtime" / "runs.sqlite").exists()  # refused: nothing made
