"""What SqliteRunStore checks beyond checksums: that nothing is misplaced or missing.

Checksums (`sqlite_rows`) catch changed bytes; they cannot see a row that is
gone, or a well-sealed row that sits where it does not belong. So:

* Identity: an effect or approval decision must name the run and key it is
  stored under, a checkpoint row the run it is read for.
* Contiguity: a run's checkpoint rows are exactly seqs 1..`checkpoint_seq`;
  a gap, a missing tail or a row beyond is damage, never an older checkpoint.
* Counts: the run row counts its effects (`effect_count`, moved by a trigger
  on insert), the store counts its runs (`run_count`, moved by create_run and
  delete_run). A missing effect is damage, not an effect to reserve again; a
  listing of every run that finds fewer than counted reports it.
* Orphans: rows a run owns without their run row mean the run row is gone.

Every failure is `CorruptRecord` naming the record and the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from stores.base import CorruptRecord
from stores.codecs import open_text
from stores.records import ApprovalDecision, EffectRecord, RecordDecodeError, decode_record
from stores.sqlite_rows import row_digest, verified

R = TypeVar("R", bound=BaseModel)

# The records a run owns besides checkpoints: table, key column, name in errors.
OWNED: dict[type[BaseModel], tuple[str, str, str]] = {
    EffectRecord: ("effects", "key", "effect"),
    ApprovalDecision: ("approvals", "approval_id", "approval"),
}
_ORPHANS = ("SELECT 'checkpoints' FROM checkpoints WHERE run_id = ?1 UNION ALL"
            " SELECT 'effects' FROM effects WHERE run_id = ?1 UNION ALL"
            " SELECT 'approvals' FROM approvals WHERE run_id = ?1 LIMIT 1")
_COUNT_RUNS = ("UPDATE run_count SET runs = runs + ?1, checksum = row_digest('runs', runs + ?1)"
               " WHERE only = 1 AND checksum = row_digest('runs', runs)")


def decoded(path: Path, model: type[R], text: object, checksum: object, what: str) -> R:
    """A record from its checked text."""
    try:
        return decode_record(model, open_text(verified(path, text, checksum, what), what))
    except RecordDecodeError as error:
        raise CorruptRecord(f"{what} in {path} did not decode: {error}") from error


def owned_record(path: Path, model: type[R], run_id: str, key: str,
                 row: Sequence[object]) -> R:
    """An effect or decision from its row (record, checksum), which must name the run
    and key it is stored under."""
    _, column, noun = OWNED[model]
    what = f"{noun} {key!r} of run {run_id!r}"
    record = decoded(path, model, row[0], row[1], what)
    holds = (getattr(record, "run_id", None), getattr(record, column, None))
    if holds != (run_id, key):
        raise CorruptRecord(f"{what} in {path} holds {noun} {holds[1]!r} of run {holds[0]!r}")
    return record


def check_orphans(conn: sqlite3.Connection, path: Path, run_id: str) -> None:
    """For a run with no row: rows it owns mean its row went missing."""
    orphan = conn.execute(_ORPHANS, (run_id,)).fetchone()
    if orphan is not None:
        raise CorruptRecord(f"run {run_id!r} in {path} is missing, but its {orphan[0]} remain")


def check_effect_count(conn: sqlite3.Connection, path: Path, run_id: str, counted: int) -> None:
    """The run's effect rows must be as many as its row counts."""
    found: int = conn.execute("SELECT count(*) FROM effects WHERE run_id = ?",
                              (run_id,)).fetchone()[0]
    if found != counted:
        raise CorruptRecord(f"run {run_id!r} in {path} counts {counted} effects, but {found} "
                            "are stored (an effect went missing)")


def count_runs(conn: sqlite3.Connection, path: Path, change: int) -> None:
    """Move the store's run count by `change` (a create, a delete), checking it first."""
    if conn.execute(_COUNT_RUNS, (change,)).rowcount != 1:
        raise CorruptRecord(f"the run count in {path} is missing or failed its checksum")


def check_run_count(conn: sqlite3.Connection, path: Path, listed: int) -> None:
    """A listing of every run must list as many as the store counts."""
    row = conn.execute("SELECT runs, checksum FROM run_count WHERE only = 1").fetchone()
    if row is None or row_digest("runs", row[0]) != row[1]:
        raise CorruptRecord(f"the run count in {path} is missing or failed its checksum")
    if row[0] != listed:
        raise CorruptRecord(f"{path} counts {row[0]} runs, but {listed} are stored "
                            "(a run went missing)")


def checked_checkpoints(path: Path, run_id: str, rows: Sequence[Sequence[Any]],
                        last: int, *, beyond: bool) -> None:
    """Check rows of CHECKPOINT_SELECT (by seq): each sealed, and exactly seqs 1..`last`.

    `beyond` says the rows were read without an upper bound, so a row past
    `last` is one the run does not know: damage, like a gap or a missing tail.
    """
    for expected, row in enumerate(rows, 1):
        if row_digest("checkpoint", *row[:8]) != row[8]:
            raise CorruptRecord(f"checkpoint {row[1]} of run {run_id!r} in {path}: its columns "
                                "failed their checksum")
        if row[0] != run_id:
            raise CorruptRecord(f"checkpoint {row[1]} of run {run_id!r} in {path} belongs to "
                                f"run {row[0]!r}")
        if row[1] != expected:
            if expected > last:
                break
            raise CorruptRecord(f"checkpoint {expected} of run {run_id!r} in {path} is missing "
                                f"(the run's checkpoints go up to {last})")
    if len(rows) < last:
        raise CorruptRecord(f"checkpoint {len(rows) + 1} of run {run_id!r} in {path} is missing "
                            f"(the run's checkpoints go up to {last})")
    if beyond and len(rows) > last:
        raise CorruptRecord(f"checkpoint {rows[last][1]} of run {run_id!r} in {path} is beyond "
                            f"the run's latest checkpoint ({last})")
