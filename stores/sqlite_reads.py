"""The reads of SqliteRunStore, each a read transaction on a read connection.

Reads never take the store's write connection: a group commit's leader holds
it through its fsync (`sqlite_group_commit`), and a read made on it would wait
for every flush. Each read is a transaction on a connection of `sqlite_readers`
instead, which sees the last commit and neither waits for the writer nor holds
it up. The helpers that reassemble checkpoints and check rows are shared with
the writes, which call them on the write connection inside their transaction.

A row read on a read connection may be older than the row a write transaction
is deciding on meanwhile, so it is remembered for the next write only when the
store knows nothing of that run (`RunRows.read`).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import Any

from stores import transitions
from stores.base import CorruptRecord
from stores.deltas import SavedLists
from stores.event_log import check_page
from stores.records import (
    Checkpoint,
    CheckpointInfo,
    EffectRecord,
    RunEvent,
    RunPage,
    RunRecord,
    RunStatus,
    copy_record,
)
from stores.run_search import RunSearch
from stores.sqlite_effects import EffectRows
from stores.sqlite_integrity import checked_checkpoints
from stores.sqlite_listing import list_runs
from stores.sqlite_readers import ReadConnections
from stores.sqlite_rows import (
    CHECKPOINT_SELECT,
    MAX_SEQ,
    assemble_rows,
    assemble_rows_each,
    events_of_rows,
    moment,
)
from stores.sqlite_runs import RunRows
from stores.sqlite_saves import CheckpointSaves


class SqliteReads:
    """The RunStore reads of `SqliteRunStore`, over the parts it builds."""

    path: Path
    _conn: sqlite3.Connection  # the write connection
    _rows: RunRows
    _effects: EffectRows
    _saves: CheckpointSaves
    _readers: ReadConnections

    def _read(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A read transaction on a read connection (`sqlite_readers`): it never waits
        for a commit. A row it reads is remembered for a write only when the store
        knew nothing of that run (`_row`)."""
        return self._readers.reading()

    # -- rows and checkpoints, on either connection -----------------------------

    def _run(self, conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
        return self._row(conn, run_id)[0]

    def _row(self, conn: sqlite3.Connection,
             run_id: str) -> tuple[RunRecord | None, str | None, int]:
        """(run, incarnation, latest checkpoint seq) in one query, the row checked.

        A row read on the write connection is remembered for the next write; one
        read on a read connection only when no row of that run is remembered
        (`RunRows.read`): it may be older than the row a write transaction is
        deciding on meanwhile, and the write sets the columns that changed since
        the row it remembers (`RunRows.write`)."""
        return self._rows.read(conn, run_id, remember=conn is self._conn)

    def _checkpoint_rows(self, conn: sqlite3.Connection, run_id: str, latest: int,
                         seq: int | None, *, bodies: bool) -> list[Any]:
        """The checked rows of checkpoints 1..`seq` (1..`latest`, and none beyond,
        when None); `latest` is the run's checkpoint_seq."""
        rows = conn.execute(f"SELECT {CHECKPOINT_SELECT}{', body' if bodies else ''}"
                            " FROM checkpoints WHERE run_id = ? AND seq <= ? ORDER BY seq",
                            (run_id, MAX_SEQ if seq is None else seq)).fetchall()
        checked_checkpoints(self.path, run_id, rows, latest if seq is None else seq,
                            beyond=seq is None)
        return rows

    def _assemble(self, conn: sqlite3.Connection, run_id: str, latest: int,
                  seq: int | None = None) -> tuple[Checkpoint, SavedLists] | None:
        """The checkpoint at `seq` (latest when None) from every body up to it; None when
        the run has no such checkpoint (`latest` is its checkpoint_seq)."""
        if seq is not None and not 0 < seq <= latest:
            return None
        rows = self._checkpoint_rows(conn, run_id, latest, seq, bodies=True)
        return assemble_rows(self.path, run_id, rows) if rows else None

    def _run_key_holder(self, conn: sqlite3.Connection, run_key: str) -> str | None:
        row = conn.execute("SELECT run_id FROM run_keys WHERE run_key = ?", (run_key,)).fetchone()
        if row is None:
            return None
        holder = self._run(conn, row[0])
        if holder is None or holder.run_key != run_key:
            raise CorruptRecord(f"{self.path}: the run key of run {row[0]!r} does not match "
                                f"the run's record")
        return str(row[0])

    # -- the RunStore reads ----------------------------------------------------

    def load_run(self, run_id: str) -> RunRecord | None:
        with self._read() as conn:
            run = self._run(conn, run_id)
        # A copy: the decoded record is shared with later writes of this store.
        return None if run is None else copy_record(run)

    def load_latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._read() as conn:
            run, incarnation, latest = self._row(conn, run_id)
            found = None if run is None else self._assemble(conn, run_id, latest)
            if found is None:
                return None
            # A resumed owner loads before it saves: seed the delta cache so
            # its first save does not read the run's bodies a second time.
            if incarnation is not None:
                self._saves.remember_read(incarnation, found[1])
            return found[0]

    def load_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        with self._read() as conn:
            run, _, latest = self._row(conn, run_id)
            if run is None or not 0 < seq <= latest:
                return None
            found = self._assemble(conn, run_id, latest, seq)
            return None if found is None else found[0]

    def load_checkpoints(self, run_id: str, first_seq: int, last_seq: int) -> list[Checkpoint]:
        with self._read() as conn:
            run, _, latest = self._row(conn, run_id)
            last = min(last_seq, latest)
            if run is None or max(first_seq, 1) > last:
                return []
            rows = self._checkpoint_rows(conn, run_id, latest, last, bodies=True)
            return assemble_rows_each(self.path, run_id, rows, first_seq)

    def list_events(self, run_id: str, *, after: int = 0, limit: int = 100) -> list[RunEvent]:
        check_page(after, limit)
        with self._read() as conn:
            run, _, latest = self._row(conn, run_id)
            transitions.require_run(run, run_id)
            if not latest:
                return []
            rows = self._checkpoint_rows(conn, run_id, latest, None, bodies=True)
        return events_of_rows(self.path, run_id, rows, after=after, limit=limit)

    def list_checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        with self._read() as conn:
            run, _, latest = self._row(conn, run_id)
            transitions.require_run(run, run_id)
            rows = self._checkpoint_rows(conn, run_id, latest, None, bodies=False)
        try:
            return [CheckpointInfo(seq=row[1], attempt=row[2], size_bytes=row[6],
                                   created_at=moment(row[3])) for row in rows]
        except (ValueError, TypeError, OverflowError) as error:
            raise CorruptRecord(f"checkpoint list of run {run_id!r} in {self.path} "
                                f"did not decode: {error}") from error

    def list_runs(self, *, statuses: Collection[RunStatus] | None = None,
                  lease_expired_before: datetime | None = None,
                  parent_run_id: str | None = None, tenant: str | None = None,
                  resume_requested_before: datetime | None = None, agent: str | None = None,
                  run_id_prefix: str | None = None, created_after: datetime | None = None,
                  created_before: datetime | None = None, newest_first: bool = False,
                  limit: int = 100, cursor: str | None = None) -> RunPage:
        with self._read() as conn:
            return list_runs(conn, self.path, statuses=statuses, parent_run_id=parent_run_id,
                             lease_expired_before=lease_expired_before, tenant=tenant,
                             resume_requested_before=resume_requested_before,
                             search=RunSearch(agent, run_id_prefix, created_after,
                                              created_before),
                             newest_first=newest_first, limit=limit, cursor=cursor)

    def list_effects(self, run_id: str) -> list[EffectRecord]:
        with self._read() as conn:
            stored = self._rows.stored(conn, run_id)
            transitions.require_run(None if stored is None else stored.run, run_id)
            assert stored is not None  # require_run raised otherwise
            return self._effects.list(conn, run_id, stored.effect_count)

    def find_run_key(self, run_key: str) -> str | None:
        with self._read() as conn:
            return self._run_key_holder(conn, run_key)
