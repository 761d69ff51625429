"""The run state machine end to end under moto: one slice of an attempt per execution,
the first reserving it, each that stops with the run running starting the next.

Runs are created in the store and started, and approvals answered, the way
this deployment offers before the HTTP API exists: through the store and
resume-requested events, which the template's rule delivers to the start
function (conftest: moto's EventBridge, an SQS stand-in for the Lambda target).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from advance_slices import advance_event, transitions, wait_for_chain
from aws_stack import Deployment

from agent_runtime import AgentRuntime, RunStatus
from functions.executions import execution_name
from functions.step import app
from stores.memory import MemoryRunStore

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}

pytestmark = pytest.mark.slow


def reference_output(manifest: Path, *, approve: bool = False) -> Any:
    """What the same run produces locally, uninterrupted (approving when asked)."""
    runtime = AgentRuntime(store=MemoryRunStore())
    result = runtime.run_sync(manifest=manifest, options=ECHO)
    if approve:
        runtime.approve(result.run_id)
        result = runtime.run_sync(run_id=result.run_id, resume=True)
    assert result.status is RunStatus.COMPLETED
    return result.output


def create_run(deployment: Deployment, manifest: Path | dict[str, Any],
               **options: Any) -> str:
    record = deployment.services.runtime().create_run(manifest=manifest,
                                                      options={**ECHO, **options})
    return record.run_id


def test_an_approval_run_suspends_and_a_resume_requested_event_completes_it(
        deployment: Deployment) -> None:
    stack, store = deployment.stack, deployment.services.store
    run_id = create_run(deployment, MANIFESTS / "approval.agent.yaml")
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    (started,) = stack.deliver_resume_requests()
    assert started["status"] == "started"
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    suspended = store.load_run(run_id)
    assert suspended is not None and suspended.status is RunStatus.SUSPENDED
    assert suspended.suspension is not None and suspended.suspension.reason == "approval"
    # One slice reserved the attempt and ran it to its suspension: its payload
    # has events/advance.json's shape, and it made one state transition.
    first = stack.execution_arn(execution_name(run_id, 1))
    (advance,) = stack.lambdas.calls("AdvanceFunction")
    assert advance.event == advance_event(run_id=run_id, execution_arn=first)
    assert transitions(stack, first) == ["Advance"]

    AgentRuntime(store=store).approve(run_id)
    stack.put_resume_request(run_id, attempt=suspended.attempt, reason="approval-recorded")
    (resumed,) = stack.deliver_resume_requests()
    assert resumed["status"] == "started" and resumed["attempt"] == 2
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"

    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 2
    assert done.output == reference_output(MANIFESTS / "approval.agent.yaml", approve=True)
    functions = [call.function for call in stack.lambdas.invocations]
    assert functions == ["StartFunction", "AdvanceFunction", "StartFunction", "AdvanceFunction"]
    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED",
                                  execution_name(run_id, 2): "SUCCEEDED"}


def test_a_long_run_advances_in_slices_until_done(deployment: Deployment) -> None:
    stack, store, lambdas = deployment.stack, deployment.services.store, deployment.lambdas
    # Less time left than the margin: every Advance stops at its first commit point.
    margin_ms = deployment.services.settings.advance_margin_seconds * 1000
    lambdas.remaining_ms["AdvanceFunction"] = int(margin_ms) - 1
    manifest = MANIFESTS / "prompt-chain.agent.yaml"
    run_id = create_run(deployment, manifest)
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    chain = wait_for_chain(stack, run_id, 1)
    assert [execution["status"] for execution in chain] == ["SUCCEEDED"] * 3

    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 1
    assert done.output == reference_output(manifest)
    calls = lambdas.calls("AdvanceFunction")
    statuses = [call.result["status"] for call in calls]
    assert statuses[-1] == "completed" and set(statuses[:-1]) == {"continue"}
    # One slice per commit point: each step's checkpoint, the last step's being the
    # final one (the prompt chain's three steps).
    assert len(statuses) == len(store.list_checkpoints(run_id))
    assert len(statuses) == 3
    # Each slice its own execution, named after it and started by the one before
    # it with the same input plus its number; one state transition each.
    names = [execution_name(run_id, 1), execution_name(run_id, 1, slice_=2),
             execution_name(run_id, 1, slice_=3)]
    assert stack.executions() == dict.fromkeys(names, "SUCCEEDED")
    assert [call.event for call in calls] == [
        advance_event(run_id=run_id, execution_arn=stack.execution_arn(names[0])),
        advance_event("advance-next-slice.json", run_id=run_id,
                      execution_arn=stack.execution_arn(names[1])),
        advance_event("advance-next-slice.json", run_id=run_id, slice=3,
                      execution_arn=stack.execution_arn(names[2]))]
    for name in names:
        assert transitions(stack, stack.execution_arn(name)) == ["Advance"]
    assert (done.takeovers, done.lease_owner) == (0, None)


def test_a_duplicate_resume_requested_event_starts_no_second_execution(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    stack, store, lambdas = deployment.stack, deployment.services.store, deployment.lambdas
    run_id = create_run(deployment, MANIFESTS / "approval.agent.yaml")
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    answers = stack.deliver_resume_requests()
    assert sorted(answer["status"] for answer in answers) in (
        ["duplicate", "started"], ["skipped", "started"])
    stack.wait_for(execution_name(run_id, 1))
    AgentRuntime(store=store).approve(run_id)

    # The repeat arrives while the first execution runs, before it reserved
    # (held before its Advance): Step Functions has it under the same name ...
    before_gate = lambdas.gates["AdvanceFunction"] = threading.Event()
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["started"]
    assert lambdas.waiting.acquire(timeout=30)
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["duplicate"]
    # ... after it reserved (held right after its reservation): the run is at
    # the next attempt ...
    reserved, after_gate = threading.Event(), threading.Event()
    take = app.take_attempt

    def take_then_wait(*args: Any) -> Any:
        refused = take(*args)
        reserved.set()
        after_gate.wait(timeout=60)
        return refused

    monkeypatch.setattr(app, "take_attempt", take_then_wait)
    del lambdas.gates["AdvanceFunction"]
    before_gate.set()
    assert reserved.wait(timeout=30)
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["skipped"]
    after_gate.set()
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    # ... and after it finished.
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["skipped"]

    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED",
                                  execution_name(run_id, 2): "SUCCEEDED"}
    assert len(lambdas.calls("AdvanceFunction")) == 2
    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 2
