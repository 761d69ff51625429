"""What only the SQLite store has to prove: files, pragmas, migrations,
durability, cross-instance and cross-process fencing, corruption, delta storage.

The RunStore contract itself is checked by the shared conformance suite.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import re
import sqlite3
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stores.base import (
    CorruptRecord,
    LeaseHeld,
    StaleAttempt,
    StoreError,
)
from stores.records import Checkpoint, ParentRef, RunRecord, RunStatus, Suspension
from stores.sqlite import SqliteRunStore
from stores.sqlite_rows import (
    CHECKPOINT_SELECT,
    DEFINITION,
    NOT_IN_RECORD,
    RUN_SEAL_SQL,
    digest,
    micros,
    row_digest,
)
from stores.sqlite_schema import SCHEMA_VERSION, migrate

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _run(run_id: str = "r1", **fields: Any) -> RunRecord:
    return RunRecord(run_id=run_id, manifest_hash="sha256:m", created_at=T0, **fields)


def _checkpoint(seq: int, attempt: int = 1, run_id: str = "r1",
                transcript: list[dict[str, Any]] | None = None) -> Checkpoint:
    return Checkpoint(run_id=run_id, seq=seq, attempt=attempt, manifest_hash="sha256:m",
                      transcript=transcript or [], variables={"n": seq},
                      created_at=T0 + timedelta(seconds=seq))


def _started(store: SqliteRunStore, run_id: str = "r1") -> RunRecord:
    store.create_run(_run(run_id))
    return store.resume_run(run_id, owner="w1", now=T0, lease_seconds=60)


@contextlib.contextmanager
def _raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection, as an operator or an outside process would open one."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        yield raw


def _reseal(raw: sqlite3.Connection) -> None:
    """Recompute every row's seal, as an edit that knows the store's scheme would."""
    raw.create_function("row_digest", -1, row_digest)
    raw.execute(f"UPDATE runs SET columns_checksum = {RUN_SEAL_SQL}")
    raw.execute(f"UPDATE checkpoints SET columns_checksum = row_digest('checkpoint',"
                f" {CHECKPOINT_SELECT.removesuffix(', columns_checksum')})")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "runs.sqlite"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteRunStore]:
    with SqliteRunStore(path) as opened:
        yield opened


def _mode(file: Path) -> int:
    return stat.S_IMODE(file.stat().st_mode)


# -- files and pragmas --------------------------------------------------------

def test_database_and_wal_files_are_private(store: SqliteRunStore, path: Path) -> None:
    assert path.parent.is_dir()  # created on open
    _started(store)
    store.save_checkpoint(_checkpoint(1), expected_attempt=1)
    wal = Path(f"{path}-wal")
    assert wal.exists()
    assert _mode(path) == 0o600
    assert _mode(wal) == 0o600
    shm = Path(f"{path}-shm")
    if shm.exists():
        assert _mode(shm) == 0o600


def test_wal_journal_and_full_sync_by_default(store: SqliteRunStore, path: Path) -> None:
    with _raw(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_normal_sync_is_an_explicit_opt_in(path: Path) -> None:
    with SqliteRunStore(path, synchronous="NORMAL") as relaxed:
        assert relaxed._conn.execute("PRAGMA synchronous").fetchone()[0] == 1


@pytest.mark.parametrize("value", ["OFF", "EXTRA", "", "FULL; DROP TABLE runs"])
def test_other_synchronous_values_are_refused(path: Path, value: str) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteRunStore(path, synchronous=value)


# -- migrations and durability -------------------------------------------------

def test_migrations_are_recorded_and_idempotent(path: Path) -> None:
    SqliteRunStore(path).close()
    with SqliteRunStore(path) as again:
        again.create_run(_run())
    with _raw(path) as raw:
        versions = [row[0] for row in raw.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


def test_a_newer_schema_is_refused(path: Path) -> None:
    SqliteRunStore(path).close()
    with _raw(path) as raw:
        raw.execute("INSERT INTO schema_version VALUES (?, 'later')", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer"):
        SqliteRunStore(path)


# The run columns of schema version 1, in the order its store wrote them.
_VERSION_1_FIELDS = ("status", "attempt", "parent_run_id", "lease_expires_at", "created_at",
                     "checkpoint_seq", "consumed_tokens", "updated_at", "record", "checksum")


def _write_version_1_row(raw: sqlite3.Connection, run: RunRecord, *,
                         definition: str | None = None) -> None:
    """A run row as the version-1 store wrote it (its records had no resume request)."""
    if definition is None:
        definition = run.model_dump_json(include=DEFINITION)
    record = run.model_dump_json(exclude=NOT_IN_RECORD | {"resume_requested_at", "resume_reason"})
    lease = None if run.lease_expires_at is None else micros(run.lease_expires_at)
    values = (run.status.value, run.attempt, run.parent.run_id if run.parent else None, lease,
              micros(run.created_at), run.checkpoint_seq or 0, run.consumed_tokens,
              micros(run.updated_at), record, digest(record))
    raw.execute(f"INSERT INTO runs (run_id, incarnation, definition, definition_checksum,"
                f" {', '.join(_VERSION_1_FIELDS)}) VALUES (?, ?, ?, ?,"
                f" {', '.join('?' * len(values))})",
                (run.run_id, f"incarnation-{run.run_id}", definition, digest(definition),
                 *values))


def test_a_version_1_file_opens_migrated_with_its_runs(path: Path) -> None:
    waiting = _run("r1", status=RunStatus.SUSPENDED, attempt=1, tenant="acme", updated_at=T0,
                   suspension=Suspension(reason="approval", details={"approval_id": "a1"}))
    queued = _run("r2", updated_at=T0)
    child = _run("r3", tenant="acme", parent=ParentRef(run_id="r1", step_path="loop/0"),
                 updated_at=T0)
    path.parent.mkdir(parents=True)
    with _raw(path) as raw:
        migrate(raw, version=1)
        for run in (waiting, queued, child):
            _write_version_1_row(raw, run)
        # A damaged definition must not stop the migration; reading it reports it.
        _write_version_1_row(raw, _run("r4", tenant="acme"), definition="{not json")
    with SqliteRunStore(path) as store:
        for run in (waiting, queued, child):
            assert store.load_run(run.run_id) == run
        with pytest.raises(CorruptRecord, match="run 'r4'"):
            store.load_run("r4")
        assert [r.run_id for r in store.list_runs(tenant="acme", statuses={
            RunStatus.SUSPENDED, RunStatus.CREATED}, parent_run_id="r1").runs] == ["r3"]
        assert [r.run_id for r in store.list_runs(
            tenant="acme", newest_first=True, cursor="r4").runs] == ["r3", "r1"]
        assert store.list_runs(resume_requested_before=T0 + timedelta(days=1)).runs == []
        store.resolve_approval("r1", "a1", approved=True, response=None, responded_by=None,
                               at=T0 + timedelta(seconds=5))
        assert [r.run_id for r in store.list_runs(
            resume_requested_before=T0 + timedelta(seconds=6)).runs] == ["r1"]
        resumed = store.resume_run("r1", owner="w", now=T0 + timedelta(seconds=7),
                                   lease_seconds=60)
        store.save_checkpoint(_checkpoint(1, attempt=2), expected_attempt=2)
        assert resumed.resume_requested_at is None
        assert store.list_runs(resume_requested_before=T0 + timedelta(days=1)).runs == []
    with _raw(path) as raw:
        versions = [row[0] for row in raw.execute("SELECT version FROM schema_version")]
        indexes = {row[0] for row in raw.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")}
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert {"runs_by_tenant", "runs_by_resume_request"} <= indexes


@pytest.mark.parametrize("change", [
    ("tenant", "acme", {"tenant": "acme"}),
    ("resume_requested_at", 0, {"resume_requested_before": T0}),
])
@pytest.mark.parametrize("resealed", [False, True])
def test_a_filter_column_that_disagrees_with_the_texts_is_corrupt(
        store: SqliteRunStore, path: Path, change: tuple[str, object, dict[str, Any]],
        resealed: bool) -> None:
    column, value, filters = change
    _started(store)
    store.suspend_run("r1", expected_attempt=1, reason="sub-run", details={}, at=T0)
    with _raw(path) as raw:
        raw.execute(f"UPDATE runs SET {column} = ? WHERE run_id = 'r1'", (value,))
        if resealed:  # what only a deliberate edit does: the cross-check still holds
            _reseal(raw)
    expected = f"its {column} column disagrees" if resealed else "columns failed their checksum"
    for read in (lambda: store.list_runs(**filters), lambda: store.load_run("r1")):
        with pytest.raises(CorruptRecord, match=expected):
            read()


def test_everything_survives_close_and_reopen(path: Path) -> None:
    with SqliteRunStore(path) as first:
        _started(first)
        first.save_checkpoint(_checkpoint(1, transcript=[{"m": 1}]), expected_attempt=1)
        first.begin_effect("k1", run_id="r1", expected_attempt=1, at=T0)
        first.complete_effect("k1", run_id="r1", expected_attempt=1, result={"ok": 1}, at=T0)
        first.suspend_run("r1", expected_attempt=1, reason="approval",
                          details={"approval_id": "a1"}, at=T0,
                          checkpoint=_checkpoint(2, transcript=[{"m": 1}, {"m": 2}]))
        first.resolve_approval("r1", "a1", approved=True, response="yes", responded_by="ops",
                               at=T0)
        before = first.load_run("r1")
    with SqliteRunStore(path) as second:
        assert second.load_run("r1") == before
        latest = second.load_latest_checkpoint("r1")
        assert latest is not None
        assert latest.seq == 2
        assert latest.transcript == [{"m": 1}, {"m": 2}]
        assert [info.seq for info in second.list_checkpoints("r1")] == [1, 2]
        assert second.list_effects("r1")[0].result == {"ok": 1}
        run = second.load_run("r1")
        assert run is not None
        assert run.suspension is not None
        assert run.suspension.decision is not None


def test_delete_run_removes_every_row_it_owns(store: SqliteRunStore, path: Path) -> None:
    _started(store)
    store.begin_effect("k1", run_id="r1", expected_attempt=1, at=T0)
    store.suspend_run("r1", expected_attempt=1, reason="approval",
                      details={"approval_id": "a1"}, at=T0, checkpoint=_checkpoint(1))
    store.resolve_approval("r1", "a1", approved=False, response=None, responded_by=None, at=T0)
    store.cancel_run("r1", at=T0)
    store.delete_run("r1")
    with _raw(path) as raw:
        for table in ("runs", "checkpoints", "effects", "approvals"):
            assert raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


# -- two instances, threads ---------------------------------------------------

def test_two_instances_see_and_fence_each_other(path: Path) -> None:
    with SqliteRunStore(path) as a, SqliteRunStore(path) as b:
        _started(a)
        loaded = b.load_run("r1")
        assert loaded is not None
        assert loaded.attempt == 1
        a.save_checkpoint(_checkpoint(1, transcript=[{"m": 1}]), expected_attempt=1)
        taken = b.resume_run("r1", owner="w2", now=T0 + timedelta(minutes=5), lease_seconds=60,
                             allow_running_takeover=True)
        assert taken.attempt == 2
        with pytest.raises(StaleAttempt):
            a.save_checkpoint(_checkpoint(2, transcript=[{"m": 1}, {"m": 2}]),
                              expected_attempt=1)
        with pytest.raises(StaleAttempt):
            a.renew_lease("r1", expected_attempt=1, now=T0, lease_seconds=60)
        # b never saw checkpoint 1 being written: its delta is built from the file.
        b.save_checkpoint(_checkpoint(2, attempt=2, transcript=[{"m": 1}, {"x": 2}]),
                          expected_attempt=2)
        latest = a.load_latest_checkpoint("r1")
        assert latest is not None
        assert latest.transcript == [{"m": 1}, {"x": 2}]
    # A fresh instance that loads before it saves builds on what it loaded.
    with SqliteRunStore(path) as c:
        loaded_checkpoint = c.load_latest_checkpoint("r1")
        assert loaded_checkpoint is not None
        c.save_checkpoint(_checkpoint(3, attempt=2, transcript=[{"m": 1}, {"x": 2}, {"m": 3}]),
                          expected_attempt=2)
    with SqliteRunStore(path) as d:
        final = d.load_checkpoint("r1", 3)
        assert final is not None
        assert final.transcript == [{"m": 1}, {"x": 2}, {"m": 3}]
    with _raw(path) as raw:
        body = raw.execute("SELECT body FROM checkpoints WHERE seq = 3").fetchone()[0]
    assert json.loads(body)["lists"]["transcript"] == {"base": 2, "items": [{"m": 3}]}


def test_a_run_recreated_elsewhere_does_not_reuse_stale_deltas(path: Path) -> None:
    with SqliteRunStore(path) as a, SqliteRunStore(path) as b:
        _started(a)
        a.complete_run("r1", expected_attempt=1, output=None, at=T0,
                       checkpoint=_checkpoint(1, transcript=[{"old": 1}]))
        b.delete_run("r1")
        _started(b)
        b.suspend_run("r1", expected_attempt=1, reason="pause", details={}, at=T0,
                      checkpoint=_checkpoint(1, transcript=[{"new": 1}]))
        a.resume_run("r1", owner="w1", now=T0, lease_seconds=60)
        # a's cache once held [{"old": 1}] for seq 1: a prefix of what a saves now.
        a.save_checkpoint(_checkpoint(2, attempt=2, transcript=[{"old": 1}, {"m": 2}]),
                          expected_attempt=2)
        latest = b.load_latest_checkpoint("r1")
        assert latest is not None
        assert latest.transcript == [{"old": 1}, {"m": 2}]


def test_a_heartbeat_thread_can_use_the_store(store: SqliteRunStore) -> None:
    _started(store)
    errors: list[BaseException] = []

    def heartbeat() -> None:
        try:
            for beat in range(50):
                store.renew_lease("r1", expected_attempt=1, now=T0 + timedelta(seconds=beat),
                                  lease_seconds=60)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=heartbeat)
    thread.start()
    for seq in range(1, 51):
        store.save_checkpoint(_checkpoint(seq, transcript=[{"i": i} for i in range(seq)]),
                              expected_attempt=1)
    thread.join()
    assert errors == []
    assert [info.seq for info in store.list_checkpoints("r1")][-1] == 50


def test_a_checkpoint_and_its_state_change_roll_back_together(path: Path) -> None:
    with SqliteRunStore(path) as a, SqliteRunStore(path) as b:
        _started(a)
        a.save_checkpoint(_checkpoint(1, transcript=[{"m": 1}]), expected_attempt=1)
        with _raw(path) as raw:
            raw.execute("CREATE TRIGGER refuse BEFORE UPDATE ON runs"
                        " WHEN NEW.status = 'completed'"
                        " BEGIN SELECT RAISE(ABORT, 'disk trouble'); END")
        with pytest.raises(StoreError, match="disk trouble"):
            a.complete_run("r1", expected_attempt=1, output="done", at=T0,
                           checkpoint=_checkpoint(2, transcript=[{"m": 1}, {"m": 2}]))
        assert [info.seq for info in a.list_checkpoints("r1")] == [1]
        run = a.load_run("r1")
        assert run is not None
        assert run.status is RunStatus.RUNNING
        with _raw(path) as raw:
            raw.execute("DROP TRIGGER refuse")
        # Checkpoint 2 is now written differently elsewhere; the body a rolled
        # back must not serve as the base of a's next delta.
        b.save_checkpoint(_checkpoint(2, transcript=[{"m": 1}]), expected_attempt=1)
        final = _checkpoint(3, transcript=[{"m": 1}, {"m": 2}, {"m": 3}])
        a.complete_run("r1", expected_attempt=1, output="done", at=T0, checkpoint=final)
        assert b.load_checkpoint("r1", 3) == final


# -- corruption ---------------------------------------------------------------

def _flip_one_character(path: Path, table: str, column: str, where: str) -> None:
    with _raw(path) as raw:
        text = raw.execute(f"SELECT {column} FROM {table} WHERE {where}").fetchone()[0]
        middle = len(text) // 2
        damaged = text[:middle] + ("x" if text[middle] != "x" else "y") + text[middle + 1:]
        raw.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (damaged,))


def test_a_damaged_checkpoint_body_is_named(store: SqliteRunStore, path: Path) -> None:
    _started(store)
    for seq in (1, 2, 3):
        store.save_checkpoint(_checkpoint(seq, transcript=[{"i": i} for i in range(seq)]),
                              expected_attempt=1)
    _flip_one_character(path, "checkpoints", "body", "run_id = 'r1' AND seq = 2")
    expected = re.escape(f"checkpoint 2 of run 'r1' in {path} failed its checksum")
    with pytest.raises(CorruptRecord, match=expected):
        store.load_checkpoint("r1", 3)
    with pytest.raises(CorruptRecord, match=expected):
        store.load_latest_checkpoint("r1")
    loaded = store.load_checkpoint("r1", 1)
    assert loaded is not None


def test_a_damaged_run_record_is_named(store: SqliteRunStore, path: Path) -> None:
    _started(store)
    _flip_one_character(path, "runs", "record", "run_id = 'r1'")
    with pytest.raises(CorruptRecord, match=r"run 'r1' in .* failed its checksum"):
        store.load_run("r1")
    with pytest.raises(CorruptRecord, match="run 'r1'"):
        store.list_runs()
    with pytest.raises(CorruptRecord, match="run 'r1'"):
        store.resume_run("r1", owner="w2", now=T0, lease_seconds=60)


def test_text_that_matches_its_checksum_but_does_not_decode_is_corrupt(
        store: SqliteRunStore, path: Path) -> None:
    _started(store)
    store.save_checkpoint(_checkpoint(1), expected_attempt=1)
    store.begin_effect("k1", run_id="r1", expected_attempt=1, at=T0)
    for table, where, text in [
        ("checkpoints", "seq = 1", '{"format": "checkpoint-delta/1"}'),
        ("effects", "key = 'k1'", '{"key": 3}'),
    ]:
        column = "body" if table == "checkpoints" else "record"
        with _raw(path) as raw:
            raw.execute(f"UPDATE {table} SET {column} = ?, checksum = ? WHERE {where}",
                        (text, hashlib.sha256(text.encode()).hexdigest()))
            _reseal(raw)
    with pytest.raises(CorruptRecord, match=r"checkpoint 1 of run 'r1' in .* did not decode"):
        store.load_latest_checkpoint("r1")
    with pytest.raises(CorruptRecord, match=r"effect 'k1' of run 'r1' in .* did not decode"):
        store.list_effects("r1")


# -- times ----------------------------------------------------------------------

def test_lease_expiry_filter_is_exact_to_the_microsecond(store: SqliteRunStore) -> None:
    for run_id in ("a", "b"):
        store.create_run(_run(run_id))
    store.resume_run("a", owner="w", now=T0, lease_seconds=0.000001)
    store.resume_run("b", owner="w", now=T0, lease_seconds=0.000002)
    cutoff = T0 + timedelta(microseconds=2)
    page = store.list_runs(lease_expired_before=cutoff)
    assert [run.run_id for run in page.runs] == ["a"]


# -- processes --------------------------------------------------------------------

def _open_and_create(path: str, run_id: str, barrier: Any, results: Any) -> None:
    barrier.wait(timeout=60)
    try:
        with SqliteRunStore(path) as opened:
            opened.create_run(_run(run_id))
        results.put((run_id, "ok"))
    except BaseException as error:
        results.put((run_id, repr(error)))


def _resume(path: str, owner: str, barrier: Any, results: Any) -> None:
    try:
        with SqliteRunStore(path) as opened:
            barrier.wait(timeout=60)
            opened.resume_run("r1", owner=owner, now=T0, lease_seconds=60)
        results.put((owner, "won"))
    except LeaseHeld:
        results.put((owner, "LeaseHeld"))
    except BaseException as error:
        results.put((owner, repr(error)))


def _race(target: Any, path: Path, names: list[str]) -> dict[str, str]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(names))
    results = context.Queue()
    workers = [context.Process(target=target, args=(str(path), name, barrier, results))
               for name in names]
    for worker in workers:
        worker.start()
    outcome = dict(results.get(timeout=90) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    return outcome


@pytest.mark.slow
def test_processes_opening_a_fresh_file_at_once_migrate_it_once(path: Path) -> None:
    names = [f"run-{n}" for n in range(8)]
    outcome = _race(_open_and_create, path, names)
    assert outcome == dict.fromkeys(names, "ok")
    with _raw(path) as raw:
        versions = [row[0] for row in raw.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.slow
def test_of_eight_processes_resuming_one_run_exactly_one_wins(path: Path) -> None:
    with SqliteRunStore(path) as setup:
        setup.create_run(_run())
    owners = [f"worker-{n}" for n in range(8)]
    outcome = _race(_resume, path, owners)
    assert sorted(outcome.values()) == ["LeaseHeld"] * 7 + ["won"]
    with SqliteRunStore(path) as check:
        run = check.load_run("r1")
    assert run is not None
    assert run.attempt == 1
    assert outcome[run.lease_owner or ""] == "won"


# -- delta storage ------------------------------------------------------------------

def test_checkpoint_size_grows_with_the_new_entries_not_the_history(
        store: SqliteRunStore) -> None:
    _started(store)
    transcript: list[dict[str, Any]] = []
    for seq in range(1, 301):
        transcript.append({"role": "assistant", "seq": seq, "text": "w" * 180})
        store.save_checkpoint(_checkpoint(seq, transcript=list(transcript)),
                              expected_attempt=1)
    sizes = {info.seq: info.size_bytes for info in store.list_checkpoints("r1")}
    assert sizes[300] <= 2 * sizes[10]
    latest = store.load_latest_checkpoint("r1")
    assert latest is not None
    assert latest.transcript == transcript
    middle = store.load_checkpoint("r1", 150)
    assert middle is not None
    assert middle.transcript == transcript[:150]
