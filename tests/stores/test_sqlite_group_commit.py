"""Group commit on SQLite: concurrent writes share a transaction, each still its own.

Writes are made to queue together by holding the store's connection lock while
they start (`sqlite_groups`); transactions are counted by the COMMITs SQLite
traces on the store's connection, never by timing.
"""

from __future__ import annotations

import resource
import threading
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from stores.base import StaleAttempt, StoreError, StoreUnavailable
from stores.records import RunRecord, RunStatus
from stores.sqlite import SqliteRunStore
from tests.stores.sqlite_groups import (
    HANG,
    NOW,
    numbered_checkpoint,
    other_connection,
    start_runs,
    started,
    statements_of,
    together,
    wait_until,
)

RUNS = [f"r{index}" for index in range(6)]
_checkpoint = numbered_checkpoint


def _latest_seqs(path: Path) -> dict[str, int]:
    with other_connection(path) as conn:
        return dict(conn.execute("SELECT run_id, max(seq) FROM checkpoints GROUP BY run_id"))


def _saves(store: SqliteRunStore, seq: int) -> list[partial[None]]:
    return [partial(store.save_checkpoint, _checkpoint(run_id, seq), expected_attempt=1)
            for run_id in RUNS]


def test_writes_queued_during_a_transaction_share_the_next_commit(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        with statements_of(store) as statements:
            outcomes = together(store, [*_saves(store, 2),
                                        partial(store.renew_lease, "r0", expected_attempt=1,
                                                now=NOW, lease_seconds=900)])
        assert [outcome.result() for outcome in outcomes] == [None] * (len(RUNS) + 1)
        assert statements.count("COMMIT") == 1, statements
        assert statements.count("BEGIN IMMEDIATE") == 1
        # Each write is made apart: the lease's in a savepoint of its own, and
        # each save in one statement, atomic by itself.
        assert statements.count("SAVEPOINT group_member") == 1
        assert len([s for s in statements
                    if s.startswith("INSERT INTO temp.checkpoint_saves")]) == len(RUNS)
    assert _latest_seqs(path) == dict.fromkeys(RUNS, 2)
    with SqliteRunStore(path) as reopened:  # and each as saved
        for run_id in RUNS:
            assert reopened.load_latest_checkpoint(run_id) == _checkpoint(run_id, 2)
        run = reopened.load_run("r0")
        assert run is not None and run.lease_expires_at == NOW + timedelta(seconds=900)


def test_a_write_alone_makes_the_transaction_it_always_made(tmp_path: Path) -> None:
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        start_runs(store, RUNS)
        with statements_of(store) as statements:
            store.renew_lease("r0", expected_attempt=1, now=NOW, lease_seconds=900)
        assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
        assert not [s for s in statements if "SAVEPOINT" in s or "RELEASE" in s]


def test_without_group_commit_every_write_commits_alone(tmp_path: Path) -> None:
    with SqliteRunStore(tmp_path / "runs.sqlite", group_commit=False) as store:
        start_runs(store, RUNS)
        threads = [threading.Thread(target=store.renew_lease, args=(run_id,),
                                    kwargs={"expected_attempt": 1, "now": NOW,
                                            "lease_seconds": 900}) for run_id in RUNS]
        with statements_of(store) as statements:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(HANG)
        assert statements.count("COMMIT") == len(RUNS)
        assert not [s for s in statements if "SAVEPOINT" in s]


def test_a_refused_write_fails_alone_and_the_others_land(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        with SqliteRunStore(path) as other:  # another process takes r2 over
            other.resume_run("r2", owner="them", now=NOW + timedelta(seconds=900),
                             lease_seconds=600, allow_running_takeover=True)
        with other_connection(path) as raw:  # r4's end is refused after its checkpoint is written
            raw.execute("CREATE TRIGGER refuse BEFORE UPDATE ON runs"
                        " WHEN NEW.run_id = 'r4' AND NEW.status = 'completed'"
                        " BEGIN SELECT RAISE(ABORT, 'disk trouble'); END")
        writes = _saves(store, 2)
        writes[4] = partial(store.complete_run, "r4", expected_attempt=1, output="done",
                            at=NOW, checkpoint=_checkpoint("r4", 2))
        with statements_of(store) as statements:
            outcomes = together(store, writes)
        assert statements.count("COMMIT") == 1
        with pytest.raises(StaleAttempt):
            outcomes[2].result()
        with pytest.raises(StoreError, match="disk trouble"):
            outcomes[4].result()
        for index in (0, 1, 3, 5):
            assert outcomes[index].result() is None
        # r4's checkpoint went with its refused end; r2 is the new owner's.
        assert _latest_seqs(path) == {"r0": 2, "r1": 2, "r2": 1, "r3": 2, "r4": 1, "r5": 2}
        run = store.load_run("r4")
        assert run is not None and run.status is RunStatus.RUNNING
        with other_connection(path) as raw:
            raw.execute("DROP TRIGGER refuse")
        # The refused write left nothing behind: r4 ends as it should now.
        store.complete_run("r4", expected_attempt=1, output="done", at=NOW,
                           checkpoint=_checkpoint("r4", 2))
        assert store.load_latest_checkpoint("r4") == _checkpoint("r4", 2)


def test_writes_refused_one_after_another_each_see_the_one_before(tmp_path: Path) -> None:
    """Eight owners racing for one run in one transaction: exactly one wins, as if they
    had committed one by one."""
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        store.create_run(RunRecord(run_id="r", manifest_hash="sha256:m"))
        with statements_of(store) as statements:
            outcomes = together(store, [partial(store.resume_run, "r", owner=f"o{index}",
                                                now=NOW, lease_seconds=60)
                                        for index in range(8)])
        assert statements.count("COMMIT") == 1
        winners = [outcome for outcome in outcomes if outcome.error is None]
        assert len(winners) == 1
        assert all(isinstance(outcome.error, StoreError) for outcome in outcomes
                   if outcome not in winners)
        run = store.load_run("r")
        assert run is not None and (run.attempt, run.lease_owner) == (
            1, winners[0].value.lease_owner)


def test_a_failed_commit_fails_every_write_in_it_and_shows_none(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        refused = threading.Event()

        def trace(statement: str) -> None:
            # The disk refuses the WAL's growth from this COMMIT on (Python
            # ignores SIGXFSZ, so a write past the limit fails with EFBIG).
            if statement == "COMMIT" and not refused.is_set():
                refused.set()
                resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))

        store._conn.set_trace_callback(trace)
        try:
            outcomes = together(store, _saves(store, 2))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            store._conn.set_trace_callback(None)
        assert refused.is_set()
        errors = [outcome.error for outcome in outcomes]
        assert all(isinstance(error, StoreUnavailable) for error in errors), errors
        assert all(str(path) in str(error) for error in errors)
        assert len({id(error) for error in errors}) == len(errors)  # each writer its own
        assert _latest_seqs(path) == dict.fromkeys(RUNS, 1)
        # Nothing of them stayed behind either: the same saves land now.
        assert [outcome.result() for outcome in together(store, _saves(store, 2))] \
            == [None] * len(RUNS)
        for run_id in RUNS:
            assert store.load_latest_checkpoint(run_id) == _checkpoint(run_id, 2)
    assert _latest_seqs(path) == dict.fromkeys(RUNS, 2)


def test_no_writer_returns_before_the_commit_of_its_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        start_runs(store, RUNS)
        committing, go_on = threading.Event(), threading.Event()

        def trace(statement: str) -> None:
            if statement == "COMMIT":  # held until the test has looked
                committing.set()
                go_on.wait(HANG)

        store._conn.set_trace_callback(trace)
        try:
            with started(store._commits, store._lock, _saves(store, 2)) as outcomes:
                try:
                    wait_until(committing.is_set, "the group's COMMIT")
                    # Every write is made, the transaction is at its COMMIT: no
                    # writer has returned, and nobody else sees their writes.
                    assert not [outcome for outcome in outcomes if outcome.returned.is_set()]
                    assert _latest_seqs(path) == dict.fromkeys(RUNS, 1)
                finally:
                    go_on.set()
        finally:
            store._conn.set_trace_callback(None)
        assert [outcome.result() for outcome in outcomes] == [None] * len(RUNS)
    assert _latest_seqs(path) == dict.fromkeys(RUNS, 2)
