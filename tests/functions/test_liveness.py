"""No run stuck: the reconciler alone finishes what a lost resume left suspended.

Each test breaks the fast path of a resume — the start function fails, the
child's `PutEvents` for its parent fails (and the step function's own request
for it too: the child's end filed one in the store), the resume execution's
first slice fails before it reserves — and then only invokes the scheduled
reconciler
(events/scheduled-reconcile.json) with the fake clock moved past the grace:
the run completes. The resume outbox is the store's `resume_requested_at`
(docs/design.md sections 5 and 7).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_stack import Deployment, sample_event
from botocore.exceptions import ClientError

from agent_runtime import RunStatus
from functions.executions import execution_name
from functions.step import app

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}

pytestmark = pytest.mark.slow


def reconcile(deployment: Deployment) -> dict[str, Any]:
    answer: dict[str, Any] = deployment.stack.invoke("ReconcilerFunction",
                                                     sample_event("scheduled-reconcile.json"))
    return answer


def past_the_grace(deployment: Deployment) -> None:
    deployment.clock.advance(deployment.services.settings.resume_grace_seconds + 1)


def suspended_for_approval(deployment: Deployment) -> str:
    """An approval run started through the rule and suspended at its approval."""
    stack = deployment.stack
    run_id = deployment.services.runtime().create_run(
        manifest=MANIFESTS / "approval.agent.yaml", options=ECHO).run_id
    stack.put_resume_request(run_id, attempt=0, reason="run-created")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    record = deployment.services.store.load_run(run_id)
    assert record is not None and record.status is RunStatus.SUSPENDED
    return run_id


def assert_completed(deployment: Deployment, run_id: str, attempt: int) -> None:
    done = deployment.services.store.load_run(run_id)
    assert done is not None
    assert (done.status, done.attempt) == (RunStatus.COMPLETED, attempt)
    assert done.resume_requested_at is None
    # Nothing left for the reconciler.
    deployment.clock.advance(3600)
    assert reconcile(deployment)["counts"]["candidates"] == 0


def test_the_start_function_fails_after_the_approval_was_recorded(
        deployment: Deployment) -> None:
    stack, lambdas = deployment.stack, deployment.lambdas
    run_id = suspended_for_approval(deployment)
    deployment.services.runtime().approve(run_id)  # recorded: the request is in the store

    def failing_start(event: Any, ctx: Any) -> Any:
        raise RuntimeError("StartExecution throttled, retries exhausted")

    lambdas.handlers["StartFunction"] = failing_start
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    with pytest.raises(AssertionError, match="StartFunction failed"):
        stack.deliver_resume_requests()
    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED"}

    # Within the grace the fast path may still win: the reconciler waits.
    assert reconcile(deployment)["counts"]["candidates"] == 0
    past_the_grace(deployment)
    assert reconcile(deployment)["counts"] == {"candidates": 1, "resumed": 1, "skipped": 0,
                                               "suspended_runs": 0, "errors": 0}
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    assert_completed(deployment, run_id, attempt=2)


@pytest.mark.parametrize("lost", ["event", "event-and-step-request"])
def test_a_parent_whose_child_finished_is_resumed_when_put_events_fails(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch, lost: str) -> None:
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
    child_id = str(waiting.suspension.details["child_run_id"])

    def refused(**kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "InternalException", "Message": "unavailable"}},
                          "PutEvents")

    monkeypatch.setattr(deployment.services.events, "put_events", refused)
    if lost == "event-and-step-request":
        # The Advance that finished the child files no request of its own: the
        # store's, filed by the child's end, is what is left.
        monkeypatch.setattr(app, "_resume_parent", lambda services, run_id: None)
    deployment.services.runtime().approve(child_id)
    stack.put_resume_request(child_id, attempt=1, reason="approval-recorded")
    stack.deliver_resume_requests()
    assert stack.wait_for(execution_name(child_id, 2))["status"] == "SUCCEEDED"
    child_done = store.load_run(child_id)
    assert child_done is not None and child_done.status is RunStatus.COMPLETED
    assert stack.deliver_resume_requests() == []  # no event reached the rule
    requested = store.load_run(run_id)
    assert requested is not None and requested.status is RunStatus.SUSPENDED
    assert requested.resume_reason == "sub-run-finished"  # the outbox holds the request

    assert reconcile(deployment)["counts"]["candidates"] == 0
    past_the_grace(deployment)
    assert reconcile(deployment)["counts"]["resumed"] == 1
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    assert_completed(deployment, run_id, attempt=2)
    done = store.load_run(run_id)
    assert done is not None and done.output == child_done.output


def test_the_resume_executions_first_slice_fails_before_it_reserves(
        deployment: Deployment) -> None:
    stack, lambdas, store = deployment.stack, deployment.lambdas, deployment.services.store
    run_id = suspended_for_approval(deployment)
    advance = lambdas.handlers["AdvanceFunction"]
    failures: list[int] = []

    def fails_once(event: Any, ctx: Any) -> Any:
        if not failures:
            failures.append(event["input"]["attempt"])
            raise RuntimeError("the table was unavailable")
        return advance(event, ctx)

    lambdas.handlers["AdvanceFunction"] = fails_once
    deployment.services.runtime().approve(run_id)
    stack.put_resume_request(run_id, attempt=1, reason="approval-recorded")
    (started,) = stack.deliver_resume_requests()
    assert started["status"] == "started"
    assert stack.wait_for(execution_name(run_id, 2))["status"] == "FAILED"
    assert failures == [2]
    stuck = store.load_run(run_id)
    assert stuck is not None and (stuck.status, stuck.attempt) == (RunStatus.SUSPENDED, 1)
    assert stuck.resume_requested_at is not None  # no slice served the request

    past_the_grace(deployment)
    assert reconcile(deployment)["counts"]["resumed"] == 1
    # The attempt's first name is taken by the failed execution: the next one runs it.
    assert stack.wait_for(execution_name(run_id, 2, retry=2))["status"] == "SUCCEEDED"
    assert_completed(deployment, run_id, attempt=2)
