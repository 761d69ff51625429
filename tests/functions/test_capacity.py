"""Capacity: with `MaxConcurrentRuns` runs running, a new run waits queued, never failed.

Under moto with the real start function, reconciler and state machine: the
limit is 1 and one run holds it (reserved by an execution that is still
working on it). A new run's run-created event is delivered: the start
function leaves it `created` and starts no execution, and a reconciler pass
while the limit holds leaves it so too (without reading it: the pass has no
room). Once the running run has finished, the next pass starts the queued
run and it completes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_stack import Deployment, sample_event

from agent_runtime import RunStatus
from functions.executions import execution_name
from stores.records import RunError

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}
WORKING = "arn:aws:states:us-east-1:123456789012:execution:run:busy-a1"

pytestmark = pytest.mark.slow


def reconcile(deployment: Deployment) -> dict[str, Any]:
    answer: dict[str, Any] = deployment.stack.invoke("ReconcilerFunction",
                                                     sample_event("scheduled-reconcile.json"))
    return answer


def test_a_run_beyond_max_concurrent_runs_stays_queued_and_starts_when_capacity_frees(
        deployment: Deployment) -> None:
    stack, store, clock = deployment.stack, deployment.services.store, deployment.clock
    deployment.configure(max_concurrent_runs=1)
    runtime = deployment.services.runtime()
    busy = runtime.create_run(manifest=MANIFESTS / "hello.agent.yaml", options=ECHO).run_id
    # Held by an execution still working on it (its lease renewed as it goes).
    store.resume_run(busy, owner=WORKING, now=clock.now(), lease_seconds=3600)

    queued = runtime.create_run(manifest=MANIFESTS / "hello.agent.yaml", options=ECHO).run_id
    stack.put_resume_request(queued, attempt=0, reason="run-created")
    answers = stack.deliver_resume_requests()
    assert [answer["status"] for answer in answers] == ["queued"]
    assert stack.executions() == {}

    # Queued longer than the reconciler waits for the fast path: still no room, and
    # the pass, counting the running runs once, does not even list the queue.
    clock.advance(deployment.services.settings.queued_seconds + 1)
    answer = reconcile(deployment)
    assert answer["counts"]["candidates"] == 0
    assert answer["deferred"] == "no room for more resumes or starts this pass"
    waiting = store.load_run(queued)
    assert waiting is not None and waiting.status is RunStatus.CREATED
    assert stack.executions() == {}

    # The running run ends: the next pass starts the queued one.
    store.fail_run(busy, expected_attempt=1, at=clock.now(),
                   error=RunError(type="done_elsewhere", message="finished by its owner"))
    assert reconcile(deployment)["counts"]["resumed"] == 1
    assert stack.wait_for(execution_name(queued, 1))["status"] == "SUCCEEDED"
    done = store.load_run(queued)
    assert done is not None and done.status is RunStatus.COMPLETED and done.takeovers == 0
