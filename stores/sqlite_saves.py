"""An owner's checkpoint on SQLite as one statement, and the lists its delta is made against.

The common save (the run is the one this store knows, running at the save's
attempt, and this store holds the lists of checkpoint `seq - 1`) is one
INSERT into the connection's `checkpoint_saves` view, whose trigger moves the
run row and checks that it is the very row the save was prepared on
(`sqlite_schema`). Everything the statement needs is computed from what this
store remembers (`RunRows.decoded`, the delta bases here), never read in the
transaction, so a save is prepared on its writer's thread before the write
queues for its transaction (`sqlite_group_commit`): while other writes
commit, not in the leader's turn. A save that settles or reserves effects
in its transaction first is encoded there too, and only sealed in the
transaction, over the row its effects moved (`encode`, then `prepare`). A row
that changed since (anyone's write, damage) makes the statement change
nothing, and the store decides the save on a read instead.

The delta bases (the lists of each run's last saved checkpoint) are kept per
run incarnation, for many runs at once, and become a base only once the
transaction that saved them has committed: a rolled-back body must never be
the base of the next delta.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from datetime import datetime
from typing import Any, NamedTuple

from stores import transitions
from stores.deltas import SavedLists, SavedListsCache, encode_body
from stores.records import Checkpoint
from stores.sqlite_group_commit import GroupCommit
from stores.sqlite_rows import CHECKPOINT_VALUES, StoredRun, checkpoint_row
from stores.sqlite_runs import RunRows
from stores.sqlite_schema import SAVE_VIEW_COLUMNS

# Runs whose bases are kept: an entry holds the lists of a running run's last
# checkpoint, which its owner holds anyway; an ended run's is dropped (`forget`).
BASES = 1024


class EncodedSave(NamedTuple):
    """An owner's checkpoint encoded against its run incarnation's last saved lists:
    the part of a save that does not depend on the run row, so it can be made before
    the save's transaction even when that transaction moves the row first."""

    incarnation: str  # whose delta base the body was encoded against
    row: tuple[Any, ...]  # the checkpoint row (CHECKPOINT_FIELDS)
    saved: SavedLists  # what the next delta is encoded against


class PreparedSave(NamedTuple):
    """An owner's checkpoint made ready to be saved in one statement."""

    known: StoredRun  # the run row the save goes over, as this store knows it
    row: tuple[Any, ...]  # the checkpoint row (CHECKPOINT_FIELDS)
    after: StoredRun  # the run row as the save leaves it
    saved: SavedLists  # what the next delta is encoded against


class CheckpointSaves:
    """One store's delta bases and its saves in one statement (see the module doc)."""

    def __init__(self, rows: RunRows, commits: GroupCommit) -> None:
        self._rows = rows
        self._commits = commits
        self._bases = SavedListsCache(BASES)
        self._lock = threading.Lock()  # saves are prepared outside the store's lock

    def base(self, incarnation: str, seq: int) -> SavedLists | None:
        """The lists of checkpoint `seq` of the run incarnation, when this store has them."""
        with self._lock:
            return self._bases.get(incarnation, seq)

    def remember(self, incarnation: str, saved: SavedLists) -> None:
        """Keep lists read from the store (committed) as the run's base."""
        with self._lock:
            self._bases.put(incarnation, saved)

    def remember_read(self, incarnation: str, saved: SavedLists) -> None:
        """Keep lists read on a read connection as the run's base, unless the base kept
        is of a later checkpoint (saved since that read began)."""
        with self._lock:
            if self._bases.newer_than(incarnation, saved.seq):
                return
            self._bases.put(incarnation, saved)

    def remember_once_committed(self, incarnation: str, saved: SavedLists) -> None:
        """Keep lists saved in the write being made, once its transaction commits."""
        self._commits.after_commit(functools.partial(self.remember, incarnation, saved))

    def forget(self, incarnation: str) -> None:
        """An ended run saves no more: its lists go now, not when many runs pushed them out."""
        with self._lock:
            self._bases.forget(incarnation)

    def encode(self, checkpoint: Checkpoint, expected_attempt: int,
               lease_expires_at: datetime | None) -> EncodedSave | None:
        """The checkpoint's row, its body a delta against the lists this store kept of
        checkpoint `seq - 1`; None when the fast path cannot apply to the run as known.

        Checkpoint `seq - 1` of an incarnation never changes once committed, so
        the body holds for as long as the run is that incarnation, whatever else
        moves its row meanwhile: `prepare` checks that on the row it seals over."""
        known = self._known(checkpoint, expected_attempt)
        return None if known is None else self._encode(known, checkpoint, lease_expires_at)

    def prepare(self, checkpoint: Checkpoint, expected_attempt: int,
                lease_expires_at: datetime | None, *,
                encoded: EncodedSave | None = None) -> PreparedSave | None:
        """The save made ready for its statement over the run row as known now, or None
        when it does not apply. `encoded`, made earlier by `encode` for this save, is
        used when the run is still that incarnation; it is made again otherwise."""
        known = self._known(checkpoint, expected_attempt)
        if known is None:
            return None
        if encoded is None or encoded.incarnation != known.incarnation:
            encoded = self._encode(known, checkpoint, lease_expires_at)
            if encoded is None:
                return None
        return PreparedSave(known, encoded.row, self._rows.after_checkpoint(known, encoded.row),
                            encoded.saved)

    def _known(self, checkpoint: Checkpoint, expected_attempt: int) -> StoredRun | None:
        """The run row as this store knows it, when the fast path applies to it."""
        known = self._rows.decoded.get(checkpoint.run_id)
        # A checkpoint after a takeover resets `takeovers`, which lives in the
        # record text the fast path does not touch: the reading path rewrites it.
        # (Takeovers change only with the attempt, so a record known at this
        # attempt knows them.)
        if known is None or not known.seal or known.run.attempt != expected_attempt \
                or known.run.takeovers or transitions.budget_changes(known.run, checkpoint):
            return None
        return known

    def _encode(self, known: StoredRun, checkpoint: Checkpoint,
                lease_expires_at: datetime | None) -> EncodedSave | None:
        previous = self.base(known.incarnation, checkpoint.seq - 1)
        if previous is None and checkpoint.seq != 1:
            return None
        body, saved = encode_body(checkpoint, previous)
        return EncodedSave(known.incarnation, checkpoint_row(checkpoint, body, lease_expires_at),
                           saved)

    def save(self, conn: sqlite3.Connection, prepared: PreparedSave | None) -> bool:
        """Save a prepared checkpoint in the connection's transaction (or as a statement
        of its own); False, with nothing written, for the reading path, which raises
        the authoritative error or handles an identical re-save."""
        if prepared is None:
            return False
        known, row, after, saved = prepared
        try:
            # Saved only over the very row this store knows (sqlite_schema's
            # checkpoint_saves: its incarnation, attempt, status, latest seq
            # `seq - 1`, and seal): a row changed by anyone else since, or
            # damaged, goes to the reading path, which decides or reports it.
            conn.execute(
                f"INSERT INTO temp.checkpoint_saves ({SAVE_VIEW_COLUMNS})"
                f" VALUES ({CHECKPOINT_VALUES}, ?, ?, ?)",
                (*row, known.incarnation, known.seal, after.seal))
        except sqlite3.IntegrityError:
            return False
        self._rows.decoded[known.run.run_id] = after
        self.remember_once_committed(known.incarnation, saved)
        return True
