"""What SqliteRunStore does with its path: a new store where no file is, a refusal for
anything else that is not a whole store, and store errors (never sqlite3's) naming
the file for whatever goes wrong with it later."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stores import open_store
from stores.base import CorruptRecord, StoreError, StoreUnavailable
from stores.records import RunRecord
from stores.sqlite import SqliteRunStore
from stores.sqlite_schema import SCHEMA_VERSION, store_error

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _store_bytes(tmp_path: Path) -> bytes:
    path = tmp_path / "whole.sqlite"
    with SqliteRunStore(path) as store:
        store.create_run(RunRecord(run_id="r1", manifest_hash="m", created_at=T0))
    return path.read_bytes()


def _directory(path: Path) -> None:
    path.mkdir()


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.sqlite")


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _text(path: Path) -> None:
    path.write_text("runs: none\n" * 100)


def _other_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as other:
        other.execute("CREATE TABLE notes (text TEXT)")
        other.execute("INSERT INTO notes VALUES ('mine')")
        other.commit()


# (prepare the path, the error, what the message says)
LOCATIONS: dict[str, tuple[Callable[[Path], None], type[StoreError], str]] = {
    "a directory": (_directory, StoreUnavailable, "is a directory"),
    "a dangling symlink": (_dangling, StoreUnavailable, "symbolic link .* does not exist"),
    "an empty file": (_empty, CorruptRecord, r"is empty \(0 bytes\)"),
    "a text file": (_text, CorruptRecord, "not an SQLite database"),
    "another application's database": (_other_database, CorruptRecord,
                                       "not an agent-runtime store"),
}


@pytest.mark.parametrize("what", sorted(LOCATIONS))
def test_a_path_that_is_not_a_store_is_refused_and_left_alone(tmp_path: Path,
                                                              what: str) -> None:
    prepare, error, reason = LOCATIONS[what]
    path = tmp_path / "runs.sqlite"
    prepare(path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(error, match=f"{path}.*{reason}|{reason}") as raised:
        SqliteRunStore(path)
    assert str(path) in str(raised.value)
    # Nothing created over it or through it: an empty file stays empty.
    assert sorted(os.listdir(tmp_path)) == before
    if what == "an empty file":
        assert path.read_bytes() == b""
    if what == "another application's database":
        with contextlib.closing(sqlite3.connect(path)) as other:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="/dev/null is not a regular file"):
        SqliteRunStore("/dev/null")


@pytest.mark.parametrize("cut", [0.5, 0.1])
def test_a_truncated_database_is_corrupt_not_a_traceback(tmp_path: Path, cut: float) -> None:
    data = _store_bytes(tmp_path)
    path = tmp_path / "runs.sqlite"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(CorruptRecord, match=str(path)), SqliteRunStore(path) as store:
        store.load_run("r1")
        store.list_runs()


def test_damage_after_opening_is_a_store_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with SqliteRunStore(path) as store:
        for n in range(40):
            store.create_run(RunRecord(run_id=f"r{n}", manifest_hash="m" * 500,
                                       created_at=T0))
        data = bytearray(path.read_bytes())
        data[4096:] = b"\xff" * (len(data) - 4096)  # every page but the first
        with contextlib.closing(sqlite3.connect(path)) as raw:
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptRecord, match=str(path)):
            store.list_runs()


def test_a_new_store_is_whole_and_private_whatever_the_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    path = tmp_path / "linked" / "state" / "runs.sqlite"
    with SqliteRunStore(path) as store:
        store.create_run(RunRecord(run_id="r1", manifest_hash="m"))
    created = real / "state" / "runs.sqlite"
    assert stat.S_IMODE(created.stat().st_mode) == 0o600
    # Built beside it and linked into place: no half-made file is left behind (the
    # writers' lock file is named after the real file, as SQLite's -wal is).
    assert sorted(os.listdir(created.parent)) == ["runs.sqlite", "runs.sqlite-lock"]
    # A symlink to a store opens the store.
    (tmp_path / "alias.sqlite").symlink_to(created)
    with SqliteRunStore(tmp_path / "alias.sqlite") as again:
        assert again.load_run("r1") is not None


def test_a_newer_or_damaged_schema_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    SqliteRunStore(path).close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("DELETE FROM schema_version WHERE version = 1")
    with pytest.raises(CorruptRecord, match=f"{path}: its schema_version table is damaged"):
        SqliteRunStore(path)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("INSERT INTO schema_version VALUES (1, 'then')")
        raw.execute("INSERT INTO schema_version VALUES (?, 'later')", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreUnavailable, match=f"{path}: database schema version .* newer"):
        SqliteRunStore(path)


def test_open_store_reports_a_bad_sqlite_location_as_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="is a directory"):
        open_store("sqlite", tmp_path)


@pytest.mark.parametrize(("error", "kind"), [
    (sqlite3.DatabaseError("database disk image is malformed"), CorruptRecord),
    (sqlite3.DatabaseError("file is not a database"), CorruptRecord),
    (sqlite3.OperationalError("no such table: runs"), CorruptRecord),
    (sqlite3.IntegrityError("UNIQUE constraint failed: effects.run_id"), CorruptRecord),
    (sqlite3.OperationalError("database is locked"), StoreUnavailable),
    (sqlite3.OperationalError("disk I/O error"), StoreUnavailable),
    (sqlite3.OperationalError("unable to open database file"), StoreUnavailable),
    (sqlite3.ProgrammingError("Cannot operate on a closed database."), StoreUnavailable),
])
def test_sqlite_errors_map_to_store_errors(error: sqlite3.Error,
                                           kind: type[StoreError]) -> None:
    mapped = store_error(Path("/data/runs.sqlite"), error)
    assert type(mapped) is kind
    assert "/data/runs.sqlite" in str(mapped) and str(error) in str(mapped)


def test_a_closed_store_raises_a_store_error(tmp_path: Path) -> None:
    store = SqliteRunStore(tmp_path / "runs.sqlite")
    store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        store.load_run("r1")
