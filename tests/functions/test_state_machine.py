"""The run state machine end to end under moto: Reserve -> Advance (-> Advance ...) -> end.

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
from aws_stack import Deployment, sample_event

from agent_runtime import AgentRuntime, RunStatus
from functions.executions import execution_name
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
    # Reserve leased the attempt to the execution; the tasks' payloads have
    # events/reserve.json's and events/advance.json's shape.
    first = stack.execution_arn(execution_name(run_id, 1))
    (reserve,) = stack.lambdas.calls("ReserveFunction")
    assert reserve.event == sample_event("reserve.json", run_id=run_id, execution_arn=first)
    (advance,) = stack.lambdas.calls("AdvanceFunction")
    assert advance.event == sample_event("advance.json", run_id=run_id, execution_arn=first)

    AgentRuntime(store=store).approve(run_id)
    stack.put_resume_request(run_id, attempt=suspended.attempt, reason="approval-recorded")
    (resumed,) = stack.deliver_resume_requests()
    assert resumed["status"] == "started" and resumed["attempt"] == 2
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"

    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 2
    assert done.output == reference_output(MANIFESTS / "approval.agent.yaml", approve=True)
    functions = [call.function for call in stack.lambdas.invocations]
    assert functions == ["StartFunction", "ReserveFunction", "AdvanceFunction",
                         "StartFunction", "ReserveFunction", "AdvanceFunction"]
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
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"

    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 1
    assert done.output == reference_output(manifest)
    statuses = [call.result["status"] for call in lambdas.calls("AdvanceFunction")]
    assert statuses[-1] == "completed" and set(statuses[:-1]) == {"continue"}
    # One slice per commit point: each step's checkpoint, the last step's being the
    # final one (the prompt chain's three steps).
    assert len(statuses) == len(store.list_checkpoints(run_id))
    assert len(statuses) == 3


def test_a_duplicate_resume_requested_event_starts_no_second_execution(
        deployment: Deployment) -> None:
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
    # (held at Reserve): Step Functions has it under the same name ...
    reserve_gate = lambdas.gates["ReserveFunction"] = threading.Event()
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["started"]
    assert lambdas.waiting.acquire(timeout=30)
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["duplicate"]
    # ... after it reserved (held at Advance): the run is at the next attempt ...
    advance_gate = lambdas.gates["AdvanceFunction"] = threading.Event()
    reserve_gate.set()
    assert lambdas.waiting.acquire(timeout=30)
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["skipped"]
    advance_gate.set()
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    # ... and after it finished.
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    assert [a["status"] for a in stack.deliver_resume_requests()] == ["skipped"]

    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED",
                                  execution_name(run_id, 2): "SUCCEEDED"}
    assert len(lambdas.calls("ReserveFunction")) == 2
    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 2
