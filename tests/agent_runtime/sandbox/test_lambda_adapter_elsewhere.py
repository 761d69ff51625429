"""`sandbox.adapter: lambda` outside the deployed stack: its code runners exist only there
(functions/lambda_sandbox.py), so this host refuses code steps with that reason,
before a run exists, and never runs code itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from agent_runtime.cli import main
from agent_runtime.sandbox import SandboxRequest, SandboxSettings, SandboxUnavailable, build_sandbox

CODE = {"id": "calc", "type": "code", "language": "python", "code": "print(1)"}


def test_validate_with_the_lambda_adapter_refuses_code_steps_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(
        {"schemaVersion": "1.0", "id": "code", "steps": [CODE]}))
    (tmp_path / "host.config.yaml").write_text(yaml.safe_dump(
        {"version": "1.0", "sandbox": {"adapter": "lambda"}}))
    assert main(["validate", "agent.yaml", "--config", "host.config.yaml", "--model",
                 "scripted/echo"]) == 2
    refusal = capsys.readouterr().err
    assert "steps[0].type" in refusal and "deployed stack" in refusal


def test_the_lambda_adapter_runs_nothing_outside_the_stack() -> None:
    sandbox = build_sandbox(SandboxSettings(adapter="lambda"))
    assert sandbox is not None
    assert "python" in sandbox.languages()
    request = SandboxRequest(run_id="run", step_path="calc", language="python",
                             code="print(1)", variables={}, timeout_ms=1000)
    with pytest.raises(SandboxUnavailable, match="deployed stack"):
        asyncio.run(sandbox.execute(request))
