"""A run row SQLite reads as this store last wrote or read it is not checked again; any
change to it, by anyone, still is (`StoredRun.is_row`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from stores import sqlite_runs, sqlite_schema
from stores.base import CorruptRecord
from stores.records import RunRecord, RunStatus
from stores.sqlite import SqliteRunStore
from stores.sqlite_rows import RUN_SEAL_SQL
from tests.stores.sqlite_owned_run import NOW, checkpoint, owned_run_store


@contextlib.contextmanager
def _raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of someone else's (no store of ours), with the seal function."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        sqlite_schema.register_functions(raw)
        yield raw


def _counting_seal_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    checked: list[str] = []
    real = sqlite_runs.run_row

    def run_row(path: Path, row: Any) -> Any:
        checked.append(str(row[0]))
        return real(path, row)

    monkeypatch.setattr(sqlite_runs, "run_row", run_row)
    return checked


def test_a_row_the_store_knows_is_read_without_checking_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.sqlite"
    checked = _counting_seal_checks(monkeypatch)
    with owned_run_store(path) as store:  # its last write: a checkpoint's
        assert checked == []
        known = [store.load_run("r1") for _ in range(3)]
        assert checked == []
    with SqliteRunStore(path) as reopened:
        fresh = reopened.load_run("r1")
        assert checked == ["r1"]  # a store that knows nothing of the row checks it
    assert fresh is not None and fresh.checkpoint_seq == 1
    assert known == [fresh] * 3


# Changes to a known row made behind the store's back, none of them resealed
# consistently: each must fail the read as the first read of the row would.
DAMAGE: dict[str, str] = {
    "its seal": "UPDATE runs SET columns_checksum = '0' || columns_checksum",
    "a column": "UPDATE runs SET consumed_tokens = consumed_tokens + 1",
    "its record text": "UPDATE runs SET record = replace(record, 'running', 'runnin_')",
    # The seal made anew over the changed text, whose checksum no longer matches it.
    "its record text, resealed": ("UPDATE runs SET record = replace(record, 'running', "
                                  f"'runnin_'), columns_checksum = {RUN_SEAL_SQL}"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_known_row_changed_behind_the_store_is_caught(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "runs.sqlite"
    with owned_run_store(path) as store:
        store.load_run("r1")
        store.load_run("r1")  # known now, as a read left it
        with _raw(path) as raw:
            raw.execute(DAMAGE[damage])
        with pytest.raises(CorruptRecord, match="r1"):
            store.load_run("r1")


def test_a_known_row_another_writer_changed_is_read_as_it_now_is(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with owned_run_store(path) as store:
        assert store.load_run("r1").attempt == 1  # type: ignore[union-attr]
        with SqliteRunStore(path) as other:  # another process takes the run over
            taken = other.resume_run("r1", owner="them", now=NOW + timedelta(seconds=600),
                                     lease_seconds=60, allow_running_takeover=True)
        assert store.load_run("r1") == taken


Write = Callable[[SqliteRunStore], object]
WRITES: dict[str, Write] = {
    "a checkpoint": lambda store: store.save_checkpoint(
        checkpoint(2), expected_attempt=1, lease_expires_at=NOW + timedelta(seconds=300)),
    "a lease renewal": lambda store: store.renew_lease(
        "r1", expected_attempt=1, now=NOW.astimezone(timezone(timedelta(hours=2))),
        lease_seconds=90),
    "a run's end": lambda store: store.complete_run(
        "r1", expected_attempt=1, output="done",
        at=NOW.astimezone(timezone(timedelta(hours=-5)))),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_row_the_store_wrote_reads_as_the_file_holds_it(tmp_path: Path, write: str) -> None:
    """Known from the write itself (times given in any zone), the row still reads as a
    store that knows nothing of it reads it from the file: in UTC, columns applied."""
    path = tmp_path / "runs.sqlite"
    with owned_run_store(path) as store:
        WRITES[write](store)
        known = [store.load_run("r1") for _ in range(2)]
        with SqliteRunStore(path) as reopened:
            fresh = reopened.load_run("r1")
    assert fresh is not None
    assert known == [fresh, fresh]
    assert all(run is not None and run.updated_at.tzinfo is UTC for run in known)


def test_the_rows_kept_are_the_runs_in_flight_not_every_run_ever_seen(tmp_path: Path) -> None:
    """A server's store remembers rows for its runs' next writes; an ended run writes no
    more, so neither running it to its end nor reading it afterwards keeps its row
    (every run a long-lived `serve` ran, with its output, would stay in memory)."""
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        for index in range(50):
            run_id = f"r{index}"
            store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:m"))
            store.resume_run(run_id, owner="me", now=NOW, lease_seconds=60)
            store.complete_run(run_id, expected_attempt=1, output="x" * 1000, at=NOW)
            assert store.load_run(run_id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
        store.create_run(RunRecord(run_id="live", manifest_hash="sha256:m"))
        store.resume_run("live", owner="me", now=NOW, lease_seconds=60)
        assert set(store._rows.decoded) == {"live"}
    with SqliteRunStore(tmp_path / "runs.sqlite") as reader:  # another process's reads
        for index in range(50):
            reader.load_run(f"r{index}")
        reader.load_run("live")
        assert set(reader._rows.decoded) == {"live"}


# Writes that read the run row, then use it: the run's end, an effect's reservation.
AFTER_A_READ: dict[str, Callable[[SqliteRunStore], object]] = {
    "a cancel": lambda store: store.cancel_run("r1", at=NOW),
    "an effect's reservation": lambda store: store.begin_effect(
        "call-1", run_id="r1", expected_attempt=1, at=NOW),
}


@pytest.mark.parametrize("write", sorted(AFTER_A_READ))
def test_a_write_whose_row_was_dropped_after_its_read_reads_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str) -> None:
    """The row may go between a write's read and its use (its run ended on another
    thread): the write reads it again rather than failing."""
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        rows = store._rows
        read = rows.read

        def read_then_lose_the_row(conn: sqlite3.Connection, run_id: str,
                                   *, remember: bool = True) -> Any:
            found = read(conn, run_id, remember=remember)
            rows.forget(run_id)
            return found

        monkeypatch.setattr(rows, "read", read_then_lose_the_row)
        AFTER_A_READ[write](store)
        monkeypatch.undo()
        with SqliteRunStore(tmp_path / "runs.sqlite") as reopened:
            assert store.load_run("r1") == reopened.load_run("r1")
            assert store.list_effects("r1") == reopened.list_effects("r1")
            assert len(reopened.list_effects("r1")) == (write == "an effect's reservation")
