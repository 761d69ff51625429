"""Runs that end outside Advance are announced too, and a reconciler pass ends in time.

A client subscribed to `run-finished` (the README's rule, here delivering to
a queue) hears of a run the reconciler suspended as `crash-loop` and of a run
cancelled through the HTTP API, as of any run Advance ends. The reconciler
takes no new run once its Lambda has less than `PASS_MARGIN_SECONDS` left;
the next pass picks up what it left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aws_stack import Deployment, FakeContext, http_event, sample_event
from test_events import RUN_FINISHED, messages, subscribe

from agent_runtime import RunStatus
from functions.executions import execution_name
from functions.reconciler import app as reconciler

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
ECHO = {"model": "scripted/echo"}
GONE = "arn:aws:states:us-east-1:123456789012:execution:run:never-started-a1"

pytestmark = pytest.mark.slow


def test_a_run_the_reconciler_suspends_is_announced(deployment: Deployment) -> None:
    deployment.configure(max_takeovers=0)
    client = subscribe(deployment, RUN_FINISHED)
    store, clock = deployment.services.store, deployment.clock
    run_id = deployment.services.runtime().create_run(
        manifest=MANIFESTS / "hello.agent.yaml", options=ECHO).run_id
    # Leased to an execution Step Functions does not know: its owner is gone.
    store.resume_run(run_id, owner=GONE, now=clock.now(), lease_seconds=60)
    clock.advance(61)

    answer = deployment.stack.invoke("ReconcilerFunction",
                                     sample_event("scheduled-reconcile.json"))
    assert answer["counts"]["suspended_runs"] == 1
    (event,) = messages(deployment.stack.sqs, client)
    assert event["detail"] == {"run_id": run_id, "attempt": 1, "status": "suspended",
                               "reason": "crash-loop"}


def test_a_run_cancelled_through_the_api_is_announced(deployment: Deployment) -> None:
    client = subscribe(deployment, RUN_FINISHED)
    created = deployment.stack.call_api(http_event("api-start-run.json"))
    assert created.status == 201, created.body
    run_id = created.body["run"]["runId"]

    cancelled = deployment.stack.call_api(http_event("api-cancel.json", runId=run_id))
    assert cancelled.status == 200, cancelled.body
    (event,) = messages(deployment.stack.sqs, client)
    assert event["detail"]["run_id"] == run_id and event["detail"]["status"] == "cancelled"
    assert event["detail"]["tenant"] == created.body["run"]["tenant"]


@dataclass
class RunningOut(FakeContext):
    """A Lambda context whose time left is read from `left_ms`, one value per call."""

    left_ms: list[int] = field(default_factory=list)

    def get_remaining_time_in_millis(self) -> int:
        return self.left_ms.pop(0) if len(self.left_ms) > 1 else self.left_ms[0]


def test_a_reconciler_pass_stops_taking_runs_before_its_timeout(
        deployment: Deployment) -> None:
    runtime = deployment.services.runtime()
    queued = [runtime.create_run(manifest=MANIFESTS / "hello.agent.yaml",
                                 options=ECHO).run_id for _ in range(2)]
    deployment.clock.advance(deployment.services.settings.queued_seconds + 1)
    margin_ms = reconciler.PASS_MARGIN_SECONDS * 1000

    # Time for one run, then less than the margin.
    context: Any = RunningOut("ReconcilerFunction", 50_000,
                              left_ms=[margin_ms + 1, margin_ms - 1])
    answer = reconciler.handler(sample_event("scheduled-reconcile.json"), context)
    assert answer["cut_short"] is True
    assert (answer["counts"]["candidates"], answer["counts"]["resumed"]) == (1, 1)

    # The next pass, with time, takes the other.
    answer = reconciler.handler(sample_event("scheduled-reconcile.json"),
                                FakeContext("ReconcilerFunction", 50_000))
    assert answer["cut_short"] is False and answer["counts"]["resumed"] == 1
    for run_id in queued:
        assert deployment.stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
        done = deployment.services.store.load_run(run_id)
        assert done is not None and done.status is RunStatus.COMPLETED
