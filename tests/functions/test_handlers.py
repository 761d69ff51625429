"""The handlers' paths one by one, with events/'s samples, and the executions' names.

Advance's first slice: reserved and run, a duplicate of it (after its
response was lost) reserving nothing more, not reserved (held by another
owner, finished, missing), a takeover only after the lease ran out, a
superseded attempt. Start: a run that is not there. And end to end: a
response lost on the way back from the first slice is retried by the state
machine; an execution that ended before it reserved does not block its
attempt; a finished sub-run resumes its parent through a resume-requested
event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from advance_slices import advance_event, slice_arn
from aws_stack import Deployment, FakeContext, sample_event

from agent_runtime import AgentRuntime, RunStatus
from functions.capacity import slots_of
from functions.executions import (
    MAX_NAME_LENGTH,
    execution_arn,
    execution_name,
    start_slice,
    state_machine_of,
)
from functions.step import app

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}


def context(function: str, remaining_ms: int = 900_000) -> FakeContext:
    return FakeContext(function, remaining_ms)


# -- names (no AWS) ---------------------------------------------------------------


def test_an_execution_is_named_after_the_run_the_attempt_it_reserves_and_its_slice() -> None:
    assert execution_name("run_abc", 1) == "run_abc-a1"
    assert execution_name("run_abc.sub-0f1e", 12) == "run_abc.sub-0f1e-a12"
    assert execution_name("run_abc", 3, retry=2) == "run_abc-a3-r2"
    # Later slices of the attempt: the chain of the execution that reserved it.
    assert execution_name("run_abc", 3, slice_=2) == "run_abc-a3-s2"
    assert execution_name("run_abc", 3, slice_=1) == "run_abc-a3"


@pytest.mark.parametrize("run_id", ["x" * 90, "run with spaces/and:colons", "r" * 77])
def test_a_run_id_that_is_no_valid_name_is_made_one_deterministically(run_id: str) -> None:
    name = execution_name(run_id, 10, retry=5)
    assert len(name) <= MAX_NAME_LENGTH and name.endswith("-a10-r5")
    assert all(c.isalnum() or c in "._-" for c in name)
    assert name == execution_name(run_id, 10, retry=5)
    assert name != execution_name(run_id + "y", 10, retry=5)
    # A slice's suffix fits too, however many slices the attempt runs.
    later = execution_name(run_id, 10, slice_=123_456)
    assert len(later) <= MAX_NAME_LENGTH and later.endswith("-a10-s123456")
    assert later == execution_name(run_id, 10, slice_=123_456)
    assert later != execution_name(run_id, 10, slice_=123_457)


def test_a_slice_name_that_would_pass_the_limit_is_hashed_not_cut() -> None:
    run_id = "r" * 74  # "-a1" fits, "-a1-s2" does not
    assert execution_name(run_id, 1) == run_id + "-a1"
    second = execution_name(run_id, 1, slice_=2)
    assert len(second) <= MAX_NAME_LENGTH and second.endswith("-a1-s2")
    assert second != execution_name(run_id[:-1], 1, slice_=2)


def test_an_execution_arn_is_derived_from_the_state_machine_arn_and_back() -> None:
    assert execution_arn("arn:aws:states:eu-west-1:1:stateMachine:Run", "r-a1") == (
        "arn:aws:states:eu-west-1:1:execution:Run:r-a1")
    with pytest.raises(ValueError, match="not a state machine ARN"):
        execution_arn("arn:aws:lambda:eu-west-1:1:function:F", "r-a1")
    # A slice finds the state machine to start its successor on in its own ARN.
    assert state_machine_of("arn:aws:states:eu-west-1:1:execution:Run:r-a1-s2") == (
        "arn:aws:states:eu-west-1:1:stateMachine:Run")
    for wrong in ("arn:aws:states:eu-west-1:1:stateMachine:Run", "arn:aws:states:x:1:execution:"):
        with pytest.raises(ValueError, match="not an execution ARN"):
            state_machine_of(wrong)


# -- handlers, called with events/'s samples -----------------------------------


def created_run(deployment: Deployment) -> str:
    return deployment.services.runtime().create_run(
        manifest=MANIFESTS / "approval.agent.yaml", options=ECHO).run_id


def first_commit_point(deployment: Deployment) -> FakeContext:
    """A context with less time left than the margin: the slice stops at its first
    commit point, the run still running, and hands the attempt over."""
    margin_ms = deployment.services.settings.advance_margin_seconds * 1000
    return context("AdvanceFunction", int(margin_ms) - 1)


def test_the_first_slice_reserves_the_attempt_and_a_late_duplicate_reserves_nothing(
        idle_deployment: Deployment) -> None:
    deployment = idle_deployment  # the executions it starts stay RUNNING, never run
    stack, store = deployment.stack, deployment.services.store
    run_id = created_run(deployment)
    first = stack.execution_arn(execution_name(run_id, 1))
    event = advance_event(run_id=run_id, execution_arn=first)
    assert app.advance(event, first_commit_point(deployment)) == {
        "run_id": run_id, "attempt": 1, "status": "continue"}
    second = slice_arn(stack, run_id, 1, 2)
    handed = store.load_run(run_id)
    assert handed is not None and (handed.status, handed.attempt) == (RunStatus.RUNNING, 1)
    assert handed.lease_owner == second  # the next slice's execution, started
    assert stack.executions() == {execution_name(run_id, 1, slice_=2): "RUNNING"}

    # The state machine retried the first slice (its response lost): the attempt is
    # the next slice's now, and nothing is reserved again.
    assert app.advance(event, context("AdvanceFunction"))["status"] == "superseded"
    assert store.load_run(run_id) == handed
    # Nor by the first slice of another chain of the attempt, or of the next
    # attempt without a takeover.
    other = advance_event(run_id=run_id, execution_arn=first + "-other")
    assert app.advance(other, context("AdvanceFunction"))["status"] == "superseded"
    following = advance_event(run_id=run_id, attempt=2,
                              execution_arn=stack.execution_arn(execution_name(run_id, 2)))
    assert app.advance(following, context("AdvanceFunction"))["status"] == "skipped"
    assert store.load_run(run_id) == handed


def test_a_takeover_needs_the_lease_to_have_run_out_and_supersedes_the_chain(
        idle_deployment: Deployment) -> None:
    deployment = idle_deployment
    stack, store = deployment.stack, deployment.services.store
    run_id = created_run(deployment)
    event = advance_event(run_id=run_id,
                          execution_arn=stack.execution_arn(execution_name(run_id, 1)))
    assert app.advance(event, first_commit_point(deployment))["status"] == "continue"
    takeover = advance_event("advance-takeover.json", run_id=run_id,
                             execution_arn=stack.execution_arn(execution_name(run_id, 2)))
    assert app.advance(takeover, context("AdvanceFunction"))["status"] == "skipped"
    assert store.load_run(run_id).attempt == 1  # type: ignore[union-attr]
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)
    # Reserved and run to the approval, where it suspends.
    assert app.advance(takeover, context("AdvanceFunction")) == {
        "run_id": run_id, "attempt": 2, "status": "suspended"}
    suspended = store.load_run(run_id)
    assert suspended is not None and suspended.attempt == 2
    # The chain of the superseded attempt ends when its next slice runs.
    stale = advance_event("advance-next-slice.json", run_id=run_id,
                          execution_arn=slice_arn(stack, run_id, 1, 2))
    assert app.advance(stale, context("AdvanceFunction"))["status"] == "superseded"
    assert store.load_run(run_id) == suspended


def test_a_first_slice_skips_a_finished_or_missing_run_and_frees_its_slot(
        deployment: Deployment) -> None:
    deployment.configure(max_concurrent_runs=2)
    slots = slots_of(deployment.services)
    run_id = created_run(deployment)
    assert slots.admit(run_id, 1, now=deployment.clock.now()) is None
    AgentRuntime(store=deployment.services.store).cancel(run_id)
    assert app.advance(advance_event(run_id=run_id),
                       context("AdvanceFunction"))["status"] == "skipped"
    # Its starter's slot is free again: another run takes it, and then one more.
    assert slots.admit("another", 1, now=deployment.clock.now()) is None
    assert slots.admit("and-another", 1, now=deployment.clock.now()) is None
    assert app.advance(advance_event(run_id="run_missing"),
                       context("AdvanceFunction"))["status"] == "skipped"


def test_the_previous_state_machine_s_payload_is_advanced_as_a_reserved_first_slice(
        deployment: Deployment) -> None:
    """An execution started before an upgrade runs on the definition it started with:
    its Reserve leased the attempt to it, and its Advance sends the flat payload."""
    store = deployment.services.store
    run_id = created_run(deployment)
    execution = deployment.stack.execution_arn(execution_name(run_id, 1))
    store.resume_run(run_id, owner=execution, now=deployment.clock.now(), lease_seconds=120)
    flat = {"run_id": run_id, "attempt": 1, "execution_arn": execution,
            "max_total_tokens": None}
    assert app.advance(flat, context("AdvanceFunction"))["status"] == "suspended"
    record = store.load_run(run_id)
    assert record is not None and (record.status, record.attempt) == (RunStatus.SUSPENDED, 1)


def test_a_slice_s_successor_is_started_once_however_often_it_is_started(
        idle_deployment: Deployment) -> None:
    stack = idle_deployment.stack
    first = start_slice(stack.stepfunctions, stack.state_machine_arn, "run_abc", 3, 2,
                        max_total_tokens=5)
    again = start_slice(stack.stepfunctions, stack.state_machine_arn, "run_abc", 3, 2,
                        max_total_tokens=5)
    assert first.new and first.name == "run_abc-a3-s2"
    assert again.execution_arn == first.execution_arn
    assert stack.executions() == {"run_abc-a3-s2": "RUNNING"}
    described = stack.stepfunctions.describe_execution(executionArn=first.execution_arn)
    assert json.loads(described["input"]) == {"run_id": "run_abc", "attempt": 3, "slice": 2,
                                              "takeover": False, "max_total_tokens": 5}


def test_start_skips_a_request_for_a_run_that_is_not_there(deployment: Deployment) -> None:
    for sample in ("resume-requested.json", "run-created.json", "sub-run-finished.json"):
        answer = app.start(sample_event(sample, run_id="run_missing"), context("StartFunction"))
        assert answer["status"] == "skipped"
    assert deployment.stack.executions() == {}


# -- end to end -------------------------------------------------------------------


@pytest.mark.slow
def test_a_lost_first_slice_response_is_retried_and_reserves_nothing_more(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = deployment.stack
    told: list[str] = []
    announce = app.announce_run_finished

    def announcing(events: Any, store: Any, result: Any, **kwargs: Any) -> Any:
        told.append(result.run_id)
        return announce(events, store, result, **kwargs)

    monkeypatch.setattr(app, "announce_run_finished", announcing)
    stack.lambdas.faults["AdvanceFunction"] = ["Lambda.ServiceException"]
    run_id = created_run(deployment)
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    slices = stack.lambdas.calls("AdvanceFunction")
    assert [call.error for call in slices] == ["Lambda.ServiceException", None]
    # The first ran the run to its approval; the retry found it suspended there.
    assert [call.result["status"] for call in slices] == ["suspended", "suspended"]
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.status is RunStatus.SUSPENDED and record.attempt == 1
    # Its clients were told once, by the invocation that suspended it.
    assert told == [run_id]


@pytest.mark.slow
def test_an_execution_that_ended_before_reserving_does_not_block_its_attempt(
        deployment: Deployment) -> None:
    stack, lambdas = deployment.stack, deployment.lambdas
    advance = lambdas.handlers["AdvanceFunction"]

    def broken(event: Any, ctx: Any) -> Any:
        raise RuntimeError("a deployment bug")

    lambdas.handlers["AdvanceFunction"] = broken
    run_id = created_run(deployment)
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "FAILED"

    lambdas.handlers["AdvanceFunction"] = advance
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
