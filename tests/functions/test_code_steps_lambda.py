"""Code steps on the deployed stack (issue 38, acceptance 3): started over the HTTP API,
run by the real Advance, which invokes the language's code runner through Lambda's
API; moto hands the invocation to the real `functions.code_runner.app.handler`
(tests/functions/aws_stack.py), which runs the code in a subprocess.

The stack's code runner is the sandbox (`AGENT_RUNTIME_CODE_RUNNER_PYTHON`
names its alias): no runtime config is needed, and the API checks a new
run's code steps against it. The autouse `calls_are_granted` fixture checks
that Advance's invocation is one its role is granted (the runner's alias).
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from advance_slices import advance_event, slice_arn
from aws_stack import Deployment, FakeContext, http_event

from agent_runtime import RunStatus
from functions.code_runner import app as runner_app
from functions.executions import execution_name
from functions.step import app as step_app

REPO = Path(__file__).resolve().parents[2]
REFERENCE_EXAMPLE = REPO / "tests/reference/corpus/docs/manifests.md-block-12.agent.yaml"
RUNNER = "CodeRunnerPythonFunction"
JAVASCRIPT_RUNNER = "CodeRunnerJavaScriptFunction"

pytestmark = pytest.mark.slow


def _code_manifest(code: str, **step: Any) -> str:
    return yaml.safe_dump({"schemaVersion": "1.0", "id": "code", "steps": [
        {"id": "calc", "type": "code", "language": "python", "code": code, **step}]})


def _run(deployment: Deployment, manifest: str) -> tuple[str, dict[str, Any]]:
    """Start the run over HTTP, let the state machine run it; its id and record."""
    stack = deployment.stack
    created = stack.call_api(http_event("api-start-run.json", body={
        "manifest": manifest, "options": {"model": "scripted/echo"}}))
    assert created.status == 201, created.body
    run_id = str(created.body["run"]["runId"])
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    answer = stack.call_api(http_event("api-get-run.json", runId=run_id))
    assert answer.status == 200, answer.body
    run: dict[str, Any] = answer.body["run"]
    return run_id, run


def test_the_reference_example_runs_through_the_code_runner(deployment: Deployment) -> None:
    document = yaml.safe_load(REFERENCE_EXAMPLE.read_text())
    run_id, run = _run(deployment, yaml.safe_dump({"schemaVersion": "1.0", **document}))
    assert run["status"] == "completed", run
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == '{"count": 3}\n'
    (call,) = deployment.lambdas.calls(RUNNER)
    assert call.error is None
    assert call.event["language"] == "python" and "AGENT_VARIABLES_FILE" in call.event["code"]
    assert json.loads(call.event["variables"])["items"] == ["one", "two", "three"]
    # Invoked by its alias, as Advance's role is granted.
    (advance,) = [invocation for invocation in deployment.lambdas.invocations
                  if invocation.function == "AdvanceFunction"]
    assert advance.error is None


def test_the_code_sees_only_its_own_environment(deployment: Deployment) -> None:
    # The functions' process holds the stack's settings and (fake) AWS keys.
    code = "import json, os\nprint(json.dumps(sorted(os.environ)))"
    run_id, run = _run(deployment, _code_manifest(code))
    assert run["status"] == "completed", run
    done = deployment.services.store.load_run(run_id)
    assert done is not None
    names = set(json.loads(str(done.output)))
    assert names <= {"AGENT_VARIABLES_FILE", "AGENT_OUTPUT_DIRECTORY", "HOME", "PATH", "TMPDIR",
                     "LANG", "LD_LIBRARY_PATH", "LC_CTYPE"}, names
    assert not {"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AGENT_RUNTIME_STORE"} & names


def test_a_failing_code_step_fails_the_run_with_its_exit_code_only(
        deployment: Deployment) -> None:
    code = "import sys\nprint('secret output')\nsys.stderr.write('secret error')\nsys.exit(3)"
    run_id, run = _run(deployment, _code_manifest(code))
    assert run["status"] == "failed", run
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.error is not None
    assert done.error.type == "code_failed"
    assert "code 3" in done.error.message
    assert "secret" not in done.error.model_dump_json()


def test_code_past_its_timeout_is_killed_and_the_step_fails(deployment: Deployment) -> None:
    code = "import time\ntime.sleep(120)"
    run_id, run = _run(deployment, _code_manifest(code, timeoutMs=1000))
    assert run["status"] == "failed", run
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.error is not None
    assert done.error.type == "code_timeout"
    (call,) = deployment.lambdas.calls(RUNNER)
    assert call.result["limit"] == "timeout"


def test_a_throttled_invocation_is_tried_again_and_the_step_runs_once(
        deployment: Deployment) -> None:
    # Lambda refused the first two (the runner at its reserved concurrency): the code
    # never started, so Advance asks again.
    deployment.lambdas.throttle_next[RUNNER] = 2
    run_id, run = _run(deployment, _code_manifest("print(6 * 7)"))
    assert run["status"] == "completed", run
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.output == "42\n"
    assert deployment.lambdas.throttled[RUNNER] == 2
    assert len(deployment.lambdas.calls(RUNNER)) == 1


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed here")
def test_javascript_goes_through_the_javascript_runner(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine's node plays the node layer's (/opt/node/bin/node on Lambda).
    monkeypatch.setattr(runner_app, "NODE", shutil.which("node"))
    code = ("const fs = require('fs');\n"
            "const variables = JSON.parse(fs.readFileSync(process.env.AGENT_VARIABLES_FILE));\n"
            "console.log(JSON.stringify({count: variables.items.length, "
            "names: Object.keys(process.env).sort()}));\n")
    manifest = yaml.safe_dump({"schemaVersion": "1.0", "id": "code", "variables": [
        {"key": "items", "type": "array", "value": ["one", "two", "three"]}], "steps": [
        {"id": "calc", "type": "code", "language": "javascript", "code": code}]})
    run_id, run = _run(deployment, manifest)
    assert run["status"] == "completed", run
    done = deployment.services.store.load_run(run_id)
    assert done is not None
    printed = json.loads(str(done.output))
    assert printed["count"] == 3
    assert not {"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AGENT_RUNTIME_STORE"} & set(
        printed["names"])
    (call,) = deployment.lambdas.calls(JAVASCRIPT_RUNNER)
    assert call.error is None and call.event["language"] == "javascript"
    assert deployment.lambdas.calls(RUNNER) == []


@pytest.mark.parametrize(("step", "field"), [
    ({"language": "ruby", "code": "puts 1"}, "language"),
    ({"timeoutMs": 600_000}, "timeoutMs"),
    ({"environment": {"TOKEN": "x"}}, "environment")])
def test_the_api_refuses_a_code_step_the_code_runners_cannot_run(
        deployment: Deployment, step: dict[str, Any], field: str) -> None:
    # Only python and javascript have runners here; their timeout (300 s) caps a step's below it;
    # the default config allows no environment names.
    manifest = _code_manifest(step.pop("code", "print(1)"), **step)
    answer = deployment.stack.call_api(http_event("api-start-run.json", body={
        "manifest": manifest, "options": {"model": "scripted/echo"}}))
    assert 400 <= answer.status < 500, answer.body
    assert field in json.dumps(answer.body)
    assert deployment.lambdas.calls(RUNNER) == []


# -- a slice's end while the runner runs (docs/sandbox.md, "After a crash") ------------


def _advance(deployment: Deployment, run_id: str, slice_number: int,
             slice_seconds: float) -> str:
    stack = deployment.stack
    first = execution_name(run_id, 1)
    event = (advance_event(run_id=run_id, execution_arn=stack.execution_arn(first))
             if slice_number == 1 else
             advance_event("advance-next-slice.json", run_id=run_id, slice=slice_number,
                           execution_arn=slice_arn(stack, run_id, 1, slice_number)))
    margin = deployment.services.settings.advance_margin_seconds
    answer = step_app.advance(event, FakeContext("AdvanceFunction",
                                                 round((margin + slice_seconds) * 1000)))
    status: str = answer["status"]
    return status


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_slice_that_ends_while_the_runner_runs_settles_the_step_as_an_effect(
        idle_deployment: Deployment, tmp_path: Path, idempotent: bool) -> None:
    deployment = idle_deployment
    config = tmp_path / "agent-runtime.yaml"
    config.write_text(yaml.safe_dump({"version": "1.0", "sandbox": {
        "adapter": "lambda", "idempotent": idempotent}}))
    deployment.configure(config)
    # A prompt first: the slice has saved a checkpoint when the code step is cut, so
    # the cut hands over instead of failing the step as one no slice could fit.
    manifest = yaml.safe_load(_code_manifest("print(6 * 7)"))
    manifest["steps"].insert(0, {"id": "greet", "type": "prompt", "prompt": "Hello."})
    run_id = deployment.services.runtime().create_run(
        manifest=manifest, options={"model": "scripted/echo"}).run_id
    # The runner's invocation waits (at Lambda's door) past the slice's end.
    gate = threading.Event()
    deployment.lambdas.gates[RUNNER] = gate

    status = _advance(deployment, run_id, 1, 3.0)
    gate.set()
    (effect,) = deployment.services.store.list_effects(run_id)
    assert effect.key == f"{run_id}:calc" and effect.status.value == "reserved"
    cut = deployment.services.store.load_run(run_id)
    assert cut is not None
    if not idempotent:
        # Whether the code ran is unknown: the run waits for an operator.
        assert status == "suspended"
        assert cut.status is RunStatus.SUSPENDED
        assert cut.suspension is not None and cut.suspension.reason == "effect-unknown"
        return
    # Safe to run again: the next slice does, and the run completes.
    assert status == "continue" and cut.status is RunStatus.RUNNING
    deployment.lambdas.gates.pop(RUNNER)
    assert _advance(deployment, run_id, 2, 60.0) == "completed"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.output == "42\n"
