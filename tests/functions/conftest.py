"""Fixtures of the function tests: template.yaml deployed in moto, our handlers behind it.

Every test gets its own moto account (`mock_aws` with Step Functions executing
state machines and docker-less Lambda), the stack deployed from the template,
the handlers' environment variables set from it, and the functions' services
(`functions.environment.services`) built on a fake clock the test moves:
leases expire when the test says so, not after real waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_stack import MOTO_CONFIG, Deployment, Lambdas, deploy
from granted_calls import CallRecorder
from moto import mock_aws
from moto.awslambda_simple.models import LambdaSimpleBackend

from agent_runtime.testing import FakeClock
from functions import environment
from tests.stores.aws.aws_template import REGION

FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SECURITY_TOKEN": "testing", "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}


def deployed(monkeypatch: pytest.MonkeyPatch, config: Any, *,
             executing: bool) -> Iterator[Deployment]:
    """template.yaml in a moto account of its own, with `config` (moto's); `executing`:
    whether its Step Functions runs the executions started (then waited for at the end)."""
    for name, value in FAKE_AWS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB",
                 "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws(config=config):
        lambdas = Lambdas()

        def invoke(  # noqa: PLR0917 - moto's LambdaSimpleBackend.invoke
                backend: LambdaSimpleBackend, function_name: str, qualifier: str | None,
                body: Any, headers: Any, response_headers: dict[str, str]) -> bytes:
            name = backend.get_function(function_name, qualifier).function_name
            return lambdas.moto_invoke(name, body, response_headers)

        monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
        stack = deploy(boto3.session.Session(), lambdas)
        for name, value in stack.environment.items():
            monkeypatch.setenv(name, value)
        clock = FakeClock()
        services = environment.Services.from_environment(clock=clock)
        monkeypatch.setattr(environment, "services", lambda: services)
        try:
            yield Deployment(stack, lambdas, clock, services)
        finally:
            for gate in lambdas.gates.values():
                gate.set()
            if executing:
                stack.wait_until_idle()


# Step Functions starts executions and never runs them: they stay RUNNING.
IDLE_CONFIG: Any = {**MOTO_CONFIG, "stepfunctions": {"execute_state_machine": False}}


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    yield from deployed(monkeypatch, MOTO_CONFIG, executing=True)


@pytest.fixture
def idle_deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """The stack with Step Functions that starts executions but never runs them (they
    stay RUNNING): for a test of what a starter does, not of what the runs do."""
    yield from deployed(monkeypatch, IDLE_CONFIG, executing=False)


@pytest.fixture(autouse=True)
def calls_are_granted() -> Iterator[CallRecorder]:
    """Every AWS call a handler makes in a test must be one its role is granted
    (moto does not check IAM): a test whose handlers call beyond their role fails."""
    recorder = CallRecorder()
    with recorder.recording():
        yield recorder
    assert recorder.ungranted() == []
