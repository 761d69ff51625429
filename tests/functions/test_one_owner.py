"""One owner per attempt: two Advance invocations of one attempt never both act.

Step Functions retries an Advance whose response was lost (a Lambda service
error) while the first invocation may still be running. Each invocation
claims the attempt's lease for itself before executing (its owner is
`<execution ARN>#<request id>`, stores/dynamodb/slices.py) and every write it
makes is conditioned on holding it. The tests interleave a second invocation
deterministically at every commit point of the first (every checkpoint and
effect write, the second run to its end in another thread while the first
waits): the second stops with `held`, ending its execution, having written
nothing and dispatched no effect, and the first completes the run with the
tool called once. A slice that died holding the lease is a crash: its
execution ends and the reconciler takes the run over with a new attempt.

Here the attempt is leased to the execution before its slice runs, as a
hand-over from the slice before leaves it (the slice claims it from there).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
import yaml
from advance_slices import advance_event
from aws_stack import Deployment, FakeContext, LambdaCrash, sample_event

from agent_runtime import RunStatus
from functions.executions import execution_name
from functions.step import app
from stores.dynamodb.store import DynamoDbRunStore
from tests.functions import lambda_tools

pytestmark = pytest.mark.slow

EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:run:one-owner-a1"
ORDERS = {
    "schemaVersion": "1.0", "id": "orders", "name": "Orders",
    "steps": [
        {"id": "take", "type": "prompt", "prompt": "Record order 42.",
         "tools": ["slow_order"], "outputVariable": "taken"},
        {"id": "confirm", "type": "prompt", "prompt": "Confirm {{ taken }}.",
         "includeInFinalOutput": True},
    ],
}
SCRIPT = {"responses": [
    {"toolCalls": [{"name": "slow_order", "arguments": {"order_id": "42"}}]},
    {"text": "Order 42 recorded."},
    {"text": "Confirmed: order 42."},
]}
COMMIT_POINTS = ("save_checkpoint", "begin_effect", "complete_effect", "renew_lease")
# Set while the first invocation runs. Its store calls run on its runtime's store
# thread, not the thread that invoked it, but in the invoking context; the second
# invocation, on a thread of its own, starts with a fresh context.
FIRST_INVOCATION: ContextVar[bool] = ContextVar("first_invocation", default=False)


@pytest.fixture
def options(deployment: Deployment, tmp_path: Path) -> dict[str, Any]:
    config = tmp_path / "agent-runtime.yaml"
    config.write_text(yaml.safe_dump({
        "version": "1.0", "tools": {"slow_order": "tests.functions.lambda_tools:slow_order"},
        "policy": {"scriptFiles": [str(tmp_path / "orders.script.yaml")]}}))
    script = tmp_path / "orders.script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    deployment.configure(config)
    lambda_tools.EXECUTIONS.clear()
    lambda_tools.STARTED.clear()
    lambda_tools.DELAYS.clear()
    return {"model": f"scripted/{script}"}


def reserved(deployment: Deployment, options: dict[str, Any]) -> str:
    """A run whose attempt 1 is leased to the execution EXECUTION (handed to it)."""
    services = deployment.services
    run_id = services.runtime().create_run(manifest=ORDERS, options=options).run_id
    services.store.resume_run(run_id, owner=EXECUTION, now=deployment.clock.now(),
                              lease_seconds=services.settings.lease_seconds)
    return run_id


def advance(run_id: str, *, execution: str = EXECUTION) -> str:
    """One Advance invocation (its own request id) with a whole slice of time."""
    answer = app.advance(advance_event(run_id=run_id, execution_arn=execution),
                         FakeContext("AdvanceFunction", 900_000))
    status: str = answer["status"]
    return status


def at_commit_points(monkeypatch: pytest.MonkeyPatch,
                     hook: Callable[[str], None]) -> None:
    """Call `hook(name)` before every fenced write of the store."""
    for name in COMMIT_POINTS:
        original = getattr(DynamoDbRunStore, name)

        def write(store: DynamoDbRunStore, *args: Any, __original: Any = original,
                  __name: str = name, **kwargs: Any) -> Any:
            hook(__name)
            return __original(store, *args, **kwargs)

        monkeypatch.setattr(DynamoDbRunStore, name, write)


def observed(deployment: Deployment, run_id: str) -> Any:
    """Everything a write or a dispatched effect would change."""
    store = deployment.services.store
    return (store.load_run(run_id), store.list_checkpoints(run_id), store.list_effects(run_id),
            list(lambda_tools.STARTED), list(lambda_tools.EXECUTIONS))


def count_commit_points(deployment: Deployment, options: dict[str, Any],
                        monkeypatch: pytest.MonkeyPatch) -> int:
    seen: list[str] = []
    with monkeypatch.context() as patch:
        at_commit_points(patch, seen.append)
        run_id = reserved(deployment, options)
        assert advance(run_id) == "completed"
    lambda_tools.EXECUTIONS.clear()
    lambda_tools.STARTED.clear()
    return len(seen)


def test_a_second_invocation_at_any_commit_point_stops_without_acting(
        deployment: Deployment, options: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    points = count_commit_points(deployment, options, monkeypatch)
    # the first step's checkpoint, the tool's effect writes and checkpoints, and the
    # completion, which is the last step's commit point
    assert points >= 5

    for at in range(1, points + 1):
        run_id = reserved(deployment, options)
        calls = {"n": 0}
        second: dict[str, Any] = {}

        def interleave(name: str, *, at: int = at, run_id: str = run_id,
                       calls: dict[str, int] = calls, second: dict[str, Any] = second) -> None:
            if not FIRST_INVOCATION.get():
                return
            calls["n"] += 1
            if calls["n"] != at:
                return
            before = observed(deployment, run_id)
            thread = threading.Thread(target=lambda: second.update(status=advance(run_id)))
            thread.start()
            thread.join(timeout=60)
            second.update(point=name, unchanged=observed(deployment, run_id) == before)

        with monkeypatch.context() as patch:
            at_commit_points(patch, interleave)
            first = FIRST_INVOCATION.set(True)
            try:
                assert advance(run_id) == "completed", f"at commit point {at}"
            finally:
                FIRST_INVOCATION.reset(first)
        assert second == {"status": "held", "point": second["point"], "unchanged": True}, at
        done = deployment.services.store.load_run(run_id)
        assert done is not None and done.status is RunStatus.COMPLETED
        assert done.output == "Confirmed: order 42."
        assert len(lambda_tools.EXECUTIONS) == 1, f"at commit point {at} ({second['point']})"
        lambda_tools.EXECUTIONS.clear()
        lambda_tools.STARTED.clear()


def test_a_slice_that_died_holding_the_attempt_is_a_crash_for_the_reconciler(
        deployment: Deployment, options: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = reserved(deployment, options)
    started = lambda_tools.STARTED

    def crash(name: str) -> None:
        if name == "complete_effect":
            raise LambdaCrash("killed after the tool ran")

    with monkeypatch.context() as patch, pytest.raises(LambdaCrash):
        at_commit_points(patch, crash)
        advance(run_id)
    assert advance(run_id) == "held"  # it might still be running: wait for its lease
    deployment.clock.advance(deployment.services.settings.lease_seconds + 1)
    # It died with a tool call's outcome unrecorded: not this attempt's to redo.
    before = observed(deployment, run_id)
    assert advance(run_id) == "superseded"
    assert observed(deployment, run_id) == before

    # The reconciler (the execution is not known to Step Functions here, so
    # it is gone) takes the run over with attempt 2; the idempotent tool is
    # called again with its key.
    answer = deployment.stack.invoke("ReconcilerFunction",
                                     sample_event("scheduled-reconcile.json"))
    assert answer["counts"]["resumed"] == 1
    assert deployment.stack.wait_for(execution_name(run_id, 2))["status"] == "SUCCEEDED"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.attempt == 2
    assert len(set(started)) == 1 and len(started) == 2


def test_an_invocation_for_another_execution_is_refused_before_executing(
        deployment: Deployment, options: dict[str, Any]) -> None:
    run_id = reserved(deployment, options)
    before = observed(deployment, run_id)
    assert advance(run_id, execution=EXECUTION.replace("-a1", "-a1-other")) == "superseded"
    assert observed(deployment, run_id) == before
