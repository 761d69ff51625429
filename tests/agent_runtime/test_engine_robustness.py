"""The engine under a failing store or sink, and with checkpoints that cannot be its run's."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from engine_harness import Harness, manifest

from agent_runtime import RunStatus, ToolContext, tool
from agent_runtime.checkpoint_check import CorruptCheckpoint
from agent_runtime.errors import AgentRuntimeError
from agent_runtime.events import Event
from agent_runtime.execution import LostOwnership
from agent_runtime.models.base import ModelError
from agent_runtime.testing import scripted
from agent_runtime.tools.mcp import McpConnectionError, McpToolError
from stores.base import CorruptRecord, StaleAttempt
from stores.memory import MemoryRunStore
from stores.records import Checkpoint, EffectStatus, Frame

THREE = [{"id": name, "type": "prompt", "prompt": name} for name in ("a", "b", "c")]


class DiskFull(MemoryRunStore):
    """Refuses checkpoints from seq `from_seq` on, as a store on a full disk does."""

    def __init__(self, from_seq: int, *, final_too: bool = False) -> None:
        super().__init__()
        self.from_seq = from_seq
        self.final_too = final_too

    def save_checkpoint(self, checkpoint: Checkpoint, **kwargs: Any) -> None:
        if checkpoint.seq >= self.from_seq:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().save_checkpoint(checkpoint, **kwargs)

    def fail_run(self, run_id: str, **kwargs: Any) -> None:
        if self.final_too:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().fail_run(run_id, **kwargs)


def test_a_failing_checkpoint_write_fails_the_run_and_runs_no_later_step() -> None:
    model = scripted(responses=[{"text": "one"}, {"text": "two"}, {"text": "three"}])
    h = Harness(model, store=DiskFull(from_seq=2))
    result = h.run(manifest(*THREE))
    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "checkpoint_unavailable"
    assert "No space left on device" in result.error["message"]
    record = h.store.load_run(result.run_id)
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error is not None and record.error.type == "checkpoint_unavailable"
    # seq 1 is step a, seq 2 (after step b) failed: c never asked
    assert [r.step_id for r in model.requests] == ["a", "b"]


def test_a_store_refusing_even_the_failure_still_returns_a_result() -> None:
    h = Harness(scripted(responses=[{"text": "one"}]), store=DiskFull(from_seq=1,
                                                                       final_too=True))
    result = h.run(manifest(*THREE))
    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "checkpoint_unavailable"


class BrokenSink:
    def emit(self, event: Event) -> None:
        raise OSError(errno.EPIPE, "Broken pipe")


def test_a_failing_event_sink_neither_fails_nor_masks_a_run() -> None:
    h = Harness(scripted(responses=[{"text": "one"}, {"text": "two"}, {"text": "three"}]))
    h.runtime.event_sinks.insert(0, BrokenSink())
    result = h.run(manifest(*THREE))
    assert (result.status, result.output) == (RunStatus.COMPLETED, "three")
    assert "run.completed" in h.types("run.")  # the sinks after it still got every event


def test_resuming_a_finished_run_returns_its_result() -> None:
    h = Harness(scripted(responses=[{"text": "one"}, {"text": "two"}, {"text": "three"}]))
    first = h.run(manifest(*THREE))
    again = h.resume(first.run_id)
    assert (again.status, again.output, again.attempt) == (RunStatus.COMPLETED, "three", 1)
    assert again.executed is False


class Misplaced(MemoryRunStore):
    """Hands back its latest checkpoint altered by `change`, once told to: a file
    copied from another run, a clock gone wrong, a manifest edited underneath."""

    def __init__(self) -> None:
        super().__init__()
        self.change: dict[str, Any] | None = None

    def load_latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        latest = super().load_latest_checkpoint(run_id)
        if latest is None or self.change is None:
            return latest
        return latest.model_copy(update=self.change)


@pytest.mark.parametrize(("change", "reason"), [
    ({"run_id": "someone-else"}, "belongs to run 'someone-else'"),
    ({"attempt": 9}, "written by attempt 9"),
    ({"cursor": [Frame(step_path="z", step_id="z", step_index=7)]}, "step index 7"),
])
def test_a_checkpoint_that_cannot_be_the_runs_is_refused_before_an_attempt(
        change: dict[str, Any], reason: str) -> None:
    model = scripted(responses=[{"text": "one"}, {"text": "two"}, {"text": "three"}])
    store = Misplaced()
    h = Harness(model, store=store)
    suspended = h.run(manifest(THREE[0], {"id": "ok", "type": "approval", "prompt": "Go?"},
                               *THREE[1:]))
    run_id = suspended.run_id
    h.runtime.approve(run_id)
    store.change = change
    before = h.store.load_run(run_id)
    with pytest.raises(CorruptRecord, match=reason) as raised:
        h.resume(run_id)
    assert isinstance(raised.value, CorruptCheckpoint | AgentRuntimeError)
    assert f"run {run_id}: checkpoint" in str(raised.value)
    after = h.store.load_run(run_id)
    assert before is not None and after is not None and after.attempt == before.attempt
    assert len(model.requests) == 1  # nothing executed


def test_engine_errors_share_one_root() -> None:
    for error in (ModelError("rate_limited", "slow down"), McpConnectionError("no server"),
                  McpToolError("bad call"), LostOwnership(StaleAttempt("superseded"))):
        assert isinstance(error, AgentRuntimeError)


def test_an_effect_write_refused_by_a_newer_attempt_stops_this_one_as_superseded() -> None:
    # The tool runs past its lease; a rival takes the run over. Recording the
    # tool's result is then refused by the attempt fence: this execution stops
    # as lost ownership (not a failure), the effect stays reserved for the
    # rival's operator to settle, and the run is the rival's.
    h = Harness()

    @tool
    def slow(ctx: ToolContext) -> str:
        """Meanwhile the lease expires and another owner takes the run over."""
        h.clock.advance(h.lease_seconds + 1)
        h.store.resume_run(ctx.run_id, owner="rival", now=h.clock.now(), lease_seconds=60,
                           allow_running_takeover=True)
        return "done"

    h.tools.append(slow)
    h.model = scripted(responses=[{"toolCalls": [{"name": "slow", "arguments": {}}]},
                                  {"text": "ok"}])
    h.runtime = h.make_runtime()
    result = h.run(manifest({"id": "p", "type": "prompt", "prompt": "go", "tools": ["slow"]}))
    assert result.status is RunStatus.RUNNING and result.attempt == 1
    assert result.error is not None and result.error["type"] == "lost_ownership"
    record = h.store.load_run(result.run_id)
    assert record is not None and record.attempt == 2 and record.lease_owner == "rival"
    assert record.error is None
    [effect] = h.store.list_effects(result.run_id)
    assert effect.attempt == 1 and effect.status is EffectStatus.RESERVED
    assert "run.failed" not in h.types()
    assert h.events.events[-1].type == "run.superseded"
    assert h.events.events[-1].data["reason"] == "StaleAttempt"
