"""The handlers' paths one by one, with events/'s samples, and the executions' names.

Reserve: reserved, reserved again by its own retry, not reserved (held by
another owner, finished), taken over after the lease ran out. Advance: a
superseded attempt. Start: a run that is not there. And end to end: a
response lost on the way back from Reserve is retried by the state machine;
an execution that ended before it reserved does not block its attempt; a
finished sub-run resumes its parent through a resume-requested event.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_stack import Deployment, FakeContext, sample_event

from agent_runtime import AgentRuntime, RunStatus
from functions.executions import MAX_NAME_LENGTH, execution_arn, execution_name
from functions.step import app

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}


def context(function: str) -> FakeContext:
    return FakeContext(function, 30_000)


# -- names (no AWS) ---------------------------------------------------------------


def test_an_execution_is_named_after_the_run_and_the_attempt_it_reserves() -> None:
    assert execution_name("run_abc", 1) == "run_abc-a1"
    assert execution_name("run_abc.sub-0f1e", 12) == "run_abc.sub-0f1e-a12"
    assert execution_name("run_abc", 3, retry=2) == "run_abc-a3-r2"


@pytest.mark.parametrize("run_id", ["x" * 90, "run with spaces/and:colons", "r" * 77])
def test_a_run_id_that_is_no_valid_name_is_made_one_deterministically(run_id: str) -> None:
    name = execution_name(run_id, 10, retry=5)
    assert len(name) <= MAX_NAME_LENGTH and name.endswith("-a10-r5")
    assert all(c.isalnum() or c in "._-" for c in name)
    assert name == execution_name(run_id, 10, retry=5)
    assert name != execution_name(run_id + "y", 10, retry=5)


def test_an_execution_arn_is_derived_from_the_state_machine_arn() -> None:
    assert execution_arn("arn:aws:states:eu-west-1:1:stateMachine:Run", "r-a1") == (
        "arn:aws:states:eu-west-1:1:execution:Run:r-a1")
    with pytest.raises(ValueError, match="not a state machine ARN"):
        execution_arn("arn:aws:lambda:eu-west-1:1:function:F", "r-a1")


# -- handlers, called with events/'s samples -----------------------------------


def created_run(deployment: Deployment) -> str:
    return deployment.services.runtime().create_run(
        manifest=MANIFESTS / "approval.agent.yaml", options=ECHO).run_id


def test_reserve_leases_the_attempt_to_the_execution_and_a_retry_finds_it_reserved(
        deployment: Deployment) -> None:
    run_id = created_run(deployment)
    event = sample_event("reserve.json", run_id=run_id)
    assert app.reserve(event, context("ReserveFunction")) == {
        "run_id": run_id, "attempt": 1, "status": "reserved"}
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.lease_owner == event["execution_arn"]
    # The state machine retried a Reserve whose response was lost.
    assert app.reserve(event, context("ReserveFunction"))["status"] == "reserved"
    # Another execution finds the run held.
    other = sample_event("reserve.json", run_id=run_id, execution_arn=event["execution_arn"] + "x")
    assert app.reserve(other, context("ReserveFunction"))["status"] == "skipped"
    # A takeover needs the lease to have run out.
    takeover = sample_event("reserve-takeover.json", run_id=run_id)
    assert app.reserve(takeover, context("ReserveFunction"))["status"] == "skipped"
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)
    assert app.reserve(takeover, context("ReserveFunction")) == {
        "run_id": run_id, "attempt": 2, "status": "reserved"}
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.takeovers == 1
    # Advance of the superseded attempt ends its execution.
    stale = sample_event("advance.json", run_id=run_id, execution_arn=event["execution_arn"])
    assert app.advance(stale, context("AdvanceFunction"))["status"] == "superseded"


def test_reserve_skips_a_finished_or_missing_run(deployment: Deployment) -> None:
    run_id = created_run(deployment)
    AgentRuntime(store=deployment.services.store).cancel(run_id)
    assert app.reserve(sample_event("reserve.json", run_id=run_id),
                       context("ReserveFunction"))["status"] == "skipped"
    assert app.reserve(sample_event("reserve.json", run_id="run_missing"),
                       context("ReserveFunction"))["status"] == "skipped"


def test_start_skips_a_request_for_a_run_that_is_not_there(deployment: Deployment) -> None:
    for sample in ("resume-requested.json", "run-created.json", "sub-run-finished.json"):
        answer = app.start(sample_event(sample, run_id="run_missing"), context("StartFunction"))
        assert answer["status"] == "skipped"
    assert deployment.stack.executions() == {}


# -- end to end -------------------------------------------------------------------


@pytest.mark.slow
def test_a_lost_reserve_response_is_retried_and_finds_the_attempt_reserved(
        deployment: Deployment) -> None:
    stack = deployment.stack
    stack.lambdas.faults["ReserveFunction"] = ["Lambda.ServiceException"]
    run_id = created_run(deployment)
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    reserves = stack.lambdas.calls("ReserveFunction")
    assert [call.error for call in reserves] == ["Lambda.ServiceException", None]
    assert reserves[1].result["attempt"] == 1
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.status is RunStatus.SUSPENDED and record.attempt == 1


@pytest.mark.slow
def test_an_execution_that_ended_before_reserving_does_not_block_its_attempt(
        deployment: Deployment) -> None:
    stack, lambdas = deployment.stack, deployment.lambdas
    reserve = lambdas.handlers["ReserveFunction"]

    def broken(event: Any, ctx: Any) -> Any:
        raise RuntimeError("a deployment bug")

    lambdas.handlers["ReserveFunction"] = broken
    run_id = created_run(deployment)
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "FAILED"

    lambdas.handlers["ReserveFunction"] = reserve
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    (answer,) = stack.deliver_resume_requests()
    assert answer["status"] == "started"
    assert answer["execution_arn"] == stack.execution_arn(execution_name(run_id, 1, retry=2))
    assert stack.wait_for(execution_name(run_id, 1, retry=2))["status"] == "SUCCEEDED"
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.status is RunStatus.SUSPENDED and record.attempt == 1


@pytest.mark.slow
def test_a_finished_sub_run_resumes_its_parent(deployment: Deployment) -> None:
    stack, store = deployment.stack, deployment.services.store
    child = yaml.safe_load((MANIFESTS / "approval.agent.yaml").read_text())
    parent = {"schemaVersion": "1.0", "id": "parent", "name": "Parent",
              "steps": [{"id": "delegate", "type": "sub-run", "manifest": child,
                         "outputVariable": "delegated", "includeInFinalOutput": True}]}
    run_id = deployment.services.runtime().create_run(manifest=parent, options=ECHO).run_id
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    waiting = store.load_run(run_id)
    assert waiting is not None and waiting.suspension is not None
    assert waiting.suspension.reason == "sub-run"
    child_id = str(waiting.suspension.details["child_run_id"])
    child_run = store.load_run(child_id)
    assert child_run is not None and child_run.status is RunStatus.SUSPENDED
    # The child ran under the parent's execution.
    assert child_run.lease_owner in (None, stack.execution_arn(execution_name(run_id, 1)))

    AgentRuntime(store=store).approve(child_id)
    stack.put_resume_request(child_id, attempt=child_run.attempt, reason="approval-recorded")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(child_id, 2))["status"] == "SUCCEEDED"
    # The child's Advance asked for the parent's resume; the rule delivers it.
    (resumed,) = stack.deliver_resume_requests()
    assert resumed["status"] == "started"
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    done, child_done = store.load_run(run_id), store.load_run(child_id)
    assert done is not None and child_done is not None
    assert child_done.status is RunStatus.COMPLETED and done.status is RunStatus.COMPLETED
    assert done.output == child_done.output
