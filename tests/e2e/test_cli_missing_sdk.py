"""A provider SDK that is not installed, through the real command: the refusal names
the extra to install and the field where the model was chosen."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cli_process

TOP_LEVEL = """schemaVersion: '1.0'
id: top-level-model
model: {provider: openai, model: gpt-5.6}
steps:
  - {id: answer, type: prompt, prompt: Answer.}
"""
STEP_LEVEL = """schemaVersion: '1.0'
id: step-model
steps:
  - {id: first, type: prompt, prompt: One., model: {provider: scripted, model: echo}}
  - {id: second, type: prompt, prompt: Two., model: {provider: anthropic, model: claude-x}}
"""


def _without(workdir: Path, *packages: str) -> dict[str, str]:
    """The command's environment with `packages` importable as missing SDKs would be."""
    shadow = workdir / "shadow"
    for package in packages:
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {package}'!r}, name={package!r})\n")
    env = cli_process.cli_env(workdir, OPENAI_API_KEY="unused", ANTHROPIC_API_KEY="unused")
    env["PYTHONPATH"] = f"{shadow}:{env['PYTHONPATH']}"
    env.pop("AGENT_RUNTIME_STORE", None)
    return env


def _cli(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = cli_process.run_cli(workdir, *args, "--format", "json", env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_missing_sdk_names_the_extra_and_the_manifests_model(tmp_path: Path) -> None:
    (tmp_path / "top.agent.yaml").write_text(TOP_LEVEL)
    env = _without(tmp_path, "aiohttp")
    for command in (["run", "top.agent.yaml", "--events", "none"],
                    ["validate", "top.agent.yaml", "--model", "openai/gpt-5.6"]):
        done = _cli(tmp_path, env, *command)
        assert done.returncode == 2, done.stderr
        error = json.loads(done.stderr)["error"]
        assert "model provider 'openai' (driver openai) needs the package 'aiohttp', which is " \
               "not installed: pip install 'agent-runtime-durable[openai]'" in error["message"]
        # The manifest's model, not a step's; --model overrides each step's.
        assert error["field"] == ("model" if command[0] == "run" else "steps[0].model"), command
    assert not (tmp_path / ".agent-runtime" / "runs.sqlite").exists()


def test_a_steps_own_model_is_named_by_its_step(tmp_path: Path) -> None:
    (tmp_path / "steps.agent.yaml").write_text(STEP_LEVEL)
    # The anthropic driver calls over aiohttp, as the openai one does.
    done = _cli(tmp_path, _without(tmp_path, "aiohttp"), "run", "steps.agent.yaml",
                "--events", "none")
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stderr)["error"]
    assert error["field"] == "steps[1].model"
    assert "model provider 'anthropic' (driver anthropic) needs the package 'aiohttp', " \
           "which is not installed: pip install 'agent-runtime-durable[anthropic]'" \
           in error["message"]
