"""An attempt as a chain of one-slice executions, under moto: what the hand-over keeps.

Each Advance has less time left than the margin, so each slice stops at its
first commit point and hands the attempt to the next slice's execution
(stores/dynamodb/slices.py). The tests break the chain where it can break —
between the hand-over and the start, at a duplicate invocation, while the
next slice waits for Lambda, with a child left running under an earlier
slice's execution — and check that the reconciler takes over exactly the runs
whose owner is gone, never one a live slice holds, and that the attempt keeps
its capacity slot and its token limit from slice to slice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from advance_slices import slice_arn, transitions, wait_for_chain
from aws_stack import Deployment, FakeContext, LambdaCrash, sample_event
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import (
    WaitFunction,
)

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.owner_liveness import Liveness
from agent_runtime.steps.subrun import child_run_id_for
from functions.capacity import slots_of
from functions.executions import execution_name
from functions.reconciler.executions import ExecutionLiveness
from functions.resume_requests import ResumeRequested, request_resume
from functions.step import app, ownership
from stores.records import ParentRef

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
CHAIN = MANIFESTS / "prompt-chain.agent.yaml"  # three prompts: three slices here
ECHO = {"model": "scripted/echo"}

pytestmark = pytest.mark.slow


@pytest.fixture
def short_slices(deployment: Deployment) -> Deployment:
    """Every Advance has less time left than the margin: a slice per commit point."""
    margin_ms = deployment.services.settings.advance_margin_seconds * 1000
    deployment.lambdas.remaining_ms["AdvanceFunction"] = int(margin_ms) - 1
    return deployment


class _NoSleep:
    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(0.005)


@pytest.fixture
def instant_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state machine's retry intervals and Wait states pass at once."""
    monkeypatch.setattr(retrier_decl, "time", _NoSleep)
    monkeypatch.setattr(WaitFunction, "_wait_interval",
                        lambda self, env, wait_seconds: time.sleep(0.005))


def start(deployment: Deployment, manifest: Path | dict[str, Any] = CHAIN) -> str:
    run_id = deployment.services.runtime().create_run(manifest=manifest, options=ECHO).run_id
    deployment.stack.put_resume_request(run_id, attempt=0, reason="run-created")
    deployment.stack.deliver_resume_requests()
    return run_id


def reconcile(deployment: Deployment) -> dict[str, Any]:
    answer: dict[str, Any] = deployment.stack.invoke("ReconcilerFunction",
                                                     sample_event("scheduled-reconcile.json"))
    return answer


def past_the_lease(deployment: Deployment) -> None:
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)


def later_slices_wait(deployment: Deployment) -> tuple[threading.Event, threading.Event]:
    """Advance of a later slice waits at a gate (as if Lambda had not run it yet):
    (reached, gate)."""
    lambdas = deployment.lambdas
    advance = lambdas.handlers["AdvanceFunction"]
    reached, gate = threading.Event(), threading.Event()

    def waiting(event: Any, context: Any) -> Any:
        if event["input"].get("slice", 1) > 1:
            reached.set()
            gate.wait(timeout=60)
        return advance(event, context)

    lambdas.handlers["AdvanceFunction"] = waiting
    return reached, gate


def completed(deployment: Deployment, run_id: str, attempt: int) -> None:
    done = deployment.services.store.load_run(run_id)
    assert done is not None
    assert (done.status, done.attempt, done.takeovers) == (RunStatus.COMPLETED, attempt, 0)


# -- the hand-over ---------------------------------------------------------------


def _died(*args: Any, **kwargs: Any) -> Any:
    raise LambdaCrash("killed between the hand-over and the start")


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "unavailable"}},
                      "StartExecution")


@pytest.mark.parametrize("failure", [_died, _refused], ids=["died", "start-refused"])
def test_a_slice_that_handed_over_but_started_nothing_is_a_crash_once_the_lease_expires(
        short_slices: Deployment, monkeypatch: pytest.MonkeyPatch,
        failure: Callable[..., Any]) -> None:
    deployment = short_slices
    stack, store = deployment.stack, deployment.services.store
    start_slice = ownership.start_slice
    monkeypatch.setattr(ownership, "start_slice", failure)
    run_id = start(deployment)
    assert stack.wait_for(execution_name(run_id, 1))["status"] == "FAILED"
    # The lease names the next slice's execution, which was never started.
    orphan = store.load_run(run_id)
    assert orphan is not None and orphan.status is RunStatus.RUNNING
    assert orphan.lease_owner == slice_arn(stack, run_id, 1, 2)
    assert stack.executions() == {execution_name(run_id, 1): "FAILED"}
    owner = ExecutionLiveness(stack.stepfunctions)(orphan)
    assert (owner.liveness, owner.detail) == (Liveness.GONE, "the owner execution does not exist")

    # Not before the lease (renewed by the hand-over) has expired, ...
    assert reconcile(deployment)["counts"]["candidates"] == 0
    monkeypatch.setattr(ownership, "start_slice", start_slice)
    past_the_lease(deployment)
    # ... then taken over as after any crash: a new attempt, from the checkpoint.
    assert reconcile(deployment)["counts"]["resumed"] == 1
    chain = wait_for_chain(stack, run_id, 2)
    assert {execution["status"] for execution in chain} == {"SUCCEEDED"}
    completed(deployment, run_id, attempt=2)


def test_a_late_duplicate_of_a_slice_leaves_the_attempt_and_its_slot_to_the_next(
        short_slices: Deployment) -> None:
    """A slot belongs to the attempt, not to an execution: it passes from slice to
    slice, and a duplicate of an earlier slice ends without freeing it."""
    deployment = short_slices
    stack, clock = deployment.stack, deployment.clock
    deployment.configure(max_concurrent_runs=1)
    reached, gate = later_slices_wait(deployment)
    run_id = start(deployment)
    assert reached.wait(timeout=30)  # handed over, the second slice not yet running
    slots = slots_of(deployment.services)
    assert slots.admit("another", 1, now=clock.now()) is not None  # full: the attempt's

    # The first slice again (Step Functions retried it, its response lost): it ends,
    # leaving the attempt to the second slice and the slot with the attempt.
    first = stack.lambdas.calls("AdvanceFunction")[0]
    answer = app.advance(first.event, FakeContext("AdvanceFunction", 900_000))
    assert answer["status"] == "superseded"
    assert slots_of(deployment.services).admit("another", 1, now=clock.now()) is not None
    handed = deployment.services.store.load_run(run_id)
    assert handed is not None and handed.lease_owner == slice_arn(stack, run_id, 1, 2)

    gate.set()
    assert {execution["status"] for execution in wait_for_chain(stack, run_id, 1)} == {
        "SUCCEEDED"}
    completed(deployment, run_id, attempt=1)
    # The attempt ended: its slot is free.
    assert slots_of(deployment.services).admit("another", 1, now=clock.now()) is None


def test_a_next_slice_that_lambda_throttles_is_a_live_owner_and_never_taken_over(
        short_slices: Deployment, instant_retries: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = short_slices
    stack, lambdas = deployment.stack, deployment.lambdas
    hand_over = app.hand_over
    waiting = threading.Event()

    def throttling_the_next(*args: Any) -> str:
        # More throttles than the task's retries: the second slice's execution goes
        # round its Wait state; it waits until the test has run a pass.
        if not lambdas.throttled:
            lambdas.throttle_next["AdvanceFunction"] = 1_000_000
        status = hand_over(*args)
        waiting.set()
        return status

    monkeypatch.setattr(app, "hand_over", throttling_the_next)
    run_id = start(deployment)
    assert waiting.wait(timeout=30)
    deadline = time.monotonic() + 60
    while lambdas.throttled.get("AdvanceFunction", 0) < 7:  # past the retries, waiting
        assert time.monotonic() < deadline
        time.sleep(0.01)
    past_the_lease(deployment)
    counts = reconcile(deployment)["counts"]
    assert (counts["skipped"], counts["resumed"], counts["suspended_runs"]) == (1, 0, 0)
    monkeypatch.setattr(app, "hand_over", hand_over)
    lambdas.throttle_next["AdvanceFunction"] = 0

    chain = wait_for_chain(stack, run_id, 1)
    assert {execution["status"] for execution in chain} == {"SUCCEEDED"}
    assert "AdvanceThrottled" in transitions(stack, chain[1]["executionArn"])
    completed(deployment, run_id, attempt=1)


# -- a duplicate invocation ---------------------------------------------------------


def test_a_duplicate_invocation_ends_its_execution_and_its_live_sibling_goes_on(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step Functions retries a slice whose response it lost while the first
    invocation still runs: the retry finds its sibling holding the attempt and ends
    the execution (`held`); the sibling finishes the run. Meanwhile the lease names
    an execution that has ended, and the reconciler, which looks only at expired
    leases, leaves the run to the sibling renewing it."""
    stack, lambdas, store = deployment.stack, deployment.lambdas, deployment.services.store
    take = app.take_attempt
    holding, gate = threading.Event(), threading.Event()
    sibling: dict[str, Any] = {}

    def first_holds_on(services: Any, request: Any, owner: str) -> str | None:
        refused = take(services, request, owner)
        if not holding.is_set():
            holding.set()
            gate.wait(timeout=60)
        return refused

    monkeypatch.setattr(app, "take_attempt", first_holds_on)
    advance = lambdas.handlers["AdvanceFunction"]
    lambdas.faults["AdvanceFunction"] = ["Lambda.ServiceException"]

    def response_lost_while_running(event: Any, context: Any) -> Any:
        if not sibling:  # the first invocation runs on; Step Functions hears an error
            thread = threading.Thread(target=lambda: sibling.update(
                answer=advance(event, FakeContext("AdvanceFunction", 900_000))))
            sibling["thread"] = thread
            thread.start()
            assert holding.wait(timeout=30)
            return {}
        return advance(event, context)

    lambdas.handlers["AdvanceFunction"] = response_lost_while_running
    run_id = start(deployment, MANIFESTS / "hello.agent.yaml")
    ended = stack.wait_for(execution_name(run_id, 1))
    assert ended["status"] == "SUCCEEDED" and '"held"' in ended["output"]
    held = store.load_run(run_id)
    assert held is not None and held.status is RunStatus.RUNNING
    assert held.lease_owner is not None and held.lease_owner.startswith(ended["executionArn"])
    assert reconcile(deployment)["counts"]["candidates"] == 0  # its lease is live

    gate.set()
    sibling["thread"].join(timeout=60)
    assert sibling["answer"]["status"] == "completed"
    completed(deployment, run_id, attempt=1)
    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED"}


# -- what every slice carries --------------------------------------------------------


def test_a_new_token_limit_reaches_every_slice_of_the_attempt(
        short_slices: Deployment) -> None:
    deployment = short_slices
    stack, store = deployment.stack, deployment.services.store
    run_id = deployment.services.runtime().create_run(manifest=CHAIN, options=ECHO).run_id
    request_resume(stack.events, ResumeRequested(run_id=run_id, attempt=0, reason="run-created",
                                                 max_total_tokens=123_456),
                   bus=stack.environment["AGENT_RUNTIME_EVENT_BUS"])
    stack.deliver_resume_requests()
    chain = wait_for_chain(stack, run_id, 1)
    assert len(chain) == 3
    limits = [call.event["input"]["max_total_tokens"]
              for call in deployment.lambdas.calls("AdvanceFunction")]
    assert limits == [123_456] * 3
    latest = store.load_latest_checkpoint(run_id)
    assert latest is not None and latest.budget.max_total_tokens == 123_456
    completed(deployment, run_id, attempt=1)


# -- sub-runs -----------------------------------------------------------------------------


def test_a_child_left_running_under_an_earlier_slice_s_execution_is_taken_over(
        short_slices: Deployment) -> None:
    """A child runs to its suspension or end inside its parent's slice, so no hand-over
    leaves one running; one left so (its slice's Lambda died with it, say) is leased
    to an execution that has ended. The parent's next slice finds it running under
    a live lease and suspends on it; once that lease expires the reconciler takes
    the child over, and the child's end resumes the parent."""
    deployment = short_slices
    stack, store = deployment.stack, deployment.services.store
    child = {"schemaVersion": "1.0", "id": "child", "name": "Child",
             "steps": [{"id": "c1", "type": "prompt", "prompt": "Child one."},
                       {"id": "c2", "type": "prompt", "prompt": "Child two.",
                        "includeInFinalOutput": True}]}
    parent = {"schemaVersion": "1.0", "id": "parent", "name": "Parent",
              "steps": [{"id": "delegate", "type": "sub-run", "manifest": child,
                         "outputVariable": "delegated", "includeInFinalOutput": True}]}
    reached, gate = later_slices_wait(deployment)
    run_id = start(deployment, parent)
    # The first slice saved the child's id (its first commit point) and handed over.
    assert reached.wait(timeout=30)
    first = stack.wait_for(execution_name(run_id, 1))
    assert first["status"] == "SUCCEEDED"
    # The child, as that slice would have left it had it died running it: created and
    # reserved by the slice's execution (the runtime's owner), never finished.
    child_id = child_run_id_for(run_id, "delegate")
    runtime = AgentRuntime(store=store, clock=deployment.clock, owner=first["executionArn"])
    record, _ = runtime.new_run(manifest=child, run_id=child_id, options=ECHO,
                                parent=ParentRef(run_id=run_id, step_path="delegate"))
    store.create_run(record)
    store.resume_run(child_id, owner=first["executionArn"], now=deployment.clock.now(),
                     lease_seconds=deployment.services.settings.lease_seconds)

    gate.set()
    assert stack.wait_for(execution_name(run_id, 1, slice_=2))["status"] == "SUCCEEDED"
    waiting = store.load_run(run_id)
    assert waiting is not None and waiting.status is RunStatus.SUSPENDED
    assert waiting.suspension is not None and waiting.suspension.reason == "sub-run"
    assert waiting.suspension.details["child_reason"] == "running"
    # The child's lease is live: nobody takes it over yet.
    assert reconcile(deployment)["counts"]["candidates"] == 0

    past_the_lease(deployment)
    assert reconcile(deployment)["counts"]["resumed"] == 1  # the child, its owner gone
    assert {e["status"] for e in wait_for_chain(stack, child_id, 2)} == {"SUCCEEDED"}
    # Its end asked for the parent's resume; the rule delivers it.
    (resumed,) = stack.deliver_resume_requests()
    assert resumed["status"] == "started"
    assert {e["status"] for e in wait_for_chain(stack, run_id, 2)} == {"SUCCEEDED"}
    done, child_done = store.load_run(run_id), store.load_run(child_id)
    assert done is not None and child_done is not None
    assert (child_done.status, child_done.attempt) == (RunStatus.COMPLETED, 2)
    assert done.status is RunStatus.COMPLETED and done.output == child_done.output
