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


def test_validate_json_summary_carries_the_reference_fields(tmp_path: Path) -> None:
    # The reference's own test: a JSON manifest, its summary field for field.
    (tmp_path / "agent.json").write_text(json.dumps({
        "schemaVersion": "1.0", "id": "local-agent", "name": "Local agent",
        "steps": [{"id": "draft", "type": "prompt", "prompt": "Draft a response."}]}))
    done = _cli(tmp_path, "validate", "agent.json", "--format", "json")
    assert done.returncode == 0 and done.stderr == ""
    summary = json.loads(done.stdout)
    assert {key: summary[key] for key in ("valid", "schemaVersion", "id", "name", "stepCount")} \
        == {"valid": True, "schemaVersion": "1.0", "id": "local-agent", "name": "Local agent",
            "stepCount": 1}
    assert summary["config"] is None


def test_validate_with_a_config_prints_its_summary(tmp_path: Path) -> None:
    # The reference's test of a manifest's model profile against a config.
    (tmp_path / "agent.yaml").write_text(
        'schemaVersion: "1.0"\nmodel:\n  ref: local\nsteps:\n  - id: answer\n'
        "    type: prompt\n    prompt: Answer.\n")
    (tmp_path / "local.config.yaml").write_text(
        'version: "1.0"\nproviders:\n  ollama:\n    driver: openai-compatible\n'
        "    baseURL: http://127.0.0.1:11434/v1\nmodels:\n  local:\n    provider: ollama\n"
        "    model: qwen-test\n")
    checked = _cli(tmp_path, "config", "validate", "local.config.yaml", "--format", "json")
    assert checked.returncode == 0, checked.stderr
    config = json.loads(checked.stdout)
    assert (config["valid"], config["version"], config["providerCount"], config["modelCount"],
            config["connectionCount"]) == (True, "1.0", 1, 1, 0)

    done = _cli(tmp_path, "validate", "agent.yaml", "--config", "local.config.yaml",
                "--format", "json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["valid"], summary["stepCount"]) == (True, 1)
    assert summary["config"] == {"file": str(tmp_path / "local.config.yaml"),
                                 "found": "--config", "passed_over": [], "host_checked": True}

    # A profile the config does not define: no summary, the error object names the field.
    (tmp_path / "other.yaml").write_text(
        'schemaVersion: "1.0"\nmodel: {ref: missing}\nsteps:\n'
        "  - {id: answer, type: prompt, prompt: Answer.}\n")
    refused = _cli(tmp_path, "validate", "other.yaml", "--config", "local.config.yaml",
                   "--format", "json")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "model profile 'missing' is not defined" in json.loads(refused.stderr)["error"][
        "message"]
