"""The SQLite file's layout for cheap commits (schema version 4): a file written before
(version 3) opens migrated, every run, checkpoint, effect and orphan reading as before
and runs going on; and a checkpoint save writes the pages this layout promises."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stores.base import CorruptRecord
from stores.records import Checkpoint, RunRecord
from stores.sqlite import SqliteRunStore
from stores.sqlite_rows import SEQ_SPAN
from stores.sqlite_schema import SCHEMA_VERSION, migrate

T0 = datetime(2025, 1, 1, tzinfo=UTC)
POSITIONS_VERSION = 4  # the migration that keyed checkpoints by position


def _run(run_id: str) -> RunRecord:
    return RunRecord(run_id=run_id, manifest_hash="sha256:m", created_at=T0)


def _checkpoint(run_id: str, seq: int, attempt: int = 1) -> Checkpoint:
    return Checkpoint(run_id=run_id, seq=seq, attempt=attempt, manifest_hash="sha256:m",
                      transcript=[{"id": f"{run_id}-{n}", "type": "message", "text": "x" * n}
                                  for n in range(1, seq + 1)],
                      variables={"n": seq}, created_at=T0 + timedelta(seconds=seq))


@contextlib.contextmanager
def _raw(path: Path) -> Iterator[sqlite3.Connection]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        yield raw


def _columns(raw: sqlite3.Connection, table: str) -> str:
    return ", ".join(row[1] for row in raw.execute(f"PRAGMA main.table_info({table})"))


def _version_3_copy(current: Path, old: Path) -> None:
    """`old`: a file at schema version 3 holding the rows of the store at `current`.

    Seals are the same in both versions, so the copied rows are rows version 3
    wrote; owned rows go first so the version 3 triggers find no run to move."""
    with _raw(old) as raw:
        migrate(raw, version=POSITIONS_VERSION - 1)
        raw.execute("ATTACH DATABASE ? AS current", (str(current),))
        for table in ("effects", "approvals", "checkpoints", "runs"):
            columns = _columns(raw, table)
            # Version 3 kept the definition in the run row.
            selected = columns.replace(
                "definition,", "(SELECT definition FROM current.run_definitions AS d"
                " WHERE d.run_key = t.run_key),", 1) if table == "runs" else columns
            raw.execute(f"INSERT INTO main.{table} ({columns}) SELECT {selected}"
                        f" FROM current.{table} AS t")
        raw.execute("UPDATE main.run_count SET runs = (SELECT runs FROM current.run_count),"
                    " checksum = (SELECT checksum FROM current.run_count)")
        raw.execute("DETACH DATABASE current")


def _reads(store: SqliteRunStore, run_ids: list[str]) -> dict[str, Any]:
    return {run_id: (store.load_run(run_id), store.list_checkpoints(run_id),
                     store.load_checkpoints(run_id, 1, 99), store.list_effects(run_id))
            for run_id in run_ids}


def test_a_version_3_file_opens_migrated_and_its_runs_go_on(tmp_path: Path) -> None:
    current, old = tmp_path / "current.sqlite", tmp_path / "old.sqlite"
    with SqliteRunStore(current) as store:
        for run_id in ("r1", "r2", "r3"):
            store.create_run(_run(run_id))
        for run_id, saved in (("r1", 3), ("r2", 2)):
            store.resume_run(run_id, owner="w1", now=T0, lease_seconds=60)
            for seq in range(1, saved + 1):
                store.save_checkpoint(_checkpoint(run_id, seq), expected_attempt=1)
        store.begin_effect("tool-1", run_id="r1", expected_attempt=1, at=T0)
        store.complete_run("r2", expected_attempt=1, output={"done": True}, at=T0)
        before = _reads(store, ["r1", "r2", "r3"])
    _version_3_copy(current, old)
    with _raw(old) as raw:  # it really is version 3: no positions, a (run_id, seq) key
        assert "position" not in _columns(raw, "checkpoints")
        assert raw.execute("SELECT count(*) FROM runs WHERE length(definition) > 100"
                           ).fetchone()[0] == 3
        assert raw.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 3

    with SqliteRunStore(old) as store:
        assert _reads(store, ["r1", "r2", "r3"]) == before
        # The running run goes on where it was, and a new run gets a key of its own.
        store.save_checkpoint(_checkpoint("r1", 4), expected_attempt=1)
        store.create_run(_run("r4"))
        store.resume_run("r4", owner="w1", now=T0, lease_seconds=60)
        store.save_checkpoint(_checkpoint("r4", 1), expected_attempt=1)
        assert store.load_latest_checkpoint("r1") == _checkpoint("r1", 4)
        assert [info.seq for info in store.list_checkpoints("r4")] == [1]
        store.delete_run("r2")
        assert store.load_run("r2") is None
    with _raw(old) as raw:
        assert raw.execute("SELECT max(version) FROM schema_version").fetchone()[0] \
            == SCHEMA_VERSION
        rows = raw.execute("SELECT checkpoints.run_id, seq, position, run_key FROM checkpoints"
                           " JOIN runs USING (run_id)").fetchall()
        assert sorted((run_id, seq) for run_id, seq, _, _ in rows) == [
            ("r1", 1), ("r1", 2), ("r1", 3), ("r1", 4), ("r4", 1)]
        assert all(position == key * SEQ_SPAN + seq for _, seq, position, key in rows)
        assert len({key for _, _, _, key in rows}) == 2
        assert raw.execute("SELECT count(*) FROM checkpoints WHERE run_id = 'r2'"
                           ).fetchone()[0] == 0
        # The definitions moved out of the run rows, and r2's went with it.
        assert raw.execute("SELECT count(*) FROM runs WHERE definition != ''").fetchone()[0] == 0
        assert raw.execute("SELECT count(*) FROM run_definitions").fetchone()[0] == 3


def test_checkpoints_of_a_missing_run_are_still_found_after_the_migration(
        tmp_path: Path) -> None:
    current, old = tmp_path / "current.sqlite", tmp_path / "old.sqlite"
    with SqliteRunStore(current) as store:
        store.create_run(_run("r1"))
        store.resume_run("r1", owner="w1", now=T0, lease_seconds=60)
        for seq in (1, 2):
            store.save_checkpoint(_checkpoint("r1", seq), expected_attempt=1)
    _version_3_copy(current, old)
    with _raw(old) as raw:  # damage before the upgrade: the run row is gone
        raw.execute("DELETE FROM runs WHERE run_id = 'r1'")
    with SqliteRunStore(old) as store, \
            pytest.raises(CorruptRecord, match=r"run 'r1' .* is missing, but its checkpoints"):
        store.load_run("r1")


# -- what a save writes --------------------------------------------------------

WAL_HEADER, WAL_FRAME = 32, 24 + 4096  # SQLite's WAL layout for 4 KiB pages


def test_a_checkpoint_save_writes_its_leaf_and_the_run_row_only(tmp_path: Path) -> None:
    """Pages per commit (WAL frames), not time: the checkpoint table's leaf and the
    run row's, plus a share of the new pages the table grows by; no index leaf, and
    no overflow page of a large definition."""
    saves = 200
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        store._conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL keeps every frame
        big = RunRecord(run_id="r1", manifest_hash="sha256:m", created_at=T0,
                        variables={"items": list(range(3000))})  # a ~15 KB definition
        store.create_run(big)
        store.resume_run("r1", owner="w1", now=T0, lease_seconds=60)
        store.save_checkpoint(_checkpoint("r1", 1), expected_attempt=1)
        wal = Path(f"{tmp_path / 'runs.sqlite'}-wal")
        before = wal.stat().st_size
        for seq in range(2, saves + 2):
            # Each adds one transcript entry of ~600 bytes, as a loop iteration does.
            checkpoint = _checkpoint("r1", 1).model_copy(update={
                "seq": seq, "transcript": [{"id": str(n), "text": "x" * 600}
                                           for n in range(seq)]})
            store.save_checkpoint(checkpoint, expected_attempt=1)
        frames = (wal.stat().st_size - max(before, WAL_HEADER)) / WAL_FRAME
    # This layout writes about 2.5; the one before wrote about 4.6 (an index
    # leaf, and the definition's overflow page that held the run row's seal).
    assert frames / saves < 3, f"{frames / saves:.2f} pages per save"

