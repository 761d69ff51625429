"""Code steps through the runtime with the bubblewrap sandbox: the reference's
code-step examples run to the same outputs (issue 38, acceptance 1), its
executor's contract holds (stdout is the output, a non-zero exit fails the
step, neither stdout nor stderr reaches an event), the result is an effect,
and validate refuses what the config cannot run, by step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sandbox_kit import SMALL_LIMITS, bubblewrap_sandbox

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.cli import main
from agent_runtime.config import parse_config
from agent_runtime.events import ListEventSink
from agent_runtime.manifest import parse_agent_manifest
from stores.memory import MemoryRunStore
from stores.records import EffectStatus

REPO = Path(__file__).resolve().parents[3]
REFERENCE_EXAMPLE = REPO / "tests/reference/corpus/docs/manifests.md-block-12.agent.yaml"


@pytest.fixture(scope="module", autouse=True)
def _bubblewrap_runs_here() -> None:
    bubblewrap_sandbox()  # skips, saying why, where it cannot


def _runtime(**sandbox: Any) -> tuple[AgentRuntime, ListEventSink, MemoryRunStore]:
    config = parse_config({"version": "1.0", "sandbox": {**SMALL_LIMITS, **sandbox}},
                          source="test config")
    events, store = ListEventSink(), MemoryRunStore()
    return AgentRuntime(config=config, event_sinks=[events], store=store), events, store


def _manifest(*steps: dict[str, Any], variables: list[dict[str, Any]] | None = None) -> Any:
    return parse_agent_manifest({"schemaVersion": "1.0", "id": "code", "steps": list(steps),
                                 "variables": variables or []}, source="test")


def test_the_reference_example_runs_to_its_output() -> None:
    document = yaml.safe_load(REFERENCE_EXAMPLE.read_text())
    agent = parse_agent_manifest({"schemaVersion": "1.0", **document}, source="example")
    runtime, _, _ = _runtime()
    result = runtime.run_sync(manifest=agent)
    assert result.status is RunStatus.COMPLETED, result.error
    # What the code printed, as printed (the reference: `output ?? stdout`).
    assert result.output == '{"count": 3}\n'
    assert json.loads(str(result.output)) == {"count": 3}


def test_the_reference_example_in_javascript() -> None:
    runtime, _, _ = _runtime()
    code = ("const fs = require('fs');\n"
            "const variables = JSON.parse(fs.readFileSync(process.env.AGENT_VARIABLES_FILE));\n"
            "console.log(JSON.stringify({count: variables.items.length}));\n")
    result = runtime.run_sync(manifest=_manifest(
        {"id": "calculate", "type": "code", "language": "javascript", "timeoutMs": 30000,
         "code": code, "outputVariable": "calculation"},
        # The next step sees the output in its variables.
        {"id": "reread", "type": "code", "language": "python",
         "code": "import json, os\n"
                 "variables = json.load(open(os.environ['AGENT_VARIABLES_FILE']))\n"
                 "print(json.loads(variables['calculation'])['count'] * 2)"},
        variables=[{"key": "items", "type": "array", "value": ["one", "two", "three"]}]))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "6\n"


def test_stdout_is_the_output_and_no_event_carries_stdout_or_stderr() -> None:
    runtime, events, _ = _runtime()
    code = ('import sys\nprint("private stdout")\nprint("private warning", file=sys.stderr)\n')
    result = runtime.run_sync(manifest=_manifest(
        {"id": "code-1", "type": "code", "language": "python", "code": code,
         "outputVariable": "calculation", "timeoutMs": 60000}))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "private stdout\n"
    logged = json.dumps([event.to_json() for event in events.events])
    assert "private stdout" not in logged and "private warning" not in logged
    assert "code.started" in events.types() and "code.completed" in events.types()


def test_the_steps_environment_reaches_the_code_and_no_event() -> None:
    runtime, events, _ = _runtime()
    result = runtime.run_sync(manifest=_manifest(
        {"id": "code-environment", "type": "code", "language": "python",
         "code": "import os\nprint(os.environ['PRIVATE_TOKEN'])",
         "environment": {"PRIVATE_TOKEN": "secret-7c1"}}))
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.output == "secret-7c1\n"
    logged = json.dumps([event.to_json() for event in events.events])
    assert "PRIVATE_TOKEN" not in logged and "secret-7c1" not in logged


def test_a_non_zero_exit_fails_the_step_without_exposing_stderr() -> None:
    runtime, events, _ = _runtime()
    result = runtime.run_sync(manifest=_manifest(
        {"id": "code-failed", "type": "code", "language": "python",
         "code": 'raise RuntimeError("private stack trace")'}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "code_failed"
    assert result.error["details"] == {"exit_code": 1}
    assert "private stack trace" not in json.dumps(result.error)
    assert "private stack trace" not in json.dumps([e.to_json() for e in events.events])


def test_a_step_past_its_timeout_fails_the_step() -> None:
    runtime, _, _ = _runtime()
    result = runtime.run_sync(manifest=_manifest(
        {"id": "code-timeout", "type": "code", "language": "python",
         "code": "while True: pass", "timeoutMs": 2000}))
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "code_timeout"
    assert "2000 ms" in result.error["message"]


def test_the_result_is_an_effect_under_the_steps_key() -> None:
    runtime, _, store = _runtime()
    result = runtime.run_sync(manifest=_manifest(
        {"id": "calc", "type": "code", "language": "python", "code": "print(6 * 7)"}))
    assert result.status is RunStatus.COMPLETED, result.error
    [effect] = store.list_effects(result.run_id)
    assert effect.key == f"{result.run_id}:calc"  # <runId>:<stepPath>
    assert effect.status is EffectStatus.COMPLETED
    assert effect.result["output"] == "42\n" and effect.result["exit_code"] == 0


# -- validate ------------------------------------------------------------------------


def _files(tmp_path: Path, step: dict[str, Any], sandbox: dict[str, Any] | None) -> None:
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(
        {"schemaVersion": "1.0", "steps": [{"id": "intro", "type": "prompt", "prompt": "hi"},
                                           step]}))
    config: dict[str, Any] = {"version": "1.0"}
    if sandbox is not None:
        config["sandbox"] = sandbox
    (tmp_path / "host.config.yaml").write_text(yaml.safe_dump(config))


CODE = {"id": "calc", "type": "code", "language": "python", "code": "print(1)"}


@pytest.mark.parametrize("case", [
    (CODE, None, "steps[1].type", "no `sandbox:` section"),
    ({**CODE, "language": "ruby"}, {}, "steps[1].language", "language 'ruby'"),
    ({**CODE, "timeoutMs": 999_999}, {"maxTimeoutMs": 1000}, "steps[1].timeoutMs",
     "sandbox.maxTimeoutMs"),
    ({**CODE, "environment": {"API_KEY": "x"}}, {}, "steps[1].environment",
     "API_KEY is not in the host's sandbox.allowedEnvironment"),
])
def test_validate_refuses_code_steps_the_config_cannot_run_by_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        case: tuple[dict[str, Any], dict[str, Any] | None, str, str]) -> None:
    step, sandbox, field, words = case
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, step, sandbox)
    for argv in (["validate", "agent.yaml", "--config", "host.config.yaml", "--model",
                  "scripted/echo"],
                 ["config", "validate", "host.config.yaml", "--manifest", "agent.yaml"]):
        assert main(argv) == 2, argv
        refusal = capsys.readouterr().err
        assert field in refusal and words in refusal and "code step calc" in refusal


def test_validate_accepts_code_steps_the_sandbox_runs(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, CODE, {"adapter": "bubblewrap"})
    assert main(["validate", "agent.yaml", "--config", "host.config.yaml", "--model",
                 "scripted/echo"]) == 0
    assert main(["config", "validate", "host.config.yaml", "--manifest", "agent.yaml"]) == 0


def test_validate_without_any_config_warns_that_a_run_fails_at_the_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    _files(tmp_path, CODE, None)
    (tmp_path / "host.config.yaml").unlink()
    assert main(["validate", "agent.yaml", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["warnings"][0]["field"] == "steps[1].type"
    assert "a run here fails at this step" in summary["warnings"][0]["message"]
