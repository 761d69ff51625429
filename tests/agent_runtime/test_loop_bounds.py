"""A loop with no `source` counts: its memory and its checkpoints do not depend on
`maxIterations`, an absurd `maxIterations` is refused by name, a crash at any
checkpoint resumes at the exact iteration, and checkpoints saved before the
loop counted (a `loop-items` result holding every index) still resume."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_harness import ECHO, Harness, manifest

from agent_runtime import AgentRuntime, RunStatus
from agent_runtime.errors import ManifestError
from agent_runtime.events import Event, ListEventSink
from agent_runtime.manifest import MAX_LOOP_ITERATIONS, AgentManifest
from agent_runtime.run_manifest import load_agent_manifest
from agent_runtime.testing import FakeClock, scripted
from stores.records import Checkpoint, RunRecord
from stores.sqlite import SqliteRunStore

FIXTURE = Path(__file__).parent / "fixtures" / "counted_loop_before_counting.json"
KIB = 1024
MIB = 1024 * KIB


class Crash(BaseException):
    """The process dies here."""


def counted(max_iterations: int, goal_at: int = 4) -> AgentManifest:
    """A loop with no source that meets its goal at iteration `goal_at`; each
    iteration's two steps show the item, the index and `loop.previous`."""
    return manifest(
        {"id": "count", "type": "loop", "includeInFinalOutput": True,
         "loop": {"maxIterations": max_iterations, "itemVariable": "n", "indexVariable": "i",
                  "resultVariable": "last", "goal": f"loop.iteration >= {goal_at}"},
         "steps": [{"id": "a", "type": "prompt", "outputVariable": "draft",
                    "prompt": "item {{ n }} index {{ i }} iteration {{ loop.iteration }}"},
                   {"id": "b", "type": "prompt", "outputVariable": "last",
                    "prompt": "item {{ n }} after iteration {{ loop.previous.iteration }}: "
                              "{{ loop.previous.variables.draft }}"}]})


def expected_output(iterations: int) -> str:
    """`counted`'s output under the echo model: each iteration's `b`, which sees
    the item, and `loop.previous` with the draft its variables held."""
    def result(index: int) -> str:
        if index == 0:
            return "[echo] item 0 after iteration : "
        return (f"[echo] item {index} after iteration {index}: "
                f"[echo] item {index - 1} index {index - 1} iteration {index}")
    return "\n\n".join(result(index) for index in range(iterations))


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteRunStore]:
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        yield store


def run_counted(store: SqliteRunStore, max_iterations: int) -> tuple[Any, int]:
    """Run a 3-iteration goal loop declared with `max_iterations`: (result,
    tracemalloc's peak in bytes during the run)."""
    runtime = AgentRuntime(store=store, models={"scripted": scripted()}, clock=FakeClock())
    agent = counted(max_iterations, goal_at=3)
    tracemalloc.start()
    try:
        result = runtime.run_sync(manifest=agent, options=ECHO)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.mark.parametrize("max_iterations", [20_000_000, 10**12, MAX_LOOP_ITERATIONS])
def test_a_counted_loop_costs_the_same_at_any_max_iterations(
        sqlite_store: SqliteRunStore, max_iterations: int) -> None:
    # The same loop declared with 3 iterations, first: it also builds the
    # manifest models once, so the runs measured below do not pay for that.
    small, small_peak = run_counted(sqlite_store, 3)
    big, big_peak = run_counted(sqlite_store, max_iterations)
    assert small.status is big.status is RunStatus.COMPLETED
    assert big.output == small.output == expected_output(3)

    # Before counting, 20,000,000 iterations took 1.2 GB and a 150 MB checkpoint.
    assert big_peak < small_peak + MIB and big_peak < 50 * MIB
    small_sizes = [info.size_bytes for info in sqlite_store.list_checkpoints(small.run_id)]
    big_sizes = [info.size_bytes for info in sqlite_store.list_checkpoints(big.run_id)]
    assert len(big_sizes) == len(small_sizes)
    # Checkpoint by checkpoint, from the loop's start on, the only difference is
    # the count's digits where the loop's frame and its event save it.
    assert all(abs(b - s) <= 64 for b, s in zip(big_sizes, small_sizes, strict=True))
    assert max(big_sizes) < 64 * KIB
    first = sqlite_store.load_checkpoint(big.run_id, 1)
    assert first is not None
    assert first.cursor[0].continuation["count"] == max_iterations
    assert [entry["kind"] for entry in first.step_results] == ["step"]  # no list of items
    assert sqlite_store.path.stat().st_size < MIB


@pytest.mark.parametrize("max_iterations", [10**30, MAX_LOOP_ITERATIONS + 1])
def test_max_iterations_past_what_an_index_can_be_is_refused_by_name(
        max_iterations: int) -> None:
    with pytest.raises(ManifestError) as refused:
        counted(max_iterations)
    message = str(refused.value)
    assert "steps[0].loop.maxIterations" in message
    assert f"must be at most {MAX_LOOP_ITERATIONS}" in message


def test_max_iterations_in_a_yaml_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "huge.agent.yaml"
    path.write_text('schemaVersion: "1.0"\nid: huge\nsteps:\n  - id: outer\n    type: loop\n'
                    "    loop: {}\n    steps:\n      - id: inner\n        type: loop\n"
                    f"        loop: {{maxIterations: {10**30}}}\n        steps: []\n",
                    encoding="utf-8")
    with pytest.raises(ManifestError, match=r"steps\[0\]\.steps\[0\]\.loop\.maxIterations: "
                                            r"must be at most 9007199254740991"):
        load_agent_manifest(path)


def test_the_largest_max_iterations_is_accepted() -> None:
    assert counted(MAX_LOOP_ITERATIONS).steps[0].loop.max_iterations == MAX_LOOP_ITERATIONS


class CrashAfterCheckpoint(ListEventSink):
    """The process dies as soon as checkpoint `seq` is saved."""

    def __init__(self, seq: int) -> None:
        super().__init__()
        self.seq = seq

    def emit(self, event: Event) -> None:
        super().emit(event)
        if event.type == "checkpoint.saved" and event.data["seq"] == self.seq:
            raise Crash()


def with_events(h: Harness, sink: ListEventSink) -> Harness:
    h.events = sink
    h.runtime = h.make_runtime()
    return h


def started(events: list[Event], after_seq: int = 0) -> list[str | None]:
    """The loop's child steps started after checkpoint `after_seq` was saved (0: all).
    (A resumed attempt starts the loop itself again, to re-enter it.)"""
    start = 0 if after_seq == 0 else next(
        position for position, event in enumerate(events)
        if event.type == "checkpoint.saved" and event.data["seq"] == after_seq)
    return [event.step_path for event in events[start:]
            if event.type == "step.started" and (event.step_path or "").startswith("count/")]


def test_a_crash_after_any_checkpoint_resumes_a_counted_loop_at_its_iteration() -> None:
    agent = counted(10**12)
    whole = Harness()
    reference = whole.run(agent, options=ECHO)
    assert reference.output == expected_output(4)
    reference_variables = whole.store.load_latest_checkpoint(reference.run_id).variables
    saved = [info.seq for info in whole.store.list_checkpoints(reference.run_id)]
    for seq in saved[:-1]:
        h = with_events(Harness(), CrashAfterCheckpoint(seq))
        with pytest.raises(Crash):
            h.run(agent, options=ECHO)
        run_id = h.store.list_runs().runs[0].run_id
        assert h.store.load_latest_checkpoint(run_id).seq == seq
        with_events(h, ListEventSink())  # a new process takes the run over
        h.clock.advance(60)
        result = h.resume(run_id, allow_running_takeover=True)
        assert result.status is RunStatus.COMPLETED, seq
        assert result.output == reference.output, seq
        assert h.store.load_latest_checkpoint(run_id).variables == reference_variables, seq
        # The resumed attempt starts exactly the steps the whole run started
        # after that checkpoint: none again, none left out.
        assert started(h.events.events) == started(whole.events.events, seq), seq


def load_old_run(h: Harness, last_seq: int) -> str:
    """The old checkpoints up to `last_seq` in `h`'s store, under a lease of a
    process that died after saving the last of them."""
    saved = json.loads(FIXTURE.read_text(encoding="utf-8"))
    run = RunRecord.model_validate(saved["run"])
    h.store.create_run(run)
    h.store.resume_run(run.run_id, owner="old-process", now=h.clock.now(), lease_seconds=30)
    for body in saved["checkpoints"][:last_seq]:
        h.store.save_checkpoint(Checkpoint.model_validate(body), expected_attempt=1)
    return run.run_id


def test_the_fixture_is_a_loop_saved_before_it_counted() -> None:
    saved = json.loads(FIXTURE.read_text(encoding="utf-8"))
    first = saved["checkpoints"][0]
    assert first["step_results"][0] == {"kind": "loop-items", "step_path": "count",
                                        "items": [0, 1, 2, 3, 4]}
    assert first["cursor"][0]["continuation"]["count"] == 5


@pytest.mark.parametrize("last_seq", [1, 4, 5, 8])
def test_checkpoints_saved_before_the_loop_counted_still_resume(last_seq: int) -> None:
    # 1: inside iteration 0; 4: between iterations 1 and 2; 5: inside iteration 2,
    # its first step done; 8: the goal met at iteration 4, the loop not yet closed.
    whole = Harness()
    reference = whole.run(counted(5), options=ECHO)
    h = Harness()
    run_id = load_old_run(h, last_seq)
    h.clock.advance(60)
    result = h.resume(run_id, allow_running_takeover=True)
    assert result.status is RunStatus.COMPLETED
    assert result.output == reference.output == expected_output(4)
    final = h.store.load_latest_checkpoint(run_id)
    assert final.variables == whole.store.load_latest_checkpoint(reference.run_id).variables
    rest = started(h.events.events)
    assert rest == {1: ["count/0/b", "count/1/a", "count/1/b", "count/2/a", "count/2/b",
                        "count/3/a", "count/3/b"],
                    4: ["count/2/a", "count/2/b", "count/3/a", "count/3/b"],
                    5: ["count/2/b", "count/3/a", "count/3/b"],
                    8: []}[last_seq]
