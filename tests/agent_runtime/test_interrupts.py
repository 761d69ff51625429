"""`AgentRuntime.interrupt`: a run asked to stop finishes the call in flight, saves it,
and suspends as `interrupted` with its lease released; a resume continues at once
without repeating the call (docs/design.md section 6)."""

from __future__ import annotations

from typing import Any

from engine_harness import SCRIPTED, Harness, manifest

from agent_runtime import AgentRuntime, RunStatus, ToolContext, tool
from agent_runtime.testing import scripted

AGENT = manifest(
    {"id": "ship", "type": "prompt", "prompt": "Ship A.", "tools": ["ship"],
     "outputVariable": "shipped"},
    {"id": "report", "type": "prompt", "prompt": "Report.", "includeInFinalOutput": True})


def test_an_interrupt_during_a_tool_call_saves_its_result_and_suspends() -> None:
    calls: list[str] = []
    runtimes: list[AgentRuntime] = []

    @tool(idempotent=False)
    def ship(order: str, ctx: ToolContext) -> str:
        """Ship an order."""
        calls.append(order)
        runtimes[-1].interrupt.set()  # Ctrl-C arrives while the call is in flight
        return f"shipped {order}"

    model: Any = scripted(responses=[
        {"toolCalls": [{"name": "ship", "arguments": {"order": "A"}}]},
        {"text": "done"}, {"text": "reported"}])
    h = Harness(model, tools=[ship])
    runtimes.append(h.make_runtime(owner="host-a:1"))
    result = runtimes[-1].run_sync(manifest=AGENT, options=SCRIPTED, run_id="r1")

    assert result.status is RunStatus.SUSPENDED
    assert result.suspension == {"reason": "interrupted",
                                 "details": {"before": "the next action", "step_path": "ship"}}
    record = h.store.load_run("r1")
    assert record is not None and record.lease_owner is None
    assert len(model.requests) == 1  # no model request started after the signal

    resumed = h.make_runtime(owner="host-a:2").run_sync(run_id="r1", resume=True)
    assert (resumed.status, resumed.output) == (RunStatus.COMPLETED, "reported")
    assert calls == ["A"]  # the saved result was used, not a second call
