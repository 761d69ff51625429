"""Events are built only when a sink listens (the hot path skips them and their fields
otherwise); a sink that listens hears every one, in order, with its data."""

from __future__ import annotations

from typing import Any

from engine_harness import Harness, manifest

from agent_runtime import AgentRuntime, RunStatus, tool
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


def test_the_log_keeps_a_heard_events_id_and_names_the_others_by_cursor() -> None:
    one_step = manifest({"id": "ask", "type": "prompt", "prompt": "Hello."})
    heard = Harness(scripted(responses=[{"text": "hi"}]))
    heard_run = heard.run(one_step)
    logged = heard.store.list_events(heard_run.run_id, limit=100)
    # the log's entries are the events the sink heard, under the ids it heard them by
    assert [event.id for event in logged] == [event.id for event in heard.events.events]

    unheard = Harness(scripted(responses=[{"text": "hi"}]))
    unheard.runtime = AgentRuntime(store=unheard.store, models={"scripted": unheard.model},
                                   clock=unheard.clock, owner="test-owner")
    run = unheard.run(one_step)
    logged = unheard.store.list_events(run.run_id, limit=100)
    record = unheard.store.load_run(run.run_id)
    assert record is not None and record.checkpoint_seq is not None
    stored = unheard.store.load_checkpoint(run.run_id, record.checkpoint_seq)
    assert stored is not None and all("id" not in entry for entry in stored.events)
    ids = [event.id for event in logged]
    assert [event.type for event in logged] == heard.types()
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)
    assert ids == [event.id for event in unheard.store.list_events(run.run_id, limit=100)]
    assert [event.id for event in unheard.store.list_events(run.run_id, after=2, limit=2)] \
        == ids[2:4]
    assert set(ids).isdisjoint(event.id for event in logged_of_another_run(one_step))


def logged_of_another_run(agent: Any) -> list[Any]:
    other = Harness(scripted(responses=[{"text": "hi"}]))
    other.runtime = AgentRuntime(store=other.store, models={"scripted": other.model},
                                 clock=other.clock, owner="test-owner")
    run = other.run(agent)
    return other.store.list_events(run.run_id, limit=100)
