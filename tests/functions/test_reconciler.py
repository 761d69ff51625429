"""The scheduled reconciler end to end under moto: a crashed Advance is taken over.

The crash: the Advance function's process dies (a `LambdaCrash`, answered as
Lambda answers a runtime that exited) after a tool call recorded its effect
and before the checkpoint with its result — the worst moment. The execution
fails, the lease is left to run out, and the reconciler (invoked with
events/scheduled-reconcile.json) asks Step Functions about the owner's
execution before it starts the next attempt.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from advance_slices import advance_event, slice_arn, wait_for_chain
from aws_stack import Deployment, LambdaCrash, sample_event

from agent_runtime import AgentRuntime, RunStatus
from functions.executions import execution_name
from stores.dynamodb.slices import execution_of
from stores.dynamodb.store import DynamoDbRunStore
from stores.memory import MemoryRunStore
from stores.records import ParentRef, RunRecord
from tests.functions import lambda_tools
from tests.stores.aws.seeding import seed

pytestmark = pytest.mark.slow

ORDERS = {
    "schemaVersion": "1.0", "id": "orders", "name": "Orders",
    "model": {"provider": "openai", "model": "gpt-5.6"},
    "steps": [
        {"id": "take", "type": "prompt", "prompt": "Record order 42.",
         "tools": ["record_order"], "outputVariable": "taken"},
        {"id": "confirm", "type": "prompt", "prompt": "Confirm {{ taken }}.",
         "includeInFinalOutput": True},
    ],
}
SCRIPT = {"responses": [
    {"toolCalls": [{"name": "record_order", "arguments": {"order_id": "42"}}]},
    {"text": "Order 42 recorded."},
    {"text": "Confirmed: order 42."},
]}


@pytest.fixture
def orders(deployment: Deployment, tmp_path: Path) -> dict[str, Any]:
    """The functions' runtime config names the tool; the run's options name the script."""
    config = tmp_path / "agent-runtime.yaml"
    config.write_text(yaml.safe_dump({
        "version": "1.0", "tools": {"record_order": "tests.functions.lambda_tools:record_order"},
        "policy": {"scriptFiles": [str(tmp_path / "orders.script.yaml")]}}))
    script = tmp_path / "orders.script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    deployment.configure(config)
    lambda_tools.EXECUTIONS.clear()
    return {"model": f"scripted/{script}"}


def reference_output(options: dict[str, Any]) -> Any:
    runtime = AgentRuntime(store=MemoryRunStore(), tools=[lambda_tools.record_order])
    result = runtime.run_sync(manifest=ORDERS, options=options)
    assert result.status is RunStatus.COMPLETED
    lambda_tools.EXECUTIONS.clear()
    return result.output


def crash_after_the_tool(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Kill Advance at the first checkpoint after the tool ran, before it is saved."""
    crashes: list[int] = []
    save = DynamoDbRunStore.save_checkpoint

    def save_checkpoint(store: DynamoDbRunStore, checkpoint: Any, **kwargs: Any) -> None:
        if lambda_tools.EXECUTIONS and not crashes:
            crashes.append(checkpoint.seq)
            raise LambdaCrash("killed after the tool ran, before its result was checkpointed")
        save(store, checkpoint, **kwargs)

    monkeypatch.setattr(DynamoDbRunStore, "save_checkpoint", save_checkpoint)
    return crashes


def start(deployment: Deployment, options: dict[str, Any]) -> str:
    run_id = deployment.services.runtime().create_run(manifest=ORDERS, options=options).run_id
    deployment.stack.put_resume_request(run_id, attempt=0, reason="run-created")
    deployment.stack.deliver_resume_requests()
    return run_id


def reconcile(deployment: Deployment) -> dict[str, Any]:
    answer: dict[str, Any] = deployment.stack.invoke("ReconcilerFunction",
                                                     sample_event("scheduled-reconcile.json"))
    return answer


def test_a_crash_inside_advance_is_taken_over_and_no_effect_runs_twice(
        deployment: Deployment, orders: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    stack, store = deployment.stack, deployment.services.store
    expected = reference_output(orders)
    crashes = crash_after_the_tool(monkeypatch)
    run_id = start(deployment, orders)

    first = stack.wait_for(execution_name(run_id, 1))
    assert crashes and first["status"] == "FAILED" and first["error"] == "Runtime.ExitError"
    crashed = store.load_run(run_id)
    assert crashed is not None and crashed.status is RunStatus.RUNNING
    # Held by the crashed invocation, a slice of the execution.
    assert execution_of(crashed.lease_owner or "") == first["executionArn"]
    assert len(lambda_tools.EXECUTIONS) == 1

    # The lease has not run out: the reconciler has nothing to do yet.
    assert reconcile(deployment)["counts"]["candidates"] == 0
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)
    assert reconcile(deployment)["counts"] == {"candidates": 1, "resumed": 1, "skipped": 0,
                                               "suspended_runs": 0, "errors": 0}

    assert stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    (takeover,) = [call for call in stack.lambdas.calls("AdvanceFunction")
                   if call.event["input"]["attempt"] == 2]
    assert takeover.event == advance_event("advance-takeover.json", run_id=run_id,
                                           execution_arn=stack.execution_arn(
                                               execution_name(run_id, 2)))
    done = store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    # taken over once; the new attempt's checkpoints reset the count (takeovers in a row)
    assert done.attempt == 2 and done.takeovers == 0
    assert done.output == expected
    assert [order for _, order in lambda_tools.EXECUTIONS] == ["42"]  # the effect ran once
    assert stack.executions() == {execution_name(run_id, 1): "FAILED",
                                  execution_name(run_id, 2): "SUCCEEDED"}
    # Nothing left to do.
    deployment.clock.advance(3600)
    assert reconcile(deployment)["counts"]["candidates"] == 0


def test_a_live_execution_is_left_alone(deployment: Deployment,
                                        orders: dict[str, Any]) -> None:
    """The attempt handed over to the next slice's execution, whose Advance has not
    run yet (throttled, say): past the lease, that execution is a live owner."""
    stack, lambdas = deployment.stack, deployment.lambdas
    margin_ms = deployment.services.settings.advance_margin_seconds * 1000
    lambdas.remaining_ms["AdvanceFunction"] = int(margin_ms) - 1  # a slice per commit point
    advance = lambdas.handlers["AdvanceFunction"]
    gate, waiting = threading.Event(), threading.Event()

    def later_slices_wait(event: Any, context: Any) -> Any:
        if event["input"].get("slice", 1) > 1:
            waiting.set()
            gate.wait(timeout=60)
        return advance(event, context)

    lambdas.handlers["AdvanceFunction"] = later_slices_wait
    run_id = start(deployment, orders)
    assert waiting.wait(timeout=30)  # handed over; the second slice not yet running
    handed = deployment.services.store.load_run(run_id)
    assert handed is not None and handed.lease_owner == slice_arn(stack, run_id, 1, 2)
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)

    answer = reconcile(deployment)
    assert answer["counts"] == {"candidates": 1, "resumed": 0, "skipped": 1,
                                "suspended_runs": 0, "errors": 0}
    assert stack.executions() == {execution_name(run_id, 1): "SUCCEEDED",
                                  execution_name(run_id, 1, slice_=2): "RUNNING"}
    gate.set()
    assert {ended["status"] for ended in wait_for_chain(stack, run_id, 1)} == {"SUCCEEDED"}
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 1
    assert done.takeovers == 0


def test_a_run_that_keeps_dying_is_suspended_as_a_crash_loop_never_failed(
        deployment: Deployment, orders: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    deployment.configure(max_takeovers=0)
    crash_after_the_tool(monkeypatch)
    run_id = start(deployment, orders)
    assert deployment.stack.wait_for(execution_name(run_id, 1))["status"] == "FAILED"
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)

    assert reconcile(deployment)["counts"]["suspended_runs"] == 1
    looped = deployment.services.store.load_run(run_id)
    assert looped is not None and looped.status is RunStatus.SUSPENDED and looped.error is None
    assert looped.suspension is not None and looped.suspension.reason == "crash-loop"
    # The engine's verdict on the dead execution is recorded with the suspension.
    assert looped.suspension.details["owner_status"] == (
        "the owner execution ended FAILED (Runtime.ExitError)")
    assert deployment.stack.executions() == {execution_name(run_id, 1): "FAILED"}

    # The cause fixed (the crash happens once), the operator resumes every
    # crash-looped run: its next attempt's execution completes it, count reset.
    answer = deployment.stack.invoke("ReconcilerFunction", {"resumeCrashLooped": True})
    assert (answer["resumed"], answer["deferred"]) == ([run_id], None)
    assert deployment.stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    done = deployment.services.store.load_run(run_id)
    assert done is not None
    assert (done.status, done.attempt, done.takeovers) == (RunStatus.COMPLETED, 2, 0)


def test_a_run_created_but_never_started_is_started_by_the_reconciler(
        deployment: Deployment, orders: dict[str, Any]) -> None:
    run_id = deployment.services.runtime().create_run(manifest=ORDERS, options=orders).run_id
    assert reconcile(deployment)["counts"]["candidates"] == 0  # not queued long enough
    deployment.clock.advance(deployment.services.settings.queued_seconds + 1)
    assert reconcile(deployment)["counts"]["resumed"] == 1
    assert deployment.stack.wait_for(execution_name(run_id, 1))["status"] == "SUCCEEDED"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.takeovers == 0


def test_a_crash_looping_sub_run_is_suspended_and_its_running_parent_left_alone(
        idle_deployment: Deployment) -> None:
    """A crash-looped child is suspended, not ended: its parent, still running, is
    not touched and gets no resume request (a child's end would file one)."""
    deployment = idle_deployment
    store, clock = deployment.services.store, deployment.clock
    gone = deployment.stack.execution_arn("never-started")
    now = clock.now()
    parent = RunRecord(run_id="parent", manifest_hash="sha256:" + "ab" * 32, attempt=1,
                       status=RunStatus.RUNNING, lease_owner=gone,
                       lease_expires_at=now + timedelta(hours=1), created_at=now,
                       updated_at=now)
    child = parent.model_copy(update={
        "run_id": "parent.sub-child", "lease_expires_at": now - timedelta(minutes=1),
        "takeovers": deployment.services.settings.max_takeovers,
        "parent": ParentRef(run_id="parent", step_path="delegate")})
    seed(store, [parent, child])
    answer = reconcile(deployment)
    assert answer["counts"]["suspended_runs"] == 1
    looped = store.load_run("parent.sub-child")
    assert looped is not None and looped.status is RunStatus.SUSPENDED
    assert looped.suspension is not None and looped.suspension.reason == "crash-loop"
    still = store.load_run("parent")
    assert still is not None and still.status is RunStatus.RUNNING
    assert still.resume_requested_at is None
