"""Saves queued on SQLite (`queue_checkpoint`): made by the store's committer, shared with
every other write's transaction, and each caller told its own outcome once that
transaction ended, never before.

Saves are made to queue together by holding the store's connection lock (what a
transaction in the making holds) while they are queued; transactions are counted by
the COMMITs SQLite traces on the store's connection, never by timing.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from stores.base import InvalidTransition, Settlement, StaleAttempt, StoreUnavailable
from stores.records import EffectStatus
from stores.sqlite import SqliteRunStore
from stores.sqlite_group_commit import COMMITTER_THREAD_NAME
from tests.stores.sqlite_groups import (
    HANG,
    NOW,
    Outcome,
    numbered_checkpoint,
    other_connection,
    record_outcome,
    start_runs,
    statements_of,
    wait_for_queue,
    wait_until,
)

RUNS = [f"r{index}" for index in range(5)]
_checkpoint = numbered_checkpoint


def _committed_seq(path: Path, run_id: str) -> int | None:
    """The run's latest checkpoint as another connection sees it: committed only."""
    with other_connection(path) as conn:
        row = conn.execute("SELECT max(seq) FROM checkpoints WHERE run_id = ?",
                           (run_id,)).fetchone()
    return None if row is None else row[0]


class Told:
    """What a queued save's caller was told, and on which thread, once each."""

    def __init__(self, path: Path | None = None, run_id: str = "") -> None:
        self.errors: list[BaseException | None] = []
        self.threads: list[str] = []
        self.seen_committed: int | None = None
        self._path = path
        self._run_id = run_id
        self.told = threading.Event()

    def __call__(self, error: BaseException | None) -> None:
        self.errors.append(error)
        self.threads.append(threading.current_thread().name)
        if self._path is not None:
            self.seen_committed = _committed_seq(self._path, self._run_id)
        self.told.set()

    def wait(self) -> BaseException | None:
        assert self.told.wait(HANG), "a queued save was never settled"
        assert len(self.errors) == 1
        return self.errors[0]


def _queue(store: SqliteRunStore, run_id: str, seq: int, told: Told) -> None:
    store.queue_checkpoint(_checkpoint(run_id, seq), settled=told, expected_attempt=1)


def test_queued_saves_and_waiting_writers_share_one_commit(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        told = [Told() for _ in RUNS[:3]]
        renewing = Outcome()
        saving = Outcome()
        writers = [
            threading.Thread(target=record_outcome, name="renewing", daemon=True, args=(
                lambda: store.renew_lease("r3", expected_attempt=1, now=NOW,
                                          lease_seconds=900), renewing)),
            threading.Thread(target=record_outcome, name="saving", daemon=True, args=(
                lambda: store.save_checkpoint(_checkpoint("r4", 2), expected_attempt=1),
                saving))]
        with statements_of(store) as statements:
            with store._lock:  # no transaction can begin: all five queue for the next
                writers[0].start()  # it leads, and waits for the lock
                wait_for_queue(store._commits, 1)
                for run_id, each in zip(RUNS[:3], told, strict=True):
                    _queue(store, run_id, 2, each)
                writers[1].start()
                wait_for_queue(store._commits, 5)
            for writer in writers:
                writer.join(HANG)
            assert [renewing.result(), saving.result()] == [None, None]
            assert [each.wait() for each in told] == [None, None, None]
        assert statements.count("COMMIT") == 1, statements
        # Told by the writer that led the transaction their saves were in.
        assert {name for each in told for name in each.threads} == {"renewing"}
        for run_id in [*RUNS[:3], "r4"]:
            assert _committed_seq(path, run_id) == 2
    with SqliteRunStore(path) as reopened:
        for run_id in [*RUNS[:3], "r4"]:
            assert reopened.load_latest_checkpoint(run_id) == _checkpoint(run_id, 2)


def test_a_queued_save_is_told_only_once_it_committed(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        told = [Told(path, run_id) for run_id in RUNS]
        for run_id, each in zip(RUNS, told, strict=True):
            _queue(store, run_id, 2, each)
        for each in told:
            assert each.wait() is None
            assert each.seen_committed == 2  # durable before its caller heard
        assert {name for each in told for name in each.threads} == {COMMITTER_THREAD_NAME}


def test_a_refused_queued_save_is_told_its_error_and_the_others_land(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        with SqliteRunStore(path) as other:  # another process takes r2 over
            other.resume_run("r2", owner="them", now=NOW + timedelta(seconds=900),
                             lease_seconds=600, allow_running_takeover=True)
        told = [Told() for _ in RUNS]
        with statements_of(store) as statements:
            with store._lock:
                for run_id, each in zip(RUNS, told, strict=True):
                    _queue(store, run_id, 2, each)
                # The committer leads the first and waits for the lock; all queue.
                wait_for_queue(store._commits, len(RUNS))
            errors = [each.wait() for each in told]
        assert statements.count("COMMIT") == 1, statements
        assert isinstance(errors[2], StaleAttempt)
        assert [error for index, error in enumerate(errors) if index != 2] == [None] * 4
        assert {run_id: _committed_seq(path, run_id) for run_id in RUNS} == \
            {"r0": 2, "r1": 2, "r2": 1, "r3": 2, "r4": 2}


def test_without_group_commit_every_queued_save_commits_alone(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path, group_commit=False) as store:
        start_runs(store, RUNS)
        told = [Told(path, run_id) for run_id in RUNS]
        with statements_of(store) as statements:
            for run_id, each in zip(RUNS, told, strict=True):
                _queue(store, run_id, 2, each)
            assert [each.wait() for each in told] == [None] * len(RUNS)
        # Each save one statement, which SQLite commits by itself: a transaction each.
        assert len({s for s in statements
                    if s.startswith("INSERT INTO temp.checkpoint_saves")}) == len(RUNS)
        assert not [s for s in statements if s.startswith(("BEGIN", "SAVEPOINT"))]
        assert all(each.seen_committed == 2 for each in told)


def test_closing_the_store_makes_the_queued_saves_first_and_refuses_later_ones(
        tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    store = SqliteRunStore(path)
    start_runs(store, RUNS)
    told = [Told() for _ in RUNS]
    for run_id, each in zip(RUNS, told, strict=True):
        _queue(store, run_id, 2, each)
    committer = store._commits._committer
    store.close()
    # Every save queued before the close was made and told before it returned.
    assert [each.errors for each in told] == [[None]] * len(RUNS)
    assert committer is not None and not committer.is_alive()
    late = Told()
    with pytest.raises(StoreUnavailable, match="closed"):
        _queue(store, "r0", 3, late)
    assert late.errors == []
    assert {run_id: _committed_seq(path, run_id) for run_id in RUNS} == dict.fromkeys(RUNS, 2)


def test_a_caller_that_fails_on_its_outcome_does_not_stop_the_committer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)

        def broken(error: BaseException | None) -> None:
            raise RuntimeError("the caller's own bug")

        after = Told(path, "r1")
        with store._lock:
            store.queue_checkpoint(_checkpoint("r0", 2), settled=broken, expected_attempt=1)
            _queue(store, "r1", 2, after)
            wait_until(lambda: len(store._commits._queue) >= 1, "the second save queued")
        assert after.wait() is None
        assert after.seen_committed == 2
        assert _committed_seq(path, "r0") == 2
        # The committer is still there for the next save. (It led r0's save, so
        # it told r0 last, after r1: once it makes the next save, it has logged.)
        again = Told(path, "r0")
        _queue(store, "r0", 3, again)
        assert again.wait() is None and again.seen_committed == 3
        assert "telling a queued write's writer its outcome failed" in caplog.text


def test_a_queued_settling_save_reserves_settles_and_saves_in_one_commit(
        tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        reserved = Told(path, "r0")
        store.queue_checkpoint_settling(_checkpoint("r0", 2), [], settled=reserved,
                                        expected_attempt=1, at=NOW, reservations=["call-1"])
        assert reserved.wait() is None and reserved.seen_committed == 2
        [effect] = store.list_effects("r0")
        assert effect.key == "call-1" and effect.status is EffectStatus.RESERVED
        with statements_of(store) as statements:
            settled = Told(path, "r0")
            store.queue_checkpoint_settling(
                _checkpoint("r0", 3), [Settlement("call-1", {"ok": True})], settled=settled,
                expected_attempt=1, at=NOW)
            assert settled.wait() is None and settled.seen_committed == 3
        assert statements.count("COMMIT") == 1
        [effect] = store.list_effects("r0")
        assert effect.status is EffectStatus.COMPLETED
        assert effect.result == {"ok": True}
        # A key the run already has is refused, and the checkpoint with it.
        again = Told(path, "r0")
        store.queue_checkpoint_settling(_checkpoint("r0", 4), [], settled=again,
                                        expected_attempt=1, at=NOW, reservations=["call-1"])
        assert isinstance(again.wait(), InvalidTransition)
        assert again.seen_committed == 3
