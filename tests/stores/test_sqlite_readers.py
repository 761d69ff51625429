"""SqliteRunStore's reads on connections of their own: never behind a commit, never
remembered for a write."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from stores.base import StoreUnavailable
from stores.deltas import SavedLists
from stores.records import RunRecord, RunStatus
from stores.sqlite import SqliteRunStore
from stores.sqlite_readers import ReadConnections
from stores.sqlite_rows import RUN_FIELDS
from tests.stores.sqlite_groups import HANG
from tests.stores.sqlite_owned_run import checkpoint, owned_run_store


def test_a_read_does_not_wait_for_a_transaction_being_committed(tmp_path: Path) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        read: list[RunRecord | None] = []
        # What a group commit's leader holds through its fsync: the write
        # connection's lock, and the database's write lock.
        with store._lock:
            store._conn.execute("BEGIN IMMEDIATE")
            try:
                reader = threading.Thread(target=lambda: read.append(store.load_run("r1")))
                reader.start()
                reader.join(HANG)
                assert not reader.is_alive(), "the read waited for the writer"
                assert store.find_run_key("no such key") is None
                assert [info.seq for info in store.list_checkpoints("r1")] == [1]
            finally:
                store._conn.execute("ROLLBACK")
        assert read[0] is not None and read[0].status is RunStatus.RUNNING


def test_a_read_sees_every_write_that_returned_before_it(tmp_path: Path) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        for seq in range(2, 6):
            store.save_checkpoint(checkpoint(seq), expected_attempt=1)
            found = store.load_latest_checkpoint("r1")
            assert found is not None and found.seq == seq
            loaded = store.load_run("r1")
            assert loaded is not None and loaded.checkpoint_seq == seq


def test_an_older_row_read_meanwhile_is_not_what_the_next_write_goes_over(
        tmp_path: Path) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store, store._read() as older:
        before = store._row(older, "r1")[0]  # the read's snapshot starts here
        store.save_checkpoint(checkpoint(2), expected_attempt=1)
        # Read after the write, in the snapshot from before it.
        stale = store._row(older, "r1")[0]
        assert before is not None and stale is not None and stale.checkpoint_seq == 1
        remembered = store._rows.decoded["r1"]
        assert remembered.values[RUN_FIELDS.index("checkpoint_seq")] == 2
        # The next save still goes over the row as the last write left it.
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        try:
            store.save_checkpoint(checkpoint(3), expected_attempt=1)
        finally:
            store._conn.set_trace_callback(None)
        assert [s for s in statements if s.lstrip().upper().startswith("SELECT")] == []
    with SqliteRunStore(tmp_path / "runs.sqlite") as reopened:
        assert [info.seq for info in reopened.list_checkpoints("r1")] == [1, 2, 3]


def test_lists_read_on_an_older_snapshot_never_replace_a_later_delta_base(
        tmp_path: Path) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        store.save_checkpoint(checkpoint(2), expected_attempt=1)
        incarnation = store._rows.decoded["r1"].incarnation
        assert store._saves.base(incarnation, 2) is not None
        store._saves.remember_read(incarnation, SavedLists(seq=1, lists={}))
        assert store._saves.base(incarnation, 2) is not None
        assert store._saves.base(incarnation, 1) is None


def test_a_read_connection_cannot_change_the_file(tmp_path: Path) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        with pytest.raises(StoreUnavailable, match=r"runs\.sqlite"), store._read() as conn:
            conn.execute("DELETE FROM runs")
        assert store.load_run("r1") is not None


def test_read_connections_are_kept_for_the_next_read_and_bounded(tmp_path: Path) -> None:
    with SqliteRunStore(tmp_path / "runs.sqlite"):  # makes the file
        pass
    readers = ReadConnections(tmp_path / "runs.sqlite", 5.0, limit=2)
    try:
        with readers.reading() as first:
            pass
        with readers.reading() as again:
            assert again is first
        held = threading.Event()
        release = threading.Event()
        third_in = threading.Event()

        def hold() -> None:
            with readers.reading():
                held.set()
                release.wait(HANG)

        def third() -> None:
            with readers.reading():
                third_in.set()

        holders = [threading.Thread(target=hold) for _ in range(2)]
        for holder in holders:
            held.clear()
            holder.start()
            assert held.wait(HANG)
        waiting = threading.Thread(target=third)
        waiting.start()
        # Both connections are out: the third reader waits for one to come back.
        assert not third_in.wait(0.2)
        release.set()
        assert third_in.wait(HANG)
        for thread in (*holders, waiting):
            thread.join(HANG)
    finally:
        readers.close()


def test_a_read_after_close_is_refused_and_a_busy_connection_closes_as_it_returns(
        tmp_path: Path) -> None:
    store = owned_run_store(tmp_path / "runs.sqlite")
    with store._read() as conn:
        store.close()
        assert store._row(conn, "r1")[0] is not None  # a read under way ends normally
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
    with pytest.raises(StoreUnavailable, match="closed"):
        store.load_run("r1")
