"""Deadline-aware Advance (docs/design.md section 10, Time): no call outlives its slice.

Each test drives the real Advance handler, slice after slice, under moto with
the functions' fake clock, which does not move by itself: the slice's deadline
is the `remaining time` a test gives the Lambda context less
`AdvanceMarginSeconds`, so a slice of 0.2 s is real time the event loop
measures, and a call scripted to take longer (`delayMs`, or a slow tool) is
cut by it. A slice that stops hands the attempt to the next slice's execution
and starts it; Step Functions here starts executions without running them, so
the test runs the next slice itself. Real waits stay under half a second; no
test asserts wall time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from advance_slices import advance_event, slice_arn
from aws_stack import Deployment, FakeContext

from agent_runtime import RunStatus
from functions.executions import execution_name
from functions.step import app
from tests.functions import lambda_tools

pytestmark = pytest.mark.slow
TOOLS = {name: f"tests.functions.lambda_tools:{name}"
         for name in ("slow_order", "charge_card", "pass_time")}
SHORT, LONG = 0.2, 5.0  # seconds of slice an Advance gets


def orders(tools: list[str], **limits: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "schemaVersion": "1.0", "id": "orders", "name": "Orders",
        "steps": [{"id": "take", "type": "prompt", "prompt": "Record order 42.",
                   "tools": tools}]}
    if limits:
        manifest["limits"] = limits
    return manifest


@pytest.fixture
def deployment(idle_deployment: Deployment) -> Deployment:
    """The stack whose Step Functions starts executions and never runs them: the test
    runs each slice's Advance itself."""
    return idle_deployment


@pytest.fixture
def scripted(deployment: Deployment, tmp_path: Path) -> Any:
    """Write a script and return the run options naming it; the functions get the tools."""
    config = tmp_path / "agent-runtime.yaml"
    config.write_text(yaml.safe_dump({"version": "1.0", "tools": TOOLS, "policy": {
        "scriptFiles": [str(tmp_path / "orders.script.yaml")]}}))
    deployment.configure(config)
    lambda_tools.EXECUTIONS.clear()
    lambda_tools.STARTED.clear()
    lambda_tools.DELAYS.clear()
    lambda_tools.CLOCKS[:] = [deployment.clock]

    def options(*responses: dict[str, Any]) -> dict[str, Any]:
        script = tmp_path / "orders.script.yaml"
        script.write_text(yaml.safe_dump({"responses": list(responses)}))
        return {"model": f"scripted/{script}"}

    return options


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"toolCalls": [{"name": name, "arguments": arguments}]}


def reserved(deployment: Deployment, manifest: dict[str, Any], options: dict[str, Any]) -> str:
    """A run created; its first slice reserves attempt 1 (`advance`)."""
    run_id: str = deployment.services.runtime().create_run(manifest=manifest,
                                                           options=options).run_id
    return run_id


def advance(deployment: Deployment, run_id: str, slice_seconds: float) -> str:
    """The attempt's next slice, with `slice_seconds` of time before its deadline; its
    status. The first reserves the attempt; each later one runs in the execution
    the one before it started."""
    stack = deployment.stack
    first = execution_name(run_id, 1)
    # The first slice's execution is this test; each later one was started.
    number = 1 + sum(name.startswith(f"{first}-s") for name in stack.executions())
    event = (advance_event(run_id=run_id, execution_arn=stack.execution_arn(first))
             if number == 1 else
             advance_event("advance-next-slice.json", run_id=run_id, slice=number,
                           execution_arn=slice_arn(stack, run_id, 1, number)))
    margin = deployment.services.settings.advance_margin_seconds
    context = FakeContext("AdvanceFunction", round((margin + slice_seconds) * 1000))
    answer = app.advance(event, context)
    status: str = answer["status"]
    return status


def test_a_model_call_longer_than_the_slice_is_reissued_by_the_next_slice(
        deployment: Deployment, scripted: Any) -> None:
    options = scripted(tool_call("slow_order", order_id="42"),
                       {"text": "Order 42 recorded.", "delayMs": 600})
    run_id = reserved(deployment, orders(["slow_order"]), options)

    # The tool call is checkpointed; the second model call outlasts the slice.
    assert advance(deployment, run_id, SHORT) == "continue"
    cut = deployment.services.store.load_run(run_id)
    assert cut is not None and cut.status is RunStatus.RUNNING and cut.takeovers == 0
    # handed to the next slice's execution, started
    assert cut.lease_owner == slice_arn(deployment.stack, run_id, 1, 2)
    assert deployment.stack.executions() == {execution_name(run_id, 1, slice_=2): "RUNNING"}
    assert [key for key, _ in lambda_tools.EXECUTIONS] == lambda_tools.STARTED

    assert advance(deployment, run_id, LONG) == "completed"
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == "Order 42 recorded." and done.takeovers == 0 and done.attempt == 1
    assert len(lambda_tools.EXECUTIONS) == 1  # the saved tool result was not redone


def test_a_tool_call_cut_by_the_slice_is_called_again_with_the_same_key(
        deployment: Deployment, scripted: Any) -> None:
    options = scripted(tool_call("slow_order", order_id="42"), {"text": "Order 42 recorded."})
    run_id = reserved(deployment, orders(["slow_order"]), options)
    lambda_tools.DELAYS.append(0.6)

    assert advance(deployment, run_id, SHORT) == "continue"
    assert len(lambda_tools.STARTED) == 1 and lambda_tools.EXECUTIONS == []
    effects = deployment.services.store.list_effects(run_id)
    assert [effect.status.value for effect in effects] == ["reserved"]

    assert advance(deployment, run_id, LONG) == "completed"
    first, again = lambda_tools.STARTED
    assert first == again  # the same idempotency key in both slices
    assert [(first, "42")] == lambda_tools.EXECUTIONS
    done = deployment.services.store.load_run(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.takeovers == 0


def test_a_call_that_cannot_fit_a_whole_slice_fails_the_run_naming_the_step(
        deployment: Deployment, scripted: Any) -> None:
    options = scripted({"text": "Too slow.", "delayMs": 600})
    run_id = reserved(deployment, orders([]), options)

    assert advance(deployment, run_id, SHORT) == "failed"
    failed = deployment.services.store.load_run(run_id)
    assert failed is not None and failed.error is not None
    assert failed.error.type == "call_exceeds_slice"
    assert "step take" in failed.error.message and "model call" in failed.error.message


def test_the_engine_bounds_a_model_call_by_provider_timeout_ms(
        deployment: Deployment, scripted: Any) -> None:
    # The scripted driver ignores the timeout: the engine enforces it.
    options = scripted({"text": "Too slow.", "delayMs": 5000})
    run_id = reserved(deployment, orders([], providerTimeoutMs=50), options)

    assert advance(deployment, run_id, LONG) == "failed"
    failed = deployment.services.store.load_run(run_id)
    assert failed is not None and failed.error is not None
    assert failed.error.type == "model_error" and failed.error.details == {"code": "timeout"}
    assert "step take" in failed.error.message
    assert "limits.providerTimeoutMs (50 ms)" in failed.error.message


def test_a_tool_that_is_not_idempotent_is_not_started_late_in_a_slice(
        deployment: Deployment, scripted: Any) -> None:
    options = scripted(tool_call("pass_time", seconds=6),
                       tool_call("charge_card", order_id="42"), {"text": "Charged."})
    run_id = reserved(deployment, orders(["pass_time", "charge_card"]), options)

    # Six of ten seconds gone: less than half a slice is left to charge the card.
    assert advance(deployment, run_id, 10) == "continue"
    assert lambda_tools.STARTED == []
    assert deployment.services.store.list_effects(run_id)[-1].status.value == "completed"
    assert len(deployment.services.store.list_effects(run_id)) == 1  # nothing reserved

    assert advance(deployment, run_id, 10) == "completed"
    assert len(lambda_tools.EXECUTIONS) == 1


def test_a_tool_that_is_not_idempotent_cut_mid_call_suspends_as_effect_unknown(
        deployment: Deployment, scripted: Any) -> None:
    options = scripted(tool_call("charge_card", order_id="42"), {"text": "Charged."})
    run_id = reserved(deployment, orders(["charge_card"]), options)
    lambda_tools.DELAYS.append(0.6)

    # It was sent and may have acted: an operator decides, as after a crash.
    assert advance(deployment, run_id, SHORT) == "suspended"
    suspended = deployment.services.store.load_run(run_id)
    assert suspended is not None and suspended.suspension is not None
    assert suspended.suspension.reason == "effect-unknown"
    assert suspended.suspension.details["cut_by_slice_end"] is True
    assert suspended.suspension.details["key"] == lambda_tools.STARTED[0]
