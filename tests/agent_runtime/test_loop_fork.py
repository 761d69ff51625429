"""A fork of a run inside a loop sees the loop's history as the original did.

A loop rebuilds `loop.previous` (and `loop.current`) on resume from the
checkpoint that ended that iteration. A fork starts from a copy of one
checkpoint under new numbering, so that checkpoint must be found in the run
it belongs to: forked at any checkpoint, with or without a crash inside the
fork, the fork's output is the original's, for loops over a source and goal
loops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import RunStatus
from agent_runtime.events import Event, ListEventSink
from agent_runtime.manifest import AgentManifest


class Crash(BaseException):
    """The process dies here."""


class CrashAt(ListEventSink):
    """The process dies once `run_id` has saved checkpoint `seq`."""

    def __init__(self, run_id: str, seq: int) -> None:
        super().__init__()
        self.run_id, self.seq = run_id, seq

    def emit(self, event: Event) -> None:
        super().emit(event)
        if (event.type, event.run_id, event.data.get("seq")) == ("checkpoint.saved",
                                                                  self.run_id, self.seq):
            raise Crash()


STEPS = [{"id": "say", "type": "prompt", "outputVariable": "said",
          "prompt": "n={{ n }} prev={{ loop.previous.variables.n }} "
                    "before={{ loop.previous.output }}"}]


def over_a_source() -> AgentManifest:
    return manifest({"id": "each", "type": "loop", "includeInFinalOutput": True,
                     "loop": {"source": "numbers", "itemVariable": "n"}, "steps": STEPS},
                    variables=[{"key": "numbers", "type": "array",
                                "value": [1, 2, 3, 4]}])


def until_a_goal() -> AgentManifest:
    return manifest({"id": "until", "type": "loop", "includeInFinalOutput": True,
                     "loop": {"maxIterations": 10, "itemVariable": "n",
                              "goal": "loop.iteration >= 4"}, "steps": STEPS})


def fork(h: Harness, run_id: str, seq: int) -> Any:
    return asyncio.run(h.runtime.fork(run_id, seq=seq))


@pytest.mark.parametrize("agent", [over_a_source, until_a_goal], ids=["source", "goal"])
def test_a_fork_from_any_checkpoint_of_a_loop_gives_the_original_output(agent: Any) -> None:
    h = Harness()
    original = h.run(agent(), options=ECHO)
    assert original.status is RunStatus.COMPLETED
    assert "prev=2" in str(original.output)  # loop.previous is seen at all
    for info in h.store.list_checkpoints(original.run_id)[:-1]:
        forked = fork(h, original.run_id, info.seq)
        assert forked.status is RunStatus.COMPLETED, info.seq
        assert forked.output == original.output, info.seq


@pytest.mark.parametrize("agent", [over_a_source, until_a_goal], ids=["source", "goal"])
def test_a_crash_inside_a_fork_resumes_to_the_original_output(agent: Any) -> None:
    h = Harness()
    original = h.run(agent(), options=ECHO)
    checkpoints = [info.seq for info in h.store.list_checkpoints(original.run_id)]
    for source_seq in checkpoints[:-1]:
        # The fork's copy is its seq 1; it dies after each checkpoint it saves
        # itself but the last (seq 2 on: the copy of checkpoint source_seq is 1).
        for crash_seq in range(2, len(checkpoints) - source_seq + 1):
            copy = h.runtime.create_fork(original.run_id, seq=source_seq)
            h.events = CrashAt(copy.run_id, crash_seq)
            h.runtime = h.make_runtime()
            with pytest.raises(Crash):
                h.runtime.run_sync(run_id=copy.run_id, resume=True)
            h.events = ListEventSink()
            h.runtime = h.make_runtime(owner="another-process")
            h.clock.advance(60)
            result = h.resume(copy.run_id, allow_running_takeover=True)
            assert (result.status, result.output) == (RunStatus.COMPLETED,
                                                      original.output), (source_seq, crash_seq)


def test_a_fork_whose_source_run_was_deleted_fails_by_name_not_with_empty_values() -> None:
    h = Harness()
    original = h.run(over_a_source(), options=ECHO)
    record = h.runtime.create_fork(original.run_id, seq=3)
    # Started (its copy saved), then the run it came from is deleted.
    h.events = CrashAt(record.run_id, 2)
    h.runtime = h.make_runtime()
    with pytest.raises(Crash):
        h.runtime.run_sync(run_id=record.run_id, resume=True)
    h.store.delete_run(original.run_id)
    h.events = ListEventSink()
    h.runtime = h.make_runtime(owner="another-process")
    h.clock.advance(60)
    result = h.resume(record.run_id, allow_running_takeover=True)
    assert result.status is RunStatus.FAILED
    assert result.error["type"] == "checkpoint_unavailable"
    assert f"of run {original.run_id}" in result.error["message"]
