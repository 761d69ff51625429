"""Transcript entries (`created_at`) and step results (`at`) are stamped with the runtime's
clock, as its `isoformat()`: a test's clock as it reads, the system clock by its own
cheaper text of the same format."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_runtime import AgentRuntime, RunStatus, tool
from agent_runtime.clock import SystemClock
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.testing import FakeClock, scripted
from stores.memory import MemoryRunStore


@tool
def lookup(item: int) -> dict[str, int]:
    """Look an item up.

    Args:
        item: The item.
    """
    return {"item": item}


AGENT = parse_agent_manifest({"schemaVersion": "1.0", "id": "stamps", "steps": [
    {"id": "skipped", "type": "prompt", "prompt": "Never.", "when": "false"},
    {"id": "ask", "type": "prompt", "prompt": "Look item 7 up.", "tools": ["lookup"]}]},
    source="test")
SCRIPT = {"ask": [
    {"toolCalls": [{"name": "lookup", "arguments": {"item": 7}}]},
    {"text": "Item 7 is 7."}]}


def stamped(clock: object) -> tuple[list[str], list[str]]:
    """The `created_at` of every transcript entry and the `at` of every step result of a
    run on `clock` (with a tool call: a request, a call, its result, an answer)."""
    store = MemoryRunStore()
    runtime = AgentRuntime(store=store, models={"scripted": scripted(by_step=SCRIPT)},
                           tools=[lookup], clock=clock)  # type: ignore[arg-type]
    result = runtime.run_sync(manifest=AGENT, options={"model": "scripted/test"})
    assert result.status is RunStatus.COMPLETED, result
    latest = store.load_latest_checkpoint(result.run_id)
    assert latest is not None
    steps = [entry for entry in latest.step_results if entry["kind"] == "step"]
    assert {entry["step_id"] for entry in steps} == {"skipped", "ask"}
    assert len(latest.transcript) == 4
    return [item["created_at"] for item in latest.transcript], [entry["at"] for entry in steps]


def test_entries_read_a_test_clock_as_it_reads() -> None:
    clock = FakeClock(datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC))
    created, at = stamped(clock)
    assert set(created) | set(at) == {"2026-03-04T05:06:07.890123+00:00"}


def test_entries_on_the_system_clock_are_its_isoformat_within_the_run() -> None:
    before = datetime.now(UTC)
    created, at = stamped(SystemClock())
    after = datetime.now(UTC)
    for stamp in created + at:
        when = datetime.fromisoformat(stamp)
        assert before <= when <= after, stamp
        assert stamp == when.isoformat()  # the same text `isoformat` writes
