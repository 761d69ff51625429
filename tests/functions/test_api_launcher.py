"""The AWS side of the HTTP API's seam: the tenant of an API Gateway request, and the
launcher that starts and resumes runs with resume-requested events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_stack import Deployment, http_event, iam_caller, jwt_caller
from botocore.exceptions import ClientError, EndpointConnectionError

from agent_runtime.api import Unauthenticated
from agent_runtime.testing import FakeClock
from functions.api.authenticator import TENANT_CLAIM, HttpApiAuthenticator, principal_tenant
from functions.api.launcher import AwsLauncher
from stores.memory import MemoryRunStore
from stores.records import Budget, RunRecord, RunStatus

# -- the tenant ------------------------------------------------------------------------


@pytest.mark.parametrize(("principal", "tenant"), [
    ("arn:aws:sts::123456789012:assumed-role/ci-deployer/GitHubActions-42",
     "arn:aws:iam::123456789012:role/ci-deployer"),
    ("arn:aws-cn:sts::123456789012:assumed-role/app/i-0abc",
     "arn:aws-cn:iam::123456789012:role/app"),
    ("arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_0a1b2c3d/alice@example.com",
     "arn:aws:iam::123456789012:role/AWSReservedSSO_Admin_0a1b2c3d"),
    ("arn:aws:iam::123456789012:user/ops/alice", "arn:aws:iam::123456789012:user/ops/alice"),
    ("arn:aws:iam::123456789012:root", "arn:aws:iam::123456789012:root"),
    ("arn:aws:sts::123456789012:federated-user/bob",
     "arn:aws:sts::123456789012:federated-user/bob"),
])
def test_an_iam_principal_is_its_tenant_and_a_role_session_is_its_role(
        principal: str, tenant: str) -> None:
    assert principal_tenant(principal) == tenant
    event = APIGatewayProxyEventV2(http_event("api-list-runs.json", caller=iam_caller(principal)))
    assert HttpApiAuthenticator().tenant(event) == tenant


def test_a_jwt_caller_is_the_configured_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    event = APIGatewayProxyEventV2(http_event(
        "api-list-runs.json", caller=jwt_caller(sub="user-1", **{"custom:org": "acme"})))
    assert HttpApiAuthenticator().tenant(event) == "user-1"
    assert HttpApiAuthenticator(tenant_claim="custom:org").tenant(event) == "acme"
    monkeypatch.setenv(TENANT_CLAIM, "custom:org")
    assert HttpApiAuthenticator.from_environment().tenant(event) == "acme"
    monkeypatch.setenv(TENANT_CLAIM, "")  # template.yaml's default: sub
    assert HttpApiAuthenticator.from_environment().tenant(event) == "user-1"
    with pytest.raises(Unauthenticated, match="email"):
        HttpApiAuthenticator(tenant_claim="email").tenant(event)


@pytest.mark.parametrize("caller", [
    None, {}, {"iam": None}, {"iam": {"userArn": ""}}, {"jwt": {"claims": {"sub": ""}}},
    {"lambda": {"tenant": "someone"}},  # a Lambda authorizer is not configured: not trusted
])
def test_a_request_without_a_verified_identity_is_unauthenticated(caller: Any) -> None:
    event = APIGatewayProxyEventV2(http_event("api-list-runs.json", caller=caller))
    with pytest.raises(Unauthenticated):
        HttpApiAuthenticator().tenant(event)


# -- the launcher ------------------------------------------------------------------------


class Bus:
    """An EventBridge client that records PutEvents, or fails it as told."""

    def __init__(self, failure: Exception | None = None, *, refuse: bool = False) -> None:
        self.failure = failure
        self.refuse = refuse
        self.details: list[dict[str, Any]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # boto3's parameter name
        if self.failure is not None:
            raise self.failure
        if self.refuse:
            return {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure",
                                                        "ErrorMessage": "try again"}]}
        (entry,) = Entries
        assert (entry["Source"], entry["DetailType"], entry["EventBusName"]) == (
            "agent-runtime", "resume-requested", "runs-bus")
        self.details.append(json.loads(entry["Detail"]))
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "1"}]}


def suspended_run(store: MemoryRunStore, clock: FakeClock) -> RunRecord:
    store.create_run(RunRecord(run_id="run_1", manifest_hash="h"))
    reserved = store.resume_run("run_1", owner="test", now=clock.now(), lease_seconds=60)
    store.suspend_run("run_1", expected_attempt=reserved.attempt, reason="token-budget",
                      details={"max_total_tokens": 10}, at=clock.now())
    run = store.load_run("run_1")
    assert run is not None and run.status is RunStatus.SUSPENDED
    return run


def test_start_and_resume_put_resume_requested_events() -> None:
    store, clock, bus = MemoryRunStore(), FakeClock(), Bus()
    launcher = AwsLauncher(store, bus, bus="runs-bus", clock=clock)  # type: ignore[arg-type]
    launcher.start(RunRecord(run_id="run_0", manifest_hash="h"))
    run = suspended_run(store, clock)
    launcher.resume(run, reason="resume-requested", budget=Budget(max_total_tokens=500))
    launcher.resume(run, reason="approval-recorded")
    assert bus.details == [
        {"run_id": "run_0", "attempt": 0, "reason": "run-created"},
        {"run_id": "run_1", "attempt": 1, "reason": "resume-requested", "max_total_tokens": 500},
        {"run_id": "run_1", "attempt": 1, "reason": "approval-recorded"}]
    # The request is recorded for the reconciler before the event goes out.
    recorded = store.load_run("run_1")
    assert recorded is not None and recorded.resume_requested_at == clock.now()


@pytest.mark.parametrize("bus", [
    Bus(ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "PutEvents")),
    Bus(EndpointConnectionError(endpoint_url="https://events.us-east-1.amazonaws.com")),
    Bus(refuse=True)])
def test_a_lost_event_leaves_the_recorded_request_to_the_reconciler(bus: Bus) -> None:
    store, clock = MemoryRunStore(), FakeClock()
    launcher = AwsLauncher(store, bus, bus="runs-bus", clock=clock)  # type: ignore[arg-type]
    launcher.start(RunRecord(run_id="run_0", manifest_hash="h"))
    run = suspended_run(store, clock)
    launcher.resume(run, reason="approval-recorded")
    clock.advance(300)
    waiting = store.list_runs(resume_requested_before=clock.now())
    assert [item.run_id for item in waiting.runs] == ["run_1"]


def test_a_run_that_moved_on_is_not_resumed() -> None:
    store, clock, bus = MemoryRunStore(), FakeClock(), Bus()
    launcher = AwsLauncher(store, bus, bus="runs-bus", clock=clock)  # type: ignore[arg-type]
    run = suspended_run(store, clock)
    store.cancel_run("run_1", at=clock.now())
    launcher.resume(run, reason="approval-recorded")
    store.create_run(RunRecord(run_id="run_2", manifest_hash="h"))  # never started
    launcher.resume(RunRecord(run_id="run_2", manifest_hash="h"), reason="resume-requested")
    assert bus.details == []


def test_a_run_is_created_over_http_even_when_eventbridge_fails(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(**_: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="https://events.us-east-1.amazonaws.com")

    monkeypatch.setattr(deployment.services.events, "put_events", unreachable)
    created = deployment.stack.call_api(http_event("api-start-run.json"))
    assert created.status == 201, created.body
    run_id = created.body["run"]["runId"]
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.status is RunStatus.CREATED
    assert deployment.stack.deliver_resume_requests() == []
