"""SqliteRunStore: the durable local default, safe across threads and processes.

One SQLite file in WAL mode. Every write is a read-modify-write inside
`BEGIN IMMEDIATE`, which takes the database's single write lock up front, so
two processes can never interleave between reading a run and writing it.
Writers take turns for that lock (`sqlite_turns`), so two processes on one
file alternate rather than one sleeping in SQLite's busy handler. The
lifecycle rules come from `stores.transitions` and the state changes
around them from `stores.state_changes`, exactly as in `MemoryRunStore`; this
module only stores. Reads are made on read connections of their own
(`sqlite_reads`), so they never wait for a commit nor hold one up.

Every stored record and checkpoint body carries the sha256 of its text, and
every row a seal over its columns (`sqlite_rows`); a mismatch, a decode
failure, a record stored under another run or key, checkpoints that are not
exactly seqs 1..`checkpoint_seq`, or a counted effect or run that is missing
raise `CorruptRecord` naming the record. Any `sqlite3` error becomes a store
error naming the file (`sqlite_schema.translation`, for every transaction).
Concurrent writes share transactions and their fsync (`sqlite_group_commit`):
each write is a function of the connection, made in the next transaction
with the writes that arrived while one was being committed.
Checkpoints are stored as deltas (`stores.deltas`). An owner's checkpoint is
one INSERT into the connection's `checkpoint_saves` view, whose trigger moves
the run's checkpoint columns and writes the seal this store computed (see
`sqlite_schema`), prepared before its transaction (`sqlite_saves`), so
checkpointing every step costs little more than the raw write itself.
`list_runs` is indexed SQL (`sqlite_listing`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel

from stores import transitions
from stores.base import CorruptRecord, RunAlreadyExists, RunKeyTaken, SaveSettled, Settlement
from stores.codecs import seal_text
from stores.deltas import encode_body
from stores.records import (
    ApprovalDecision,
    Checkpoint,
    EffectRecord,
    RunRecord,
    agent_of,
    encode_record,
)
from stores.sqlite_effects import EffectRows
from stores.sqlite_group_commit import GroupCommit, Work
from stores.sqlite_integrity import (
    OWNED,
    count_runs,
    owned_record,
)
from stores.sqlite_readers import ReadConnections
from stores.sqlite_reads import SqliteReads
from stores.sqlite_rows import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_VALUES,
    DEFINITION,
    RUN_COLUMNS,
    RUN_VALUES,
    StoredRun,
    checkpoint_row,
    digest,
    run_seal,
    run_values,
)
from stores.sqlite_runs import RunRows
from stores.sqlite_saves import CheckpointSaves
from stores.sqlite_schema import connect, translated
from stores.sqlite_turns import WriterTurns
from stores.state_changes import Decide, Linked, StateChanges, apply_change, saving

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")


class _RowWrite:
    """A run row read in a write transaction for a state change (`state_changes.RunWrite`)."""

    def __init__(self, store: SqliteRunStore, conn: sqlite3.Connection, run_id: str) -> None:
        self._store = store
        self._conn = conn
        self.run, self._incarnation, self.latest_seq = store._row(conn, run_id)
        self._peer: RunRecord | None = None

    def stored_checkpoint(self, seq: int) -> Checkpoint | None:
        if self.run is None:
            return None
        return self._store._stored_at(self._conn, self.run.run_id, seq, self.latest_seq)

    def peer(self, run_id: str, *, writes: bool) -> RunRecord | None:
        # In the same write transaction: the database's one write lock covers both.
        self._peer = self._store._row(self._conn, run_id)[0]
        return self._peer

    def commit(self, run: RunRecord, checkpoint: Checkpoint | None, *,
               lease_expires_at: datetime | None, peer: RunRecord | None = None) -> bool:
        assert self.run is not None and self._incarnation is not None  # decided on a run
        if checkpoint is not None:
            self._store._append(self._conn, checkpoint, self._incarnation, lease_expires_at)
        if peer is not None:
            assert self._peer is not None  # decided on the peer as read
            self._store._put_run(self._conn, peer, fence=self._peer.attempt)
        # Fenced on the attempt this transaction read.
        self._store._put_run(self._conn, run, fence=self.run.attempt)
        return True


class SqliteRunStore(SqliteReads, StateChanges):
    """A RunStore in one SQLite file (created mode 0600, with its parent directory).

    `synchronous="FULL"` (the default) makes every commit durable across power
    loss; `"NORMAL"` is an explicit opt-in that may lose the last commits on
    power loss (never on a process crash) in exchange for fewer fsyncs. One
    write connection per instance, shared by threads under a lock; writes from
    threads that arrive while a transaction is being committed share the next
    one (`sqlite_group_commit`). Reads use a few connections of their own
    (`sqlite_readers`). `group_commit=False` gives every write a
    transaction of its own, for benchmarks and tests to compare with.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "FULL",
                 busy_timeout_seconds: float = 30.0, group_commit: bool = True) -> None:
        if not isinstance(synchronous, str) or synchronous.upper() not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        if busy_timeout_seconds < 0:
            raise ValueError("busy_timeout_seconds must not be negative")
        self.path = Path(path)
        self._lock = threading.Lock()
        self._rows = RunRows(self.path)
        self._effects = EffectRows(self.path, self._run, self._rows.effect_count,
                                   self._rows.counted_effect)
        self._conn = connect(self.path, synchronous.upper(), busy_timeout_seconds)
        self._turns = WriterTurns(self.path)
        self._commits = GroupCommit(self._conn, self.path, self._lock, self._turns.turn,
                                    enabled=group_commit)
        self._saves = CheckpointSaves(self._rows, self._commits)
        self._readers = ReadConnections(self.path, busy_timeout_seconds)

    # -- transactions and rows -----------------------------------------------

    def _write(self, work: Work[T]) -> T:
        """`work` made in a write transaction, returned once that has committed."""
        return self._commits.write(work)

    def _put_run(self, conn: sqlite3.Connection, run: RunRecord, *, fence: int) -> None:
        """Write the run back; `fence` is the attempt of the row this transaction read."""
        self._rows.write(conn, run, fence=fence)

    def _owned(self, conn: sqlite3.Connection, model: type[R], run_id: str,
               key: str) -> R | None:
        """The effect or approval decision stored under `key` for a run, or None."""
        table, column, _ = OWNED[model]
        row = conn.execute(f"SELECT record, checksum FROM {table} WHERE run_id = ? AND "
                           f"{column} = ?", (run_id, key)).fetchone()
        return None if row is None else owned_record(self.path, model, run_id, key, row)

    def _incarnation(self, conn: sqlite3.Connection, run_id: str) -> str | None:
        return self._row(conn, run_id)[1]

    # -- checkpoints ---------------------------------------------------------

    def _stored_at(self, conn: sqlite3.Connection, run_id: str, seq: int,
                   latest: int) -> Checkpoint | None:
        # Only a re-save reads an old checkpoint back; a new seq costs no read.
        found = self._assemble(conn, run_id, latest, seq) if 0 < seq <= latest else None
        return None if found is None else found[0]

    def _append(self, conn: sqlite3.Connection, checkpoint: Checkpoint, incarnation: str,
                lease_expires_at: datetime | None) -> None:
        run_id, seq = checkpoint.run_id, checkpoint.seq
        previous = self._saves.base(incarnation, seq - 1)
        if previous is None and seq > 1:
            # Another process (or an evicted entry) wrote seq - 1: rebuild it once.
            found = self._assemble(conn, run_id, seq - 1, seq - 1)
            previous = None if found is None else found[1]
        body, saved = encode_body(checkpoint, previous)
        conn.execute(f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES"
                     f" ({CHECKPOINT_VALUES})",
                     checkpoint_row(checkpoint, body, lease_expires_at))
        self._saves.remember_once_committed(incarnation, saved)

    def _writes(self, run_id: str) -> contextlib.AbstractContextManager[tuple[_RowWrite]]:
        # StateChanges' hook to hold a transaction around a change; this store
        # makes its changes as writes of its group commits instead (`_change`).
        raise NotImplementedError("SqliteRunStore makes its changes in _change")

    def _change(self, run_id: str, checkpoint: Checkpoint | None, decide: Decide, *,
                lease_expires_at: datetime | None = None,
                linked: Linked | None = None) -> RunRecord | None:
        transitions.check_checkpoint_owner(run_id, checkpoint)
        changed = self._write(lambda conn: apply_change(
            (_RowWrite(self, conn, run_id),), checkpoint, decide,
            lease_expires_at=lease_expires_at, linked=linked))
        known = self._rows.decoded.get(run_id)
        if changed is not None and changed.status.terminal and known is not None:
            # An ended run saves no more: its lists and row go now, so that a server's
            # memory holds the runs in flight, not every run it ever ran.
            self._saves.forget(known.incarnation)
            self._rows.forget(run_id)
        return changed

    # -- writes --------------------------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        def create(conn: sqlite3.Connection) -> None:
            if self._incarnation(conn, run.run_id) is not None:
                raise RunAlreadyExists(f"run {run.run_id!r} already exists")
            holder = None if run.run_key is None else self._run_key_holder(conn, run.run_key)
            if holder is not None:
                raise RunKeyTaken(f"run {holder!r} holds the run key of run {run.run_id!r}",
                                  run_id=holder)
            definition = seal_text(run.model_dump_json(include=DEFINITION))
            incarnation, values = uuid.uuid4().hex, run_values(run)
            definition_checksum = digest(definition)
            seal = run_seal(run.run_id, incarnation, values, 0, definition_checksum)
            conn.execute(f"INSERT INTO runs (run_id, incarnation, definition,"
                         f" definition_checksum, agent, {RUN_COLUMNS}, columns_checksum)"
                         f" VALUES (?, ?, ?, ?, ?, {RUN_VALUES}, ?)",
                         (run.run_id, incarnation, definition, definition_checksum,
                          agent_of(run.manifest), *values, seal))
            # Known as written, so the first attempt's reservation need not check it.
            self._rows.decoded[run.run_id] = StoredRun(values[-1], run, values, incarnation, 0,
                                                       definition_checksum, seal, current=False)
            count_runs(conn, self.path, +1)
            if run.run_key is not None:
                conn.execute("INSERT INTO run_keys (run_key, run_id) VALUES (?, ?)",
                             (run.run_key, run.run_id))

        self._write(create)

    def resume_run(self, run_id: str, *, owner: str, now: datetime, lease_seconds: float,
                   allow_running_takeover: bool = False,
                   expired_owner: str | None = None) -> RunRecord:
        def resume(conn: sqlite3.Connection) -> RunRecord:
            run = transitions.reserve_attempt(
                self._run(conn, run_id), run_id, owner=owner, now=now,
                lease_seconds=lease_seconds, allow_running_takeover=allow_running_takeover,
                expired_owner=expired_owner)
            self._put_run(conn, run, fence=run.attempt - 1)
            return run

        return self._write(resume)

    def save_checkpoint(self, checkpoint: Checkpoint, *, expected_attempt: int,
                        lease_expires_at: datetime | None = None) -> None:
        save, statement = self._checkpoint_write(checkpoint, expected_attempt, lease_expires_at)
        self._commits.write(save, statement=statement)

    def queue_checkpoint(self, checkpoint: Checkpoint, *, settled: SaveSettled,
                         expected_attempt: int, lease_expires_at: datetime | None = None
                         ) -> None:
        """`save_checkpoint` without waiting (`QueuesCheckpoints`): prepared here, made in
        the next transaction, `settled` told on the thread that made it."""
        save, statement = self._checkpoint_write(checkpoint, expected_attempt, lease_expires_at)
        self._commits.submit(save, settled, statement=statement)

    def _checkpoint_write(self, checkpoint: Checkpoint, expected_attempt: int,
                          lease_expires_at: datetime | None
                          ) -> tuple[Work[bool], Work[bool | None]]:
        """A checkpoint's save as a write: made by the reading path, and first tried as
        the one statement it was prepared for."""
        # Prepared before the transaction, while other writes commit: the
        # statement saves only over the row it was prepared on (`sqlite_saves`).
        prepared = self._saves.prepare(checkpoint, expected_attempt, lease_expires_at)

        def statement(conn: sqlite3.Connection) -> bool | None:
            return self._saves.save(conn, prepared) or None

        def save(conn: sqlite3.Connection) -> bool:
            apply_change((_RowWrite(self, conn, checkpoint.run_id),), checkpoint,
                         saving(checkpoint, expected_attempt=expected_attempt,
                                lease_expires_at=lease_expires_at),
                         lease_expires_at=lease_expires_at)
            return True

        return save, statement

    def save_checkpoint_settling(self, checkpoint: Checkpoint, settlements: Sequence[Settlement],
                                 *, expected_attempt: int, at: datetime,
                                 lease_expires_at: datetime | None = None,
                                 reservations: Sequence[str] = ()) -> None:
        """The effects settled and reserved and the checkpoint saved in one transaction
        (one fsync)."""
        self._write(self._settling_write(
            checkpoint, settlements, expected_attempt=expected_attempt, at=at,
            lease_expires_at=lease_expires_at, reservations=reservations))

    def queue_checkpoint_settling(self, checkpoint: Checkpoint, settlements: Sequence[Settlement],
                                  *, settled: SaveSettled, expected_attempt: int, at: datetime,
                                  lease_expires_at: datetime | None = None,
                                  reservations: Sequence[str] = ()) -> None:
        """`save_checkpoint_settling` without waiting (`QueuesCheckpoints`)."""
        self._commits.submit(self._settling_write(
            checkpoint, settlements, expected_attempt=expected_attempt, at=at,
            lease_expires_at=lease_expires_at, reservations=reservations), settled)

    def _settling_write(self, checkpoint: Checkpoint, settlements: Sequence[Settlement], *,
                        expected_attempt: int, at: datetime, lease_expires_at: datetime | None,
                        reservations: Sequence[str]) -> Work[None]:
        transitions.check_checkpoint_owner(checkpoint.run_id, checkpoint)
        run_id = checkpoint.run_id
        # Encoded before the transaction, while other writes commit; sealed in it,
        # over the row the settlements and reservations leave (`sqlite_saves`).
        encoded = self._saves.encode(checkpoint, expected_attempt, lease_expires_at)

        def save(conn: sqlite3.Connection) -> None:
            for settlement in settlements:
                self._effects.settle(conn, settlement.key, run_id=run_id,
                                     expected_attempt=expected_attempt,
                                     result=settlement.result, at=at)
            for key in reservations:
                self._effects.reserve_new(conn, key, run_id=run_id,
                                          expected_attempt=expected_attempt, at=at)
            # Prepared here: the reservations moved the run row's effect count.
            if self._saves.save(conn, self._saves.prepare(checkpoint, expected_attempt,
                                                          lease_expires_at, encoded=encoded)):
                return
            apply_change((_RowWrite(self, conn, checkpoint.run_id),), checkpoint,
                         saving(checkpoint, expected_attempt=expected_attempt,
                                lease_expires_at=lease_expires_at),
                         lease_expires_at=lease_expires_at)

        return save

    def resolve_approval(self, run_id: str, approval_id: str, *, approved: bool, response: Any,
                         responded_by: str | None, at: datetime) -> None:
        def resolve(conn: sqlite3.Connection) -> None:
            run = self._run(conn, run_id)
            existing = self._owned(conn, ApprovalDecision, run_id, approval_id)
            decided = None if run is None or run.suspension is None else run.suspension.decision
            if existing is None and decided and decided.get("approval_id") == approval_id:
                # Written in one transaction with the decision the run holds.
                raise CorruptRecord(f"approval {approval_id!r} of run {run_id!r} in "
                                    f"{self.path} is missing")
            change = transitions.record_approval(
                run, run_id, approval_id, approved=approved, response=response,
                responded_by=responded_by, at=at, existing=existing)
            if change is None:
                return
            updated, decision = change
            record = seal_text(encode_record(decision))
            conn.execute("INSERT INTO approvals (run_id, approval_id, record, checksum)"
                         " VALUES (?, ?, ?, ?)", (run_id, approval_id, record, digest(record)))
            self._put_run(conn, updated, fence=updated.attempt)

        self._write(resolve)

    def begin_effect(self, key: str, *, run_id: str, expected_attempt: int,
                     at: datetime) -> EffectRecord:
        return self._write(lambda conn: self._effects.begin(
            conn, key, run_id=run_id, expected_attempt=expected_attempt, at=at))

    def complete_effect(self, key: str, *, run_id: str, expected_attempt: int, result: Any,
                        at: datetime) -> None:
        self._write(lambda conn: self._effects.settle(
            conn, key, run_id=run_id, expected_attempt=expected_attempt, result=result, at=at))

    def delete_run(self, run_id: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            run = self._run(conn, run_id)
            if run is None:
                return
            transitions.check_deletable(run)
            # Checkpoints, effects and approvals go with it (ON DELETE CASCADE).
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            count_runs(conn, self.path, -1)

        self._write(delete)

    def close(self) -> None:
        self._commits.close()
        self._readers.close()
        with self._lock, translated(self.path):
            self._conn.close()
            self._turns.close()

    def __enter__(self) -> SqliteRunStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
