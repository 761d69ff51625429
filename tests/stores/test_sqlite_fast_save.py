"""An owner's checkpoint on SQLite: one statement, no Python in it, only over its own row."""

from __future__ import annotations

import collections
import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from stores import sqlite_saves, sqlite_schema
from stores.base import CorruptRecord, Settlement, StaleAttempt
from stores.deltas import SavedLists, encode_body
from stores.records import RunRecord
from stores.sqlite import SqliteRunStore
from stores.sqlite_rows import row_digest
from tests.stores.sqlite_owned_run import NOW, checkpoint, owned_run_store


@contextlib.contextmanager
def _raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of someone else's (no store of ours), with the seal function."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        sqlite_schema.register_functions(raw)
        yield raw


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """How often SQL called `row_digest`, by the kind of row it sealed."""
    calls: collections.Counter[str] = collections.Counter()

    def counting(*values: object) -> str:
        calls[str(values[0])] += 1
        return row_digest(*values)

    monkeypatch.setattr(sqlite_schema, "row_digest", counting)
    return calls


def test_an_owners_checkpoint_is_one_statement_that_calls_no_python(
        tmp_path: Path, counted: collections.Counter[str]) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        counted.clear()
        for seq in range(2, 6):
            store.save_checkpoint(checkpoint(seq), expected_attempt=1,
                                  lease_expires_at=NOW + timedelta(seconds=100 + seq))
        store._conn.set_trace_callback(None)
        # SQLite traces a statement again for each trigger program it runs: one
        # distinct statement per save, and no transaction around it.
        sent = [s for index, s in enumerate(statements)
                if index == 0 or s != statements[index - 1]]
        assert len(sent) == 4, sent
        assert all(s.startswith("INSERT INTO temp.checkpoint_saves") for s in sent)
        assert counted["run"] == 0
        run = store.load_run("r1")
        assert run is not None and run.checkpoint_seq == 5
        assert run.lease_expires_at == NOW + timedelta(seconds=105)
    with SqliteRunStore(tmp_path / "runs.sqlite") as reopened:  # read from the file alone
        assert reopened.load_run("r1") == run
        assert reopened.load_latest_checkpoint("r1") == checkpoint(5)


def test_a_row_another_writer_changed_is_decided_on_a_read(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with owned_run_store(path) as store:
        with SqliteRunStore(path) as other:  # another process takes the run over
            other.resume_run("r1", owner="them", now=NOW + timedelta(seconds=600),
                             lease_seconds=60, allow_running_takeover=True)
        with pytest.raises(StaleAttempt):
            store.save_checkpoint(checkpoint(2), expected_attempt=1)
        assert [info.seq for info in store.list_checkpoints("r1")] == [1]


def test_a_damaged_column_is_never_sealed_by_a_save(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with owned_run_store(path) as store:
        with _raw(path) as raw:  # damage: a changed byte, not resealed
            raw.execute("UPDATE runs SET tenant = 'acmf'")
        with contextlib.suppress(CorruptRecord):  # caught now, or at the next read
            store.save_checkpoint(checkpoint(2), expected_attempt=1)
        with pytest.raises(CorruptRecord, match="checksum"):
            store.load_run("r1")
    with SqliteRunStore(path) as reopened, pytest.raises(CorruptRecord, match="checksum"):
        reopened.load_run("r1")


def test_the_delta_cache_holds_many_running_runs_and_drops_an_ended_one(
        tmp_path: Path) -> None:
    runs = [f"r{index}" for index in range(200)]
    with SqliteRunStore(tmp_path / "runs.sqlite") as store:
        for run_id in runs:
            store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:m"))
            store.resume_run(run_id, owner="me", now=NOW, lease_seconds=60)
            store.save_checkpoint(checkpoint(1).model_copy(update={"run_id": run_id}),
                                  expected_attempt=1)
        incarnations = {run_id: store._rows.decoded[run_id].incarnation for run_id in runs}
        # Every one of them saves its next checkpoint as a delta without a read.
        assert all(store._saves.base(incarnations[run_id], 1) is not None for run_id in runs)
        store.complete_run("r0", expected_attempt=1, output="done", at=NOW)
        assert store._saves.base(incarnations["r0"], 1) is None
        assert store._saves.base(incarnations["r1"], 1) is not None


def test_a_settling_save_is_encoded_before_its_transaction_and_sealed_in_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        encoded_under_lock: list[bool] = []

        def encoding(*args: Any) -> tuple[str, SavedLists]:
            encoded_under_lock.append(store._lock.locked())
            return encode_body(*args)

        monkeypatch.setattr(sqlite_saves, "encode_body", encoding)
        store.save_checkpoint_settling(checkpoint(2), (), expected_attempt=1, at=NOW,
                                       reservations=("tool:a",))
        store.save_checkpoint_settling(checkpoint(3), (Settlement("tool:a", {"ok": 1}),),
                                       expected_attempt=1, at=NOW, reservations=("tool:b",))
        # Each encoded once, on the writer's thread, outside the store's lock.
        assert encoded_under_lock == [False, False]
        # Sealed over the row its reservations moved: the next save is the fast
        # statement again, and a store opened afresh reads every row as sealed.
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        store.save_checkpoint(checkpoint(4), expected_attempt=1)
        store._conn.set_trace_callback(None)
        assert statements and all(s.startswith("INSERT INTO temp.checkpoint_saves")
                                  for s in statements), statements
    with SqliteRunStore(tmp_path / "runs.sqlite") as reopened:
        assert reopened.load_latest_checkpoint("r1") == checkpoint(4)
        effects = {effect.key: effect for effect in reopened.list_effects("r1")}
        assert effects["tool:a"].result == {"ok": 1}
        assert effects["tool:b"].status.value == "reserved"


def test_an_encoding_made_for_another_incarnation_is_made_again(tmp_path: Path) -> None:
    with owned_run_store(tmp_path / "runs.sqlite") as store:
        stale = store._saves.encode(checkpoint(2), 1, None)
        assert stale is not None
        prepared = store._saves.prepare(checkpoint(2), 1, None,
                                        encoded=stale._replace(incarnation="gone", row=()))
        assert prepared is not None
        assert prepared.row == stale.row  # encoded again, against this incarnation's base
        assert prepared.known.incarnation == store._rows.decoded["r1"].incarnation
