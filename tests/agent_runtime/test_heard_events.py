"""Events are built only when a sink listens (the hot path skips them and their fields
otherwise); a sink that listens hears every one, in order, with its data."""

from __future__ import annotations

from engine_harness import Harness, manifest

from agent_runtime import RunStatus, tool
from agent_runtime.testing import scripted


@tool
def lookup(item: int) -> dict[str, int]:
    """Look an item up.

    Args:
        item: The item.
    """
    return {"item": item}


def test_a_tool_iteration_is_heard_event_by_event() -> None:
    h = Harness(scripted(responses=[
        {"toolCalls": [{"name": "lookup", "arguments": {"item": 7}}],
         "usage": {"inputTokens": 4, "outputTokens": 2}},
        {"text": "found", "usage": {"inputTokens": 5, "outputTokens": 1}}]), tools=[lookup])
    result = h.run(manifest(
        {"id": "each", "type": "loop", "loop": {"source": "items", "itemVariable": "item"},
         "steps": [{"id": "ask", "type": "prompt", "prompt": "Find {{ item }}.",
                    "tools": ["lookup"]}]},
        variables=[{"key": "items", "type": "array", "value": [7]}]))
    assert result.status is RunStatus.COMPLETED
    assert h.types() == [
        "run.started", "step.started", "loop.started", "loop.iteration.started",
        "step.started", "model.started", "model.usage", "model.completed",
        "model.tool.requested", "checkpoint.saved", "model.tool.started",
        "model.tool.completed", "checkpoint.saved", "model.started", "model.text.delta",
        "model.usage", "model.completed", "step.completed", "loop.iteration.completed",
        "checkpoint.saved", "step.completed", "run.completed"]
    heard = {event.type: event for event in h.events.events}
    requested = heard["model.tool.requested"].data
    assert set(requested) == {"call", "tool", "tool_sha256", "tool_length"}
    assert (requested["call"], requested["tool"], requested["tool_length"]) == (0, "lookup", 6)
    assert heard["model.completed"].data["finish_reason"] == "stop"
    assert heard["step.completed"].data["kind"] == "loop"
    assert set(heard["model.tool.completed"].data) == {
        "call", "tool", "tool_sha256", "tool_length", "duration_ms"}
    assert [event.data["seq"] for event in h.events.events
            if event.type == "checkpoint.saved"] == [1, 2, 3]
