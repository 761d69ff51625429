"""The effect rows of SqliteRunStore: reserved and settled fenced, with fast paths.

An effect row holds its record's text and the text's checksum. Every write is
fenced by the run's attempt in its own statement (effect writes change no run
columns of their own; the row count moves by a trigger, `sqlite_schema`).

Two writes have a path that reads nothing, because the engine makes them at
every tool call, inside the transaction of the checkpoint that records the call
(`SettlesInCheckpoint`):

- reserving a key new to the run: an INSERT that lands only when the run is
  running at the attempt and no row has the key;
- settling an effect this store reserved: an UPDATE that lands only when the
  row still holds the very text this store wrote (its checksum) and the run is
  running at the attempt.

Either statement changing no row sends the write to the reading path, which
decides by the contract's rules (`stores.transitions`) and raises their error.
The records this store reserved are remembered by checksum, so a remembered
one that no stored row matches (its transaction rolled back, another process
settled it) can never be written over: its UPDATE matches nothing.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from stores import transitions
from stores.codecs import seal_text
from stores.records import EffectRecord, EffectStatus, RunRecord, decode_record, encode_record
from stores.sqlite_integrity import check_effect_count, owned_record
from stores.sqlite_rows import digest
from stores.sqlite_runs import require_fenced

# Fenced on the run's attempt and status, as the reading path's rules are.
_RUNNING = "EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND attempt = ? AND status = 'running')"
_RESERVE_NEW = ("INSERT INTO effects (run_id, key, record, checksum) SELECT ?, ?, ?, ?"
                f" WHERE {_RUNNING} AND NOT EXISTS (SELECT 1 FROM effects"
                " WHERE run_id = ? AND key = ?)")
_SETTLE_KNOWN = ("UPDATE effects SET record = ?, checksum = ? WHERE run_id = ? AND key = ?"
                 f" AND checksum = ? AND {_RUNNING}")
# Reservations remembered for their settlement: one per tool call in flight.
_REMEMBERED = 256


class EffectRows:
    """Reads and writes effect rows; the caller holds the connection's transaction.

    `read_run` reads (and checks) the run row in that transaction: the reading
    paths decide on it.
    """

    def __init__(self, path: Path, read_run: Callable[[sqlite3.Connection, str],
                                                          RunRecord | None],
                 effect_count: Callable[[sqlite3.Connection, str], int],
                 counted: Callable[[str], None]) -> None:
        self.path = path
        self._read_run = read_run
        self._effect_count = effect_count
        # Told of every effect inserted: the run row's count (and seal) moved.
        self._counted = counted
        # (run id, key) -> (checksum of the reserved text, the record)
        self._reserved: OrderedDict[tuple[str, str], tuple[str, EffectRecord]] = OrderedDict()

    def stored(self, conn: sqlite3.Connection, run_id: str, key: str) -> EffectRecord | None:
        row = conn.execute("SELECT record, checksum FROM effects WHERE run_id = ? AND key = ?",
                           (run_id, key)).fetchone()
        return None if row is None else owned_record(self.path, EffectRecord, run_id, key, row)

    def list(self, conn: sqlite3.Connection, run_id: str,
             effect_count: int) -> list[EffectRecord]:
        """The run's effects; `effect_count` is its row's count, read in this transaction."""
        rows = conn.execute("SELECT key, record, checksum FROM effects WHERE run_id = ?",
                            (run_id,)).fetchall()
        effects = [owned_record(self.path, EffectRecord, run_id, row[0], row[1:])
                   for row in rows]
        check_effect_count(conn, self.path, run_id, effect_count)
        return sorted(effects, key=lambda effect: (effect.created_at, effect.key))

    def check_count(self, conn: sqlite3.Connection, run_id: str) -> None:
        """The run's effects must all be there (the caller read the run in this transaction)."""
        check_effect_count(conn, self.path, run_id, self._effect_count(conn, run_id))

    def begin(self, conn: sqlite3.Connection, key: str, *, run_id: str, expected_attempt: int,
              at: datetime) -> EffectRecord:
        effect = transitions.reserve_effect(self._read_run(conn, run_id), run_id, key,
                                            expected_attempt=expected_attempt, at=at)
        existing = self.stored(conn, run_id, key)
        if existing is not None:
            return existing
        # A key that is absent must be new, not lost: reserving a lost one
        # again would run its effect twice.
        self.check_count(conn, run_id)
        text = encode_record(effect)
        reserved = decode_record(EffectRecord, text)  # the caller's own copy
        self._remember(run_id, key, self._insert(conn, effect, text), effect)
        return reserved

    def reserve_new(self, conn: sqlite3.Connection, key: str, *, run_id: str,
                    expected_attempt: int, at: datetime) -> None:
        """Reserve a key new to the run (`SettlesInCheckpoint`). The key first appears
        in the checkpoint this transaction saves, so no row of it can have been
        lost: no count to check."""
        effect = EffectRecord(key=key, run_id=run_id, attempt=expected_attempt, created_at=at)
        text = encode_record(effect)
        record = seal_text(text)
        checksum = digest(record)
        cursor = conn.execute(_RESERVE_NEW, (run_id, key, record, checksum, run_id,
                                             expected_attempt, run_id, key))
        if cursor.rowcount == 1:
            self._counted(run_id)
        else:
            # Not running at the attempt, or the key exists: the rules say which.
            effect = transitions.reserve_new_effect(
                self._read_run(conn, run_id), run_id, key, expected_attempt=expected_attempt,
                at=at, existing=self.stored(conn, run_id, key))
            checksum = self._insert(conn, effect, encode_record(effect))
        # The record as built: it survived encoding, and it is never changed in place.
        self._remember(run_id, key, checksum, effect)

    def settle(self, conn: sqlite3.Connection, key: str, *, run_id: str, expected_attempt: int,
               result: Any, at: datetime) -> None:
        known = self._reserved.pop((run_id, key), None)
        if known is not None and known[1].attempt == expected_attempt \
                and known[1].status is EffectStatus.RESERVED:
            updated = known[1].model_copy(update={
                "status": EffectStatus.COMPLETED, "result": result, "completed_at": at})
            record = seal_text(encode_record(updated))
            cursor = conn.execute(_SETTLE_KNOWN, (record, digest(record), run_id, key,
                                                  known[0], run_id, expected_attempt))
            if cursor.rowcount == 1:
                return
        settled = transitions.settle_effect(
            self._read_run(conn, run_id), run_id, key, expected_attempt=expected_attempt,
            result=result, at=at, existing=self.stored(conn, run_id, key))
        if settled is None:
            return
        record = seal_text(encode_record(settled))
        cursor = conn.execute(
            "UPDATE effects SET record = ?, checksum = ? WHERE run_id = ? AND key = ?"
            " AND EXISTS (SELECT 1 FROM runs WHERE runs.run_id = ? AND attempt = ?)",
            (record, digest(record), run_id, key, run_id, expected_attempt))
        require_fenced(cursor, run_id, expected_attempt)

    def _insert(self, conn: sqlite3.Connection, effect: EffectRecord, text: str) -> str:
        """Insert a reservation the rules allowed (the run was read in this transaction);
        the checksum of its stored text."""
        record = seal_text(text)
        checksum = digest(record)
        # Effect writes change no run row, so they carry the fence in their
        # own statement, for the same belt-and-braces reason as a run write.
        cursor = conn.execute(
            "INSERT INTO effects (run_id, key, record, checksum) SELECT ?, ?, ?, ?"
            " WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND attempt = ?)",
            (effect.run_id, effect.key, record, checksum, effect.run_id, effect.attempt))
        require_fenced(cursor, effect.run_id, effect.attempt)
        self._counted(effect.run_id)
        return checksum

    def _remember(self, run_id: str, key: str, checksum: str, effect: EffectRecord) -> None:
        self._reserved[(run_id, key)] = (checksum, effect)
        while len(self._reserved) > _REMEMBERED:
            self._reserved.popitem(last=False)
