"""The run rows of SqliteRunStore: read checked, written sealed, remembered decoded.

`RunRows` reads a run row (its seal, texts and cross-checks, see
`sqlite_rows`; a missing row whose run still owns rows is damage, see
`sqlite_integrity`) and writes one back fenced by attempt, re-sealing it. It
remembers the last decoded record per run with the column values it was
stored with, so an unchanged record text is not decoded again and an update
sets only the columns that changed. A row read back exactly as remembered
(`StoredRun.is_row`: its columns, texts and seal) is not checked again
either: this store checked or computed those digests over those very values,
and any change to the row, damage included, is checked in full. A remembered
row is replaced only by a read or write in a write transaction: those are the
rows the next write goes over.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

from stores.base import CorruptRecord, StaleAttempt
from stores.records import RunRecord
from stores.sqlite_integrity import check_orphans
from stores.sqlite_rows import (
    ALWAYS_SET,
    CHECKPOINT_FIELDS,
    RUN_FIELDS,
    RUN_SELECT,
    StoredRun,
    decode_run,
    run_row,
    run_seal,
    run_values,
    verified,
    with_columns,
)

# Where RUN_FIELDS holds the columns a checkpoint moves.
_LEASE, _CHECKPOINT_SEQ, _CONSUMED, _UPDATED = (
    RUN_FIELDS.index(name) for name in ("lease_expires_at", "checkpoint_seq", "consumed_tokens",
                                        "updated_at"))
# Where a checkpoint row (CHECKPOINT_FIELDS order) holds what it moves them to.
_ROW_SEQ, _ROW_CREATED, _ROW_LEASE, _ROW_CONSUMED = (
    CHECKPOINT_FIELDS.index(name)
    for name in ("seq", "created_at", "lease_expires_at", "consumed_tokens"))


class RunRows:
    """Reads and writes run rows; the caller holds the connection's transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Records are never mutated in place (transitions copy them), so sharing
        # a decoded one is safe. Keyed by checksum: a rolled-back write leaves
        # an entry that no stored row matches, so it is never used.
        self.decoded: dict[str, StoredRun] = {}

    def read(self, conn: sqlite3.Connection, run_id: str, *,
             remember: bool = True) -> tuple[RunRecord | None, str | None, int]:
        """(run, incarnation, latest checkpoint seq) in one query, the row checked;
        remembered for the next write unless `remember` is False (a read on a
        connection of its own, which may see an older row than the writer's).

        Such a read remembers the row only for a running run this store knows
        nothing of yet: an entry, once there, is replaced only by a write
        transaction. A write transaction reads the row before it writes it, so
        between its read and its write the entry is always the one it read
        (`setdefault` is atomic); a row remembered stale only sends a save to its
        reading path. An ended run's row is not kept from such a read (`forget`)."""
        stored = self.stored(conn, run_id)
        if stored is None:
            return None, None, 0
        if remember:
            self.decoded[run_id] = stored
        elif not stored.run.status.terminal:
            self.decoded.setdefault(run_id, stored)
        return stored.run, stored.incarnation, stored.run.checkpoint_seq or 0

    def forget(self, run_id: str) -> None:
        """Drop the row of a run that ended: it saves no more, and a server that keeps
        every run it ever ran or read would grow without bound. A later write reads
        the row again (`write`)."""
        self.decoded.pop(run_id, None)

    def read_before(self, conn: sqlite3.Connection, run_id: str) -> StoredRun | None:
        """The row this write transaction read. Every write reads the run first, and
        the entry can be gone since only if the run ended meanwhile (`forget`, on
        another thread): then it is read again."""
        return self.decoded.get(run_id) or self.stored(conn, run_id)

    def effect_count(self, conn: sqlite3.Connection, run_id: str) -> int:
        """The effects the run's row counts, as this transaction read it."""
        known = self.read_before(conn, run_id)
        return 0 if known is None else known.effect_count

    def stored(self, conn: sqlite3.Connection, run_id: str) -> StoredRun | None:
        """The run row as this transaction sees it, checked and decoded (None: no run)."""
        found = conn.execute(f"SELECT {RUN_SELECT} FROM runs WHERE run_id = ?",
                             (run_id,)).fetchone()
        if found is None:
            check_orphans(conn, self.path, run_id)
            return None
        cached = self.decoded.get(run_id)
        if cached is not None and found[0] == run_id and cached.is_row(found):
            # The row as this store last wrote or read it: its seal and record were
            # checked then (every read of a running run, on every commit point that
            # reads it, and every GET of it, would check them again).
            if cached.current:
                return cached
            return dataclasses.replace(cached, run=with_columns(self.path, cached.run,
                                                                cached.values), current=True)
        row = run_row(self.path, found)
        if row.run_id != run_id:
            raise CorruptRecord(f"run {run_id!r} in {self.path}: its row holds {row.run_id!r}")
        if cached is not None and cached.checksum == row.checksum \
                and cached.incarnation == row.incarnation \
                and cached.definition_checksum == row.definition_checksum \
                and verified(self.path, row.record, row.checksum, f"run {run_id!r}"):
            # The stored text is the text we last decoded (same checksum, and
            # the checksum still matches the text): skip decoding it again.
            base = cached.run
        else:
            base = decode_run(self.path, run_id, text=row.record, checksum=row.checksum,
                              definition=row.definition,
                              definition_checksum=row.definition_checksum)
        return StoredRun(str(row.checksum), with_columns(self.path, base, row.values),
                         row.values, str(row.incarnation), row.effect_count,
                         str(row.definition_checksum), str(found[-1]))

    def write(self, conn: sqlite3.Connection, run: RunRecord, *, fence: int) -> None:
        """Write the run back; `fence` is the attempt of the row this transaction read."""
        before = self.read_before(conn, run.run_id)
        if before is None:
            raise StaleAttempt(f"run {run.run_id!r} is not in the store to write")
        values = run_values(run, before.values)
        # Set only the columns that changed: SQLite rewrites the entries of every
        # index whose columns an UPDATE sets, so an unchanged status or creation
        # time must not be named. The columns a checkpoint moves are always set:
        # a checkpoint inserted in this transaction moved them after the read.
        changed = [i for i, value in enumerate(values)
                   if value != before.values[i] or RUN_FIELDS[i] in ALWAYS_SET]
        assignments = ", ".join(f"{RUN_FIELDS[i]} = ?" for i in changed)
        seal = run_seal(run.run_id, before.incarnation, values, before.effect_count,
                        before.definition_checksum)
        cursor = conn.execute(f"UPDATE runs SET {assignments}, columns_checksum = ?"
                              " WHERE run_id = ? AND attempt = ?",
                              (*(values[i] for i in changed), seal, run.run_id, fence))
        require_fenced(cursor, run.run_id, fence)
        # Not `current`: `run` is the record as written, whose times a read gives back
        # in UTC from the columns (`with_columns`).
        self.decoded[run.run_id] = StoredRun(values[-1], run, values, before.incarnation,
                                             before.effect_count, before.definition_checksum,
                                             seal, current=False)

    def after_checkpoint(self, known: StoredRun, row: tuple[Any, ...]) -> StoredRun:
        """`known` as a checkpoint with CHECKPOINT_FIELDS values `row` leaves it: the
        columns a checkpoint moves moved, the row resealed (for `sqlite_schema`'s
        checkpoint_saves view, which writes that seal)."""
        values = list(known.values)
        values[_CHECKPOINT_SEQ], values[_CONSUMED], values[_UPDATED] = (
            row[_ROW_SEQ], row[_ROW_CONSUMED], row[_ROW_CREATED])
        if row[_ROW_LEASE] is not None:  # a save that renews no lease keeps the one there
            values[_LEASE] = row[_ROW_LEASE]
        moved = tuple(values)
        # Built whole, not by dataclasses.replace: every checkpoint makes one.
        return StoredRun(known.checksum, known.run, moved, known.incarnation,
                         known.effect_count, known.definition_checksum,
                         run_seal(known.run.run_id, known.incarnation, moved,
                                  known.effect_count, known.definition_checksum),
                         current=False)

    def counted_effect(self, run_id: str) -> None:
        """Follow the `effect_counts_on_run` trigger, which counted an effect inserted
        in this transaction and resealed the row, in the remembered row."""
        known = self.decoded.get(run_id)
        if known is not None:
            count = known.effect_count + 1
            self.decoded[run_id] = StoredRun(
                known.checksum, known.run, known.values, known.incarnation, count,
                known.definition_checksum,
                run_seal(run_id, known.incarnation, known.values, count,
                         known.definition_checksum),
                current=known.current)


def require_fenced(cursor: sqlite3.Cursor, run_id: str, attempt: int) -> None:
    # The run was read and checked under this transaction's write lock, so
    # its attempt cannot have moved since. The `attempt = ?` condition is
    # belt and braces: should that ever not hold (a writer that bypasses
    # BEGIN IMMEDIATE, a bug here), the write is refused instead of
    # overwriting a newer owner.
    if cursor.rowcount != 1:
        raise StaleAttempt(f"run {run_id!r} is no longer at attempt {attempt}")
