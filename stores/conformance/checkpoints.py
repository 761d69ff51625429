"""The contract's rules for checkpoints: the sequence, round trips, state changes
that commit a checkpoint atomically, and delta storage that loads exactly as saved.
"""

from __future__ import annotations

from typing import Any

import pytest

from stores.base import CheckpointConflict, RunStore, StaleAttempt
from stores.conformance.builders import (
    RUN,
    WRITES,
    assert_utc,
    at,
    finish,
    make_checkpoint,
    observe,
    start_busy_run,
    start_run,
)
from stores.records import ArtifactRef, CheckpointBudget, RunStatus


class CheckpointConformance:
    """Checkpoint sequence rules, round trips, atomic state changes, storage growth."""

    # -- checkpoints ----------------------------------------------------------

    def test_checkpoint_round_trips_every_field(self, store: RunStore) -> None:
        start_run(store)
        first, second = make_checkpoint(seq=1), make_checkpoint(seq=2, attempt=1)
        store.save_checkpoint(first, expected_attempt=1)
        store.suspend_run(RUN, expected_attempt=1, reason="approval", at=at(5),
                          details={"approval_id": "a"}, checkpoint=second)
        assert store.load_checkpoint(RUN, 1) == first
        assert store.load_checkpoint(RUN, 2) == second
        assert store.load_latest_checkpoint(RUN) == second
        loaded = store.load_checkpoint(RUN, 1)
        assert loaded is not None
        assert loaded.cursor[1].continuation == first.cursor[1].continuation
        assert_utc(loaded.created_at)

    def test_checkpoint_seq_starts_at_1(self, store: RunStore) -> None:
        start_run(store)
        for seq in (0, 2):
            with pytest.raises(CheckpointConflict):
                store.save_checkpoint(make_checkpoint(seq=seq), expected_attempt=1)
        assert store.list_checkpoints(RUN) == []
        assert store.load_latest_checkpoint(RUN) is None
        store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)
        assert [info.seq for info in store.list_checkpoints(RUN)] == [1]

    def test_checkpoint_seq_is_latest_plus_1_across_attempts(self, store: RunStore) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        with pytest.raises(CheckpointConflict):
            store.save_checkpoint(make_checkpoint(seq=1, attempt=2), expected_attempt=2)
        store.save_checkpoint(make_checkpoint(seq=3, attempt=2), expected_attempt=2)
        infos = store.list_checkpoints(RUN)
        assert [(info.seq, info.attempt) for info in infos] == [(1, 1), (2, 1), (3, 2)]

    def test_skipped_seq_raises_checkpoint_conflict(self, store: RunStore) -> None:
        start_busy_run(store)
        before = observe(store)
        with pytest.raises(CheckpointConflict):
            store.save_checkpoint(make_checkpoint(seq=3), expected_attempt=1)
        assert observe(store) == before

    def test_identical_resave_is_a_noop_ignoring_created_at(self, store: RunStore) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        before = observe(store)
        for seq in (2, 1):  # the latest and an older one
            store.save_checkpoint(make_checkpoint(seq=seq, created_at=at(777)), expected_attempt=1,
                                  lease_expires_at=at(888))
        assert observe(store) == before

    @pytest.mark.parametrize("seq", [1, 2], ids=["older", "latest"])
    def test_different_checkpoint_at_a_used_seq_raises_checkpoint_conflict(
            self, store: RunStore, seq: int) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        before = observe(store)
        with pytest.raises(CheckpointConflict):
            store.save_checkpoint(make_checkpoint(seq=seq, variables={"changed": True}),
                                  expected_attempt=1)
        assert observe(store) == before

    def test_load_checkpoint_of_an_unknown_seq_returns_none(self, store: RunStore) -> None:
        start_busy_run(store)
        assert store.load_checkpoint(RUN, 2) is None
        assert store.load_checkpoint(RUN, 0) is None

    def test_list_checkpoints_reports_seq_attempt_created_at_and_size(self,
                                                                      store: RunStore) -> None:
        start_run(store)
        assert store.list_checkpoints(RUN) == []
        store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)
        store.resume_run(RUN, owner="b", now=at(1000), lease_seconds=60,
                         allow_running_takeover=True)
        store.save_checkpoint(make_checkpoint(seq=2, attempt=2), expected_attempt=2)
        store.complete_run(RUN, expected_attempt=2, output=1, at=at(1001),
                           checkpoint=make_checkpoint(seq=3, attempt=2))
        infos = store.list_checkpoints(RUN)
        assert [(i.seq, i.attempt, i.created_at) for i in infos] == [
            (1, 1, at(1)), (2, 2, at(2)), (3, 2, at(3))]
        assert all(info.size_bytes > 0 for info in infos)
        for info in infos:
            assert_utc(info.created_at)

    @pytest.mark.parametrize("write", ["suspend_run", "complete_run", "fail_run"])
    def test_state_change_with_a_checkpoint_commits_both(self, store: RunStore,
                                                         write: str) -> None:
        start_busy_run(store)
        WRITES[f"{write}+checkpoint"](store, RUN, 1)
        run = store.load_run(RUN)
        assert run is not None
        assert run.status is {"suspend_run": RunStatus.SUSPENDED, "fail_run": RunStatus.FAILED,
                              "complete_run": RunStatus.COMPLETED}[write]
        assert store.load_latest_checkpoint(RUN) == make_checkpoint(seq=2)

    @pytest.mark.parametrize("conflict", ["skipped-seq", "used-seq"])
    @pytest.mark.parametrize("write", ["suspend_run", "complete_run", "fail_run"])
    def test_state_change_with_a_conflicting_checkpoint_changes_nothing(
            self, store: RunStore, write: str, conflict: str) -> None:
        start_busy_run(store)
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        bad = make_checkpoint(seq=4) if conflict == "skipped-seq" else make_checkpoint(
            seq=2, variables={"changed": True})
        before = observe(store)
        with pytest.raises(CheckpointConflict):
            if write == "suspend_run":
                store.suspend_run(RUN, expected_attempt=1, reason="sub-run", details={},
                                  at=at(100), checkpoint=bad)
            else:
                finish(store, write, checkpoint=bad)
        assert observe(store) == before

    def test_lists_that_do_not_extend_the_previous_ones_load_exactly_as_saved(
            self, store: RunStore) -> None:
        # Each list goes through: extended, shortened, an earlier entry changed at the
        # same length and at a greater length, emptied, regrown, left equal.
        names = [["a", "b"], ["a", "b", "c"], ["a", "x"], ["a", "x", "d"], ["a", "y", "d", "e"],
                 ["a", "y", "z", "e"], [], ["f"], ["f", "g", "h"], ["f", "g", "h"], ["f"]]
        start_run(store)
        saved = []
        for seq in range(1, len(names) + 1):
            transcript, results, files = (names[(seq - 1) * k % len(names)] for k in (1, 3, 5))
            checkpoint = make_checkpoint(
                seq=seq, transcript=[{"role": "user", "content": n} for n in transcript],
                step_results=[{"step_id": n} for n in results],
                artifacts=[ArtifactRef(uri=f"file:///{n}", sha256=n * 64, size=1) for n in files])
            saved.append(checkpoint)
            if seq == len(names):
                store.complete_run(RUN, expected_attempt=1, output=None, at=at(100),
                                   checkpoint=checkpoint)
            else:
                store.save_checkpoint(checkpoint, expected_attempt=1)
        for checkpoint in [*reversed(saved), *saved]:
            assert store.load_checkpoint(RUN, checkpoint.seq) == checkpoint
        assert store.load_latest_checkpoint(RUN) == saved[-1]
        assert store.load_checkpoints(RUN, 1, len(saved)) == saved
        assert store.load_checkpoints(RUN, 4, 7) == saved[3:7]

    def test_load_checkpoints_returns_each_of_a_range_as_load_checkpoint_does(
            self, store: RunStore) -> None:
        start_run(store)
        saved = [make_checkpoint(seq=seq, variables={"topic": "leases", "seq": seq % 3})
                 for seq in range(1, 7)]
        for checkpoint in saved[:-1]:
            store.save_checkpoint(checkpoint, expected_attempt=1)
        store.suspend_run(RUN, expected_attempt=1, reason="sub-run", details={}, at=at(100),
                          checkpoint=saved[-1])
        assert store.load_checkpoints(RUN, 1, 6) == saved
        assert store.load_checkpoints(RUN, 3, 3) == [saved[2]]
        assert store.load_checkpoints(RUN, 5, 6) == saved[4:]
        # The range is cut to the checkpoints the run has; none of them is [].
        assert store.load_checkpoints(RUN, 0, 2) == saved[:2]
        assert store.load_checkpoints(RUN, 5, 99) == saved[4:]
        assert store.load_checkpoints(RUN, 7, 9) == []
        assert store.load_checkpoints(RUN, 4, 3) == []
        assert store.load_checkpoints("no-such-run", 1, 6) == []
        # Each is a checkpoint of its own: changing one leaves the others as stored.
        first, second = store.load_checkpoints(RUN, 1, 2)
        first.transcript.append({"role": "user", "content": "changed"})
        assert second == saved[1]
        assert store.load_checkpoints(RUN, 1, 1) == [saved[0]]

    def test_load_checkpoints_of_a_run_without_checkpoints_is_empty(
            self, store: RunStore) -> None:
        start_run(store)
        assert store.load_checkpoints(RUN, 1, 10) == []

    def test_a_checkpoint_with_another_token_limit_moves_the_runs_budget(
            self, store: RunStore) -> None:
        # A resume may replace the limit: the record shows the one of its latest checkpoint.
        start_run(store)
        store.save_checkpoint(make_checkpoint(seq=1), expected_attempt=1)
        run = store.load_run(RUN)
        assert run is not None and run.budget.max_total_tokens == 10_000
        store.save_checkpoint(make_checkpoint(seq=2), expected_attempt=1)
        store.suspend_run(RUN, expected_attempt=1, reason="approval", at=at(10),
                          details={"approval_id": "a"}, checkpoint=make_checkpoint(seq=3))
        store.resume_run(RUN, owner="b", now=at(20), lease_seconds=60)
        raised = make_checkpoint(seq=4, attempt=2,
                                 budget=CheckpointBudget(max_total_tokens=50_000,
                                                         consumed_tokens=400))
        store.save_checkpoint(raised, expected_attempt=2)
        run = store.load_run(RUN)
        assert run is not None and run.budget.max_total_tokens == 50_000
        assert run.checkpoint_seq == 4
        # Fenced like every write: a superseded attempt's checkpoint moves nothing.
        before = observe(store)
        with pytest.raises(StaleAttempt):
            store.save_checkpoint(make_checkpoint(seq=5, attempt=1), expected_attempt=1)
        assert observe(store) == before
        unlimited = make_checkpoint(seq=5, attempt=2, budget=CheckpointBudget(
            max_total_tokens=None, consumed_tokens=500))
        store.complete_run(RUN, expected_attempt=2, output=1, at=at(30), checkpoint=unlimited)
        run = store.load_run(RUN)
        assert run is not None and run.budget.max_total_tokens is None
        assert run.status is RunStatus.COMPLETED

    def test_storage_grows_linearly_with_an_appended_transcript(self, store: RunStore) -> None:
        start_run(store)
        transcript: list[dict[str, Any]] = []
        for seq in range(1, 201):
            transcript = [*transcript, {"role": "assistant", "n": seq, "content": "x" * 180}]
            store.save_checkpoint(make_checkpoint(seq=seq, transcript=transcript, step_results=[],
                                                  artifacts=[]), expected_attempt=1)
        sizes = [info.size_bytes for info in store.list_checkpoints(RUN)]
        assert len(sizes) == 200
        assert sum(sizes[-20:]) < 3 * sum(sizes[10:30]), (sizes[10:30], sizes[-20:])
        assert store.load_latest_checkpoint(RUN) == make_checkpoint(
            seq=200, transcript=transcript, step_results=[], artifacts=[])
