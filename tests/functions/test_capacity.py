"""Capacity: admission is atomic, a run beyond `MaxConcurrentRuns` waits queued, and
throttling is never a takeover and never fails a run (docs/design.md section 10).

Under moto with the real API, start function, reconciler and state machine.
Advance has its reserved concurrency (`Lambdas.reserved`): an invocation
beyond it is throttled as Lambda throttles. The state machine's retry
intervals and Wait states take no time (`no_waits`): the fake clock moves
only when a test moves it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_stack import Deployment, http_event, sample_event
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import (
    WaitFunction,
)

from agent_runtime import RunStatus
from functions.api.tenant_requests import REQUESTS_PER_MINUTE
from functions.capacity import slots_of
from functions.executions import execution_name
from stores.base import RunStore
from stores.records import RunError
from tests import moto_dynamodb, moto_sqs

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
HELLO = MANIFESTS / "hello.agent.yaml"
ECHO = {"model": "scripted/echo"}
WORKING = "arn:aws:states:us-east-1:123456789012:execution:run:busy-a1"
# The acceptance figure is 2,000 runs; the default keeps the suite quick
# (AGENT_RUNTIME_BURST_RUNS=2000 runs the full burst).
BURST_RUNS = int(os.environ.get("AGENT_RUNTIME_BURST_RUNS", "100"))
LIMIT = 10

pytestmark = pytest.mark.slow


class _NoSleep:
    """The `time` the state machine's retriers see: an interval passes at once
    (a moment of real time, so a throttled execution does not spin)."""

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(0.005)


@pytest.fixture
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrier_decl, "time", _NoSleep)
    monkeypatch.setattr(WaitFunction, "_wait_interval",
                        lambda self, env, wait_seconds: time.sleep(0.005))


def finished(store: RunStore, run_id: str) -> None:
    """Wait (real time, generously) until the run has ended."""
    deadline = time.monotonic() + 600
    while (record := store.load_run(run_id)) is None or not record.status.terminal:
        assert time.monotonic() < deadline, f"run {run_id} still not finished"
        time.sleep(0.02)


def reconcile(deployment: Deployment) -> dict[str, Any]:
    answer: dict[str, Any] = deployment.stack.invoke("ReconcilerFunction",
                                                     sample_event("scheduled-reconcile.json"))
    return answer


def test_a_run_beyond_max_concurrent_runs_stays_queued_and_starts_when_a_slot_frees(
        deployment: Deployment) -> None:
    stack, store, clock = deployment.stack, deployment.services.store, deployment.clock
    deployment.configure(max_concurrent_runs=1)
    runtime = deployment.services.runtime()
    busy = runtime.create_run(manifest=HELLO, options=ECHO).run_id
    # Admitted and held by an execution still working on it.
    assert slots_of(deployment.services).admit(busy, 1, now=clock.now()) is None
    store.resume_run(busy, owner=WORKING, now=clock.now(), lease_seconds=3600)

    queued = runtime.create_run(manifest=HELLO, options=ECHO).run_id
    stack.put_resume_request(queued, attempt=0, reason="run-created")
    assert [answer["status"] for answer in stack.deliver_resume_requests()] == ["queued"]
    assert stack.executions() == {}

    # Past the slot's first hold: the holder's run still runs under its lease,
    # so the slot stays its own, and the queued run stays created.
    clock.advance(deployment.services.settings.lease_seconds + 1)
    counts = reconcile(deployment)["counts"]
    assert (counts["candidates"], counts["skipped"], counts["resumed"],
            counts["suspended_runs"]) == (1, 1, 0, 0)
    # The slot was renewed for another hold: the next pass finds no room and,
    # reading the slots once, does not even list the queue.
    answer = reconcile(deployment)
    assert answer["counts"]["candidates"] == 0
    assert answer["deferred"] == "no room for more resumes or starts this pass"
    waiting = store.load_run(queued)
    assert waiting is not None and waiting.status is RunStatus.CREATED
    assert stack.executions() == {}

    # The holder ends without releasing its slot (as if its Lambda died after the
    # write): once the slot's hold has passed it frees itself, and the next
    # pass starts the queued run.
    store.fail_run(busy, expected_attempt=1, at=clock.now(),
                   error=RunError(type="done_elsewhere", message="finished by its owner"))
    assert reconcile(deployment)["counts"]["resumed"] == 0  # still within the hold
    clock.advance(deployment.services.settings.lease_seconds + 1)
    assert reconcile(deployment)["counts"]["resumed"] == 1
    assert stack.wait_for(execution_name(queued, 1))["status"] == "SUCCEEDED"
    done = store.load_run(queued)
    assert done is not None and done.status is RunStatus.COMPLETED and done.takeovers == 0
    # Its Advance released the slot when the run completed.
    assert slots_of(deployment.services).admit("another", 1, now=clock.now()) is None


def test_a_throttled_advance_waits_and_advances_again_and_is_never_taken_over(
        deployment: Deployment, no_waits: None) -> None:
    stack, lambdas = deployment.stack, deployment.lambdas
    # More throttles than the state machine's retries: it goes round its Wait.
    lambdas.throttle_next["AdvanceFunction"] = 14
    created = stack.call_api(http_event("api-start-run.json", body={
        "manifest": HELLO.read_text(), "options": ECHO}))
    assert created.status == 201, created.body
    run_id = created.body["run"]["runId"]
    stack.deliver_resume_requests()
    # The lease lapses while it is throttled: a pass finds the execution alive.
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)
    counts = reconcile(deployment)["counts"]
    assert (counts["resumed"], counts["suspended_runs"]) == (0, 0)

    assert stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    assert lambdas.throttled["AdvanceFunction"] == 14
    done = deployment.services.store.load_run(run_id)
    assert done is not None
    assert (done.status, done.attempt, done.takeovers) == (RunStatus.COMPLETED, 1, 0)
    history = stack.stepfunctions.get_execution_history(
        executionArn=stack.execution_arn(execution_name(run_id, 1)), maxResults=1000)
    entered = [event["stateEnteredEventDetails"]["name"] for event in history["events"]
               if "stateEnteredEventDetails" in event]
    assert "AdvanceThrottled" in entered


@pytest.fixture
def moto_at_scale() -> Iterator[None]:
    """moto's transactions linear in the table's size and atomic under threads, its
    Queries reading only the items their key can match, and its queues filled and
    drained without counting their messages at every message (tests/moto_dynamodb.py,
    tests/moto_sqs.py): the burst's time grows with its size, not with its square."""
    with moto_dynamodb.item_rollback(), moto_dynamodb.keyed_queries(), \
            moto_sqs.uncounted_sends_and_receives():
        yield


# A guard against a hung burst, not a speed limit: the suite's per-test timeout
# (pyproject.toml) for the default size, and about 1.5 s a run (a loaded two-core
# machine) when AGENT_RUNTIME_BURST_RUNS asks for a larger one.
@pytest.mark.timeout(max(900, int(BURST_RUNS * 1.5)))
def test_a_burst_past_max_concurrent_runs_completes_every_run_without_a_takeover(
        deployment: Deployment, no_waits: None, moto_at_scale: None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    stack, lambdas, store = deployment.stack, deployment.lambdas, deployment.services.store
    # The API's per-tenant limits would refuse the burst at the door: lifted, so
    # every run reaches the store and the stack's own capacity is what is tried.
    config = tmp_path / "runtime.yaml"
    config.write_text('version: "1.0"\npolicy:\n  maxConcurrentRuns: null\n  runsPerMinute: null\n')
    deployment.configure(config, max_concurrent_runs=LIMIT)
    monkeypatch.setenv(REQUESTS_PER_MINUTE, "0")  # nor count its requests
    lambdas.reserved["AdvanceFunction"] = LIMIT  # throttled whenever more than LIMIT run
    started_at = time.monotonic()
    run_ids = []
    for _ in range(BURST_RUNS):
        created = stack.call_api(http_event("api-start-run.json", body={
            "manifest": HELLO.read_text(), "options": ECHO}))
        assert created.status == 201, created.body
        run_ids.append(created.body["run"]["runId"])
    # The admitted runs' Advances hold on while the whole burst is delivered.
    gate = lambdas.gates["AdvanceFunction"] = threading.Event()
    lambdas.gate_seconds = 3600
    answers = stack.deliver_resume_requests()
    gate.set()
    statuses = [answer["status"] for answer in answers]
    assert (statuses.count("started"), statuses.count("queued")) == (LIMIT, BURST_RUNS - LIMIT)

    passes = 0
    started = [answer["run_id"] for answer in answers if answer["status"] == "started"]
    unfinished = [RunStatus.CREATED, RunStatus.RUNNING, RunStatus.SUSPENDED]
    while True:
        # Until the started runs end (read from the store: moto answers an
        # execution's description by a search through every execution).
        for run_id in started:
            finished(store, run_id)
        passes += 1
        assert passes <= BURST_RUNS + 1, "the backlog does not shrink"
        deployment.clock.advance(deployment.services.settings.queued_seconds + 1)
        summary = reconcile(deployment)
        assert summary["counts"]["suspended_runs"] == summary["counts"]["errors"] == 0
        started = [record.run_id for record in
                   store.list_runs(statuses=[RunStatus.RUNNING], limit=LIMIT + 1).runs]
        # A pass that started nothing, with nothing running: the burst is over,
        # unless something still waits (read only then: listing the whole backlog
        # every pass would cost the test the square of the burst).
        if not started and summary["counts"]["resumed"] == 0 \
                and not store.list_runs(statuses=unfinished, limit=1).runs:
            break

    records = [store.load_run(run_id) for run_id in run_ids]
    for record in records:
        assert record is not None
        # Completed, never failed, started once, never taken over.
        assert (record.status, record.attempt, record.takeovers) == (
            RunStatus.COMPLETED, 1, 0), record.run_id
    assert lambdas.most_running["AdvanceFunction"] <= LIMIT
    elapsed = time.monotonic() - started_at
    print(f"\nburst: {BURST_RUNS} runs, MaxConcurrentRuns {LIMIT}: {passes} reconciler passes, "
          f"{lambdas.throttled.get('AdvanceFunction', 0)} Advance throttles, "
          f"{elapsed:.0f} s under moto")
