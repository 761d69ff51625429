"""What a reconciler pass costs follows the work that is due, not the runs that wait.

Issue 32, acceptance 2, under moto with the real reconciler handler: N (0,
100, 1,000, 10,000) runs suspended waiting for an approval nobody gave, 100
runs whose approval was recorded but whose resume was lost (due), and a
sub-run parent whose child finished. Its id sorts after every other run, so
a pass that read runs in id order and was cut short would never reach it.
Step Functions starts the executions the pass asks for and runs none of them
(`IDLE_CONFIG`), so what is counted is the pass alone: every DynamoDB and
Step Functions request, with botocore's `before-call` hook, and the items
its Queries read.

The waiting runs are written as the store lays them out, with BatchWriteItem
(tests/stores/aws/seeding.py): a backlog of thousands is seeded in seconds.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from aws_stack import Deployment, sample_event
from conftest import IDLE_CONFIG, deployed

from functions.executions import execution_name
from stores.records import ParentRef, RunRecord, RunStatus, Suspension
from stores.transitions import APPROVAL_RECORDED
from tests.stores.aws.seeding import seed

pytestmark = pytest.mark.slow

DUE = 100
PARENT = "zz-parent"  # after every other run id
CHILD = f"{PARENT}.sub-delegate"
MANIFEST = {"schemaVersion": "1.0", "id": "confirm", "variables": [],
            "steps": [{"id": "confirm", "type": "approval", "prompt": "Go?"}]}


@contextmanager
def counted(deployment: Deployment) -> Iterator[Counter[str]]:
    """Every request the handlers' DynamoDB and Step Functions clients make
    ("dynamodb:Query", ...), and "items read by Query" (what their Queries returned)."""
    made: Counter[str] = Counter()
    lock = threading.Lock()  # the status index's partitions are queried from threads
    clients = [deployment.services.store.client, deployment.services.stepfunctions]

    def before(model: Any, **_: Any) -> None:
        with lock:
            made[f"{model.service_model.service_name}:{model.name}"] += 1

    def after(parsed: dict[str, Any], **_: Any) -> None:
        with lock:
            made["items read by Query"] += len(parsed.get("Items", []))

    for client in clients:
        client.meta.events.register("before-call", before)
    clients[0].meta.events.register("after-call.dynamodb.Query", after)
    try:
        yield made
    finally:
        for client in clients:
            client.meta.events.unregister("before-call", before)
        clients[0].meta.events.unregister("after-call.dynamodb.Query", after)


def suspended(run_id: str, deployment: Deployment, *, reason: str = "approval",
              details: dict[str, Any] | None = None, **fields: Any) -> RunRecord:
    """A run suspended an hour ago by its first attempt."""
    then = deployment.clock.now() - timedelta(hours=1)
    return RunRecord(run_id=run_id, manifest_hash="sha256:" + "ab" * 32, manifest=MANIFEST,
                     status=RunStatus.SUSPENDED, attempt=1, checkpoint_seq=None,
                     suspension=Suspension(reason=reason, details=details or {
                         "approval_id": f"{run_id}:confirm", "prompt": "Go?",
                         "step_path": "confirm"}),
                     created_at=then, updated_at=then, **fields)


def backlog(deployment: Deployment, waiting: int) -> None:
    """`waiting` runs no one answered, `DUE` runs whose recorded approval nobody
    acted on, and a sub-run parent whose child then finished."""
    requested = deployment.clock.now() - timedelta(minutes=5)
    seed(deployment.services.store, [
        *(suspended(f"a-waiting-{n:05d}", deployment) for n in range(waiting)),
        *(suspended(f"m-due-{n:03d}", deployment, resume_requested_at=requested,
                    resume_reason=APPROVAL_RECORDED) for n in range(DUE)),
        suspended(PARENT, deployment, reason="sub-run",
                  details={"child_run_id": CHILD, "child_reason": "approval",
                           "step_path": "delegate"}),
        suspended(CHILD, deployment, parent=ParentRef(run_id=PARENT, step_path="delegate"))])
    # The child is answered and finishes elsewhere; nothing tells the parent but the store.
    store, clock = deployment.services.store, deployment.clock
    child = store.resume_run(CHILD, owner="elsewhere", now=clock.now(), lease_seconds=60)
    store.complete_run(CHILD, expected_attempt=child.attempt, output="yes", at=clock.now())
    clock.advance(deployment.services.settings.resume_grace_seconds + 1)


def reconcile(deployment: Deployment) -> dict[str, Any]:
    answer: dict[str, Any] = deployment.stack.invoke("ReconcilerFunction",
                                                     sample_event("scheduled-reconcile.json"))
    return answer


def one_pass(monkeypatch: pytest.MonkeyPatch, waiting: int,
             check: Callable[[Deployment, dict[str, Any]], None]) -> Counter[str]:
    """The requests of one pass over `backlog(waiting)`, in a stack of its own."""
    with contextmanager(deployed)(monkeypatch, IDLE_CONFIG, executing=False) as deployment:
        deployment.configure(max_concurrent_runs=500)
        backlog(deployment, waiting)
        with counted(deployment) as made:
            answer = reconcile(deployment)
        check(deployment, answer)
        return made


def every_due_run_started(deployment: Deployment, answer: dict[str, Any]) -> None:
    assert answer["cut_short"] is False
    assert answer["counts"] == {"candidates": DUE + 1, "resumed": DUE + 1, "skipped": 0,
                                "suspended_runs": 0, "errors": 0}
    stack = deployment.stack
    started = [execution["name"] for page in stack.stepfunctions.get_paginator(
        "list_executions").paginate(stateMachineArn=stack.state_machine_arn)
        for execution in page["executions"]]
    assert execution_name(PARENT, 2) in started  # the parent resumed on this pass
    assert len(started) == DUE + 1


def test_a_pass_costs_what_is_due_whatever_the_number_of_waiting_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    figures = {waiting: one_pass(monkeypatch, waiting, every_due_run_started)
               for waiting in (0, 100, 1_000, 10_000)}  # 10,000: ~30 s of seeding
    print({waiting: dict(made) for waiting, made in figures.items()})  # the closing note's
    for waiting in (100, 1_000, 10_000):
        assert figures[waiting] == figures[0], waiting
    requests = sum(count for name, count in figures[0].items() if ":" in name)
    assert requests <= 4 * (DUE + 1) + 100, figures[0]


def test_a_parent_an_earlier_release_left_without_a_request_is_found_by_the_sweep(
        idle_deployment: Deployment) -> None:
    """Before this release a child's end filed nothing in the store, and passes found
    its parent by reading every suspended run. Such a parent is found once, by a
    pass invoked with `sweepSubRunParents`; the scheduled passes never read it."""
    deployment = idle_deployment
    clock = deployment.clock
    ended = clock.now() - timedelta(minutes=10)
    seed(deployment.services.store, [
        *(suspended(f"a-waiting-{n:02d}", deployment) for n in range(20)),
        suspended(PARENT, deployment, reason="sub-run",
                  details={"child_run_id": CHILD, "step_path": "delegate"}),
        RunRecord(run_id=CHILD, manifest_hash="sha256:" + "ab" * 32, manifest=MANIFEST,
                  status=RunStatus.COMPLETED, attempt=2, output="yes",
                  parent=ParentRef(run_id=PARENT, step_path="delegate"),
                  created_at=ended, updated_at=ended)])
    with counted(deployment) as scheduled:
        assert reconcile(deployment)["counts"]["candidates"] == 0
    assert scheduled["dynamodb:BatchGetItem"] == 0  # no run read, suspended or not

    sweep = {**sample_event("scheduled-reconcile.json"), "sweepSubRunParents": True}
    lambdas = deployment.lambdas
    full = lambdas.remaining_ms["ReconcilerFunction"]
    lambdas.remaining_ms["ReconcilerFunction"] = 5_000  # too little left to look at a run
    answer = deployment.stack.invoke("ReconcilerFunction", sweep)
    assert answer["sweep"] == {"filed": 0, "complete": False, "after": None}
    lambdas.remaining_ms["ReconcilerFunction"] = full
    answer = deployment.stack.invoke("ReconcilerFunction", {**sweep, "sweepAfter": None})
    assert answer["sweep"] == {"filed": 1, "complete": True, "after": PARENT}
    assert answer["counts"] == {"candidates": 1, "resumed": 1, "skipped": 0,
                                "suspended_runs": 0, "errors": 0}
    parent = deployment.services.store.load_run(PARENT)
    assert parent is not None and parent.resume_reason == "sub-run-finished"
    assert list(deployment.stack.executions()) == [execution_name(PARENT, 2)]
