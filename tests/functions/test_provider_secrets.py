"""Provider keys on Lambda come from Secrets Manager (issue 16, acceptance 3).

The runtime config names the key (`apiKey: {secret: NAME}`); the real Advance
handler, run by the state machine in moto, fetches it with Powertools
Parameters and calls a fake provider on 127.0.0.1 with it. No environment
variable holds the key, and no log line, engine event, invocation payload or
execution history carries it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from aws_lambda_powertools.utilities import parameters
from aws_stack import Deployment

from agent_runtime import RunStatus
from functions.executions import execution_name
from functions.telemetry import logger
from tests.agent_runtime.models.fake_provider_server import FakeProviderServer, json_reply

KEY = "sk-canary-5b1e0c7a-provider-key-never-shown"
SECRET = "agent-runtime/test/provider-key"
MANIFEST = {"schemaVersion": "1.0", "id": "keyed",
            "steps": [{"id": "hello", "type": "prompt", "prompt": "Say hello."}]}

pytestmark = pytest.mark.slow


def completion(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def test_the_step_handler_calls_the_provider_with_the_key_from_secrets_manager(
        deployment: Deployment, tmp_path: Path, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, store = deployment.stack, deployment.services.store
    for handler in logger.handlers:
        if isinstance(handler, logging.StreamHandler):
            monkeypatch.setattr(handler, "stream", sys.stdout)
    parameters.clear_caches()
    boto3.client("secretsmanager").create_secret(Name=SECRET, SecretString=KEY)
    with FakeProviderServer() as server:
        config = {"version": "1.0", "providers": {"local": {"driver": "openai-compatible",
                                          "baseURL": f"{server.url}/v1",
                                          "apiKey": {"secret": SECRET}}}}
        (tmp_path / "runtime.config.yaml").write_text(yaml.safe_dump(config))
        deployment.configure(tmp_path / "runtime.config.yaml")
        server.add(json_reply(completion("Hello from the fake provider.")))
        run_id = deployment.services.runtime().create_run(
            manifest=MANIFEST, options={"model": "local/test-model"}).run_id
        stack.put_resume_request(run_id, attempt=0, reason="run-created")
        stack.deliver_resume_requests()
        assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"

        done = store.load_run(run_id)
        assert done is not None and done.status is RunStatus.COMPLETED, done
        [request] = server.requests
        assert request.headers["authorization"] == f"Bearer {KEY}"

    assert all(KEY not in value for value in os.environ.values())
    assert all(KEY not in value for value in stack.environment.values())
    printed = capfd.readouterr()
    assert "model.completed" in printed.out  # the engine's events were logged
    assert KEY not in printed.out and KEY not in printed.err
    assert all(KEY not in record.getMessage() and KEY not in json.dumps(
        record.__dict__, default=str) for record in caplog.records)
    calls = [(call.event, call.result, call.error) for call in stack.lambdas.invocations]
    assert calls and KEY not in json.dumps(calls, default=str)
    for name in stack.executions():
        history = stack.stepfunctions.get_execution_history(
            executionArn=stack.execution_arn(name))
        assert KEY not in json.dumps(history["events"], default=str)
    assert KEY not in json.dumps(done.model_dump(mode="json"))


def test_a_secret_that_cannot_be_read_fails_the_run_naming_it_not_its_value(
        deployment: Deployment, tmp_path: Path) -> None:
    parameters.clear_caches()
    config = {"version": "1.0", "providers": {"local": {"driver": "openai-compatible",
                                      "baseURL": "http://127.0.0.1:9/v1",
                                      "apiKey": {"secret": "agent-runtime/test/missing"}}}}
    (tmp_path / "runtime.config.yaml").write_text(yaml.safe_dump(config))
    deployment.configure(tmp_path / "runtime.config.yaml")
    with pytest.raises(Exception, match="agent-runtime/test/missing") as raised:
        deployment.services.runtime().create_run(manifest=MANIFEST,
                                                 options={"model": "local/test-model"})
    assert "ResourceNotFound" in str(raised.value)


def test_an_ssm_secure_string_and_a_json_field_are_read_too(deployment: Deployment) -> None:
    from agent_runtime.secrets import read_secret

    parameters.clear_caches()
    boto3.client("ssm").put_parameter(Name="/agents/local-key", Value=KEY, Type="SecureString")
    boto3.client("secretsmanager").create_secret(
        Name="agent-runtime/test/keys", SecretString=json.dumps({"local": KEY}))
    assert read_secret("/agents/local-key", field=None, provider="local") == KEY
    assert read_secret("agent-runtime/test/keys", field="local", provider="local") == KEY
    with pytest.raises(Exception, match="no text field 'other'") as raised:
        read_secret("agent-runtime/test/keys", field="other", provider="local")
    assert KEY not in str(raised.value)
