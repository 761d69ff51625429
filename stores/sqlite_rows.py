"""How SqliteRunStore maps runs and checkpoints to rows, and back, and checks them.

A run row holds the run's definition (written once), its record JSON (written
by state changes) and, as plain columns, the fields list_runs filters on and
the fields a checkpoint moves (see `sqlite_schema`). Times are integer
microseconds since the epoch. Every text carries its sha256, and every row its
`columns_checksum` (`row_digest` of the covered columns: every column a read
returns, the texts' checksums included). A column a text also holds (status,
attempt, tenant, parent, resume request, creation time) must agree with it.
Any failure is `CorruptRecord` naming the run (and seq) and the file, never a
default. What checksums cannot see (a missing or misplaced row) is checked in
`sqlite_integrity`.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder as json_encoder
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

from stores.base import CorruptRecord
from stores.codecs import open_text, seal_text
from stores.deltas import SavedLists, assemble, assemble_each
from stores.event_log import events_fold
from stores.records import Checkpoint, RunEvent, RunRecord, agent_of

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_T = TypeVar("_T")
MAX_SEQ = 2**63 - 1  # SQLite's largest integer: "no upper bound" that still uses the key

# What a run write sets: the record, its checksum, and beside them the fields
# list_runs filters on (so the filters are indexed SQL) and the fields a
# checkpoint moves (so a checkpoint is one INSERT; see sqlite_schema).
RUN_FIELDS = ("status", "attempt", "parent_run_id", "tenant", "resume_requested_at",
              "lease_expires_at", "created_at", "checkpoint_seq", "consumed_tokens",
              "updated_at", "record", "checksum")
RUN_COLUMNS = ", ".join(RUN_FIELDS)
RUN_VALUES = ", ".join("?" * len(RUN_FIELDS))
CREATED = RUN_FIELDS.index("created_at")
ALWAYS_SET = {"lease_expires_at", "checkpoint_seq", "consumed_tokens", "updated_at", "checksum"}
CHECKPOINT_FIELDS = ("run_id", "seq", "attempt", "created_at", "lease_expires_at",
                     "consumed_tokens", "body", "size_bytes", "checksum", "columns_checksum")
CHECKPOINT_COLUMNS = ", ".join(CHECKPOINT_FIELDS)
CHECKPOINT_VALUES = ", ".join("?" * len(CHECKPOINT_FIELDS))

# What a read selects of a run row: its identity and store bookkeeping, the
# definition, the columns of RUN_FIELDS, and the seal over all of them.
RUN_SELECT = (f"run_id, incarnation, effect_count, definition, definition_checksum,"
              f" {RUN_COLUMNS}, columns_checksum")
# The columns a run row's seal covers, in the order row_digest takes them (the
# triggers of sqlite_schema's migration 3 list the same).
RUN_SEALED = ("run_id", "incarnation", "status", "attempt", "parent_run_id", "tenant",
              "resume_requested_at", "lease_expires_at", "created_at", "checkpoint_seq",
              "consumed_tokens", "updated_at", "effect_count", "definition_checksum", "checksum")
# The same seal as SQL over a row's current columns (a fenced write checks it).
RUN_SEAL_SQL = f"row_digest('run', {', '.join(RUN_SEALED)})"
# What a read selects of a checkpoint row, its seal last (the body is added
# after it when wanted). The seal covers every column before it.
CHECKPOINT_SELECT = ("run_id, seq, attempt, created_at, lease_expires_at, consumed_tokens,"
                     " size_bytes, checksum, columns_checksum")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# Characters of a text encoded at a time for its digest (see text_digest).
_DIGEST_CHUNK = 1 << 16


def text_digest(text: str) -> tuple[int, str]:
    """(UTF-8 size, sha256 hex) of `text`, encoded a piece at a time: a checkpoint body
    (a long loop's output) can be megabytes, and a whole copy of it as bytes would
    add that much to the run's peak memory for nothing."""
    if len(text) <= _DIGEST_CHUNK:
        data = text.encode()
        return len(data), hashlib.sha256(data).hexdigest()
    hashed, size = hashlib.sha256(), 0
    for start in range(0, len(text), _DIGEST_CHUNK):
        piece = text[start:start + _DIGEST_CHUNK].encode()
        hashed.update(piece)
        size += len(piece)
    return size, hashed.hexdigest()


def row_digest(*values: object) -> str:
    """The seal of a row's columns: sha256 of their JSON list. Registered as the SQL
    function `row_digest` (the first value names the kind of row)."""
    return hashlib.sha256(_row_json(values).encode()).hexdigest()


def _foreign(value: object) -> str:
    # A column of a type the store never writes (a blob, say): still a digest,
    # one that matches no seal the store wrote.
    return f"<{type(value).__name__}>{value!r}"


# What json.dumps(values, separators=(",", ":"), default=_foreign) writes, without
# building an encoder per call: several seals are computed on every commit.
_ROW_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_foreign)


def _row_json(values: tuple[object, ...]) -> str:
    """`_ROW_ENCODER.encode(values)`, by the C encoder that call builds, built once:
    `encode` makes a new one for every call, about a third of a seal's cost (every
    save computes two seals). The very same encoder and arguments, so the very same text:
    seals already stored stay valid. No check for circular values: a row's are
    columns, never containers. Without the C encoder (another interpreter), the
    encoder's own call."""
    return "".join(_ROW_C_ENCODER(values, 0)) if _ROW_C_ENCODER else _ROW_ENCODER.encode(values)


# json.encoder's own arguments for _ROW_ENCODER: no markers (check_circular off: a
# row's values are never containers), its default, ASCII strings, no indent, its
# separators, keys unsorted, no key skipped, NaN allowed. (Not in the stubs.)
_MAKE_C_ENCODER: Callable[..., Callable[[object, int], Sequence[str]]] | None = \
    getattr(json_encoder, "c_make_encoder", None)
_ROW_C_ENCODER = None if _MAKE_C_ENCODER is None else _MAKE_C_ENCODER(
    None, _foreign, json_encoder.encode_basestring_ascii, None, ":", ",", False, False, True)


def micros(at: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - EPOCH) // _MICROSECOND


def moment(value: int | None) -> datetime | None:
    """The datetime of a microseconds value; None stays None."""
    return None if value is None else EPOCH + timedelta(microseconds=value)


# The fields of a run that never change after create_run: its definition.
# (Not the budget: a resume may replace its limit. Runs stored when it was part of
# the definition still read it from there until their record is next written.)
DEFINITION: set[str] = {"run_id", "manifest_hash", "manifest", "variables", "parent",
                        "run_key", "tenant", "options", "created_at"}
# The fields kept in columns rather than in the record's JSON.
COLUMNS_ONLY = {"lease_expires_at", "checkpoint_seq", "consumed_tokens", "updated_at"}
NOT_IN_RECORD = DEFINITION | COLUMNS_ONLY


def run_values(run: RunRecord, before: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    """The columns a run write sets, in RUN_FIELDS order (all but the definition)."""
    record = seal_text(run.model_dump_json(exclude=NOT_IN_RECORD))
    lease = None if run.lease_expires_at is None else micros(run.lease_expires_at)
    created = before[CREATED] if before is not None else micros(run.created_at)
    requested = None if run.resume_requested_at is None else micros(run.resume_requested_at)
    return (run.status.value, run.attempt, run.parent.run_id if run.parent else None,
            run.tenant, requested, lease, created, run.checkpoint_seq or 0, run.consumed_tokens,
            micros(run.updated_at), record, digest(record))


@dataclass(frozen=True)
class StoredRun:
    """A run row as this store last read or wrote it, decoded."""

    checksum: str  # of the record JSON: while it matches, `run` needs no decoding
    run: RunRecord
    values: tuple[Any, ...]  # the row's columns, in RUN_FIELDS order
    incarnation: str
    effect_count: int = 0
    definition_checksum: str = ""
    seal: str = ""  # the row's columns_checksum
    # Whether `run` is what a read of this row decodes (`with_columns` applied): not
    # the record a write was given, nor one a checkpoint moved the columns of.
    current: bool = True

    def is_row(self, row: Sequence[Any]) -> bool:
        """Whether `row` (RUN_SELECT) is this very row: the same identity, columns, texts
        and seal. This store computed or checked that seal over these columns, and
        the record's checksum over its text (both in `values`), so such a row needs
        neither checked again: equal inputs give equal digests."""
        return (row[-1] == self.seal and row[1] == self.incarnation
                and row[2] == self.effect_count and row[4] == self.definition_checksum
                and tuple(row[5:-1]) == self.values)


@dataclass(frozen=True)
class RunRow:
    """A run row as read (RUN_SELECT), its seal checked."""

    run_id: str
    incarnation: str
    effect_count: int
    definition: object
    definition_checksum: object
    values: tuple[Any, ...]  # RUN_FIELDS order

    @property
    def record(self) -> object:
        return self.values[-2]

    @property
    def checksum(self) -> object:
        return self.values[-1]


# RUN_SEALED picked from (run_id, incarnation, effect_count, definition_checksum,
# *values): every save seals the run row it leaves.
_RUN_SEALED_FROM = itemgetter(*(
    ("run_id", "incarnation", "effect_count", "definition_checksum", *RUN_FIELDS).index(name)
    for name in RUN_SEALED))


def run_seal(run_id: str, incarnation: str, values: Sequence[Any], effect_count: int,
             definition_checksum: object) -> str:
    """The columns_checksum of a run row with these columns (`values` in RUN_FIELDS order)."""
    if len(values) != len(RUN_FIELDS):
        raise ValueError(f"a run row has {len(RUN_FIELDS)} columns, not {len(values)}")
    return row_digest("run", *_RUN_SEALED_FROM(
        (run_id, incarnation, effect_count, definition_checksum, *values)))


def run_row(path: Path, row: Sequence[Any]) -> RunRow:
    """A row of RUN_SELECT, or `CorruptRecord` when its columns fail their seal."""
    run_id, incarnation, effect_count, definition, definition_checksum = row[:5]
    values = tuple(row[5:-1])
    if run_seal(run_id, incarnation, values, effect_count, definition_checksum) != row[-1]:
        raise CorruptRecord(f"run {run_id!r} in {path}: its columns failed their checksum")
    return RunRow(run_id, incarnation, effect_count, definition, definition_checksum, values)


def verified(path: Path, text: object, checksum: object, what: str) -> str:
    """`text` when it matches its checksum, else `CorruptRecord` naming what and where."""
    if not isinstance(text, str) or digest(text) != checksum:
        raise CorruptRecord(f"{what} in {path} failed its checksum")
    return text


def decode_run(path: Path, run_id: str, *, text: object, checksum: object,
               definition: object, definition_checksum: object) -> RunRecord:
    """The run from its definition and record JSON (columns applied by the caller)."""
    what = f"run {run_id!r}"
    state = open_text(verified(path, text, checksum, what), what)
    fixed = open_text(verified(path, definition, definition_checksum,
                               f"the definition of {what}"), f"the definition of {what}")
    try:
        parts = json.loads(fixed), json.loads(state)
        if not all(isinstance(part, dict) for part in parts):
            raise ValueError("not a JSON object")
        run = RunRecord.model_validate({**parts[0], **parts[1]})
    except ValueError as error:  # JSON and pydantic validation errors alike
        raise CorruptRecord(f"{what} in {path} did not decode: {error}") from error
    if run.run_id != run_id:
        raise CorruptRecord(f"{what} in {path} holds run {run.run_id!r}")
    return run

def copy_agents(conn: sqlite3.Connection) -> None:
    """Fill the `agent` column of the runs stored before it existed (a migration step):
    `records.agent_of` of each definition's manifest. A definition that does not
    decode is left without one; reading the run reports it anyway."""
    rows = conn.execute("SELECT run_id, definition FROM runs WHERE agent IS NULL").fetchall()
    for run_id, definition in rows:
        try:
            manifest = json.loads(open_text(definition, f"the definition of run {run_id!r}")
                                  ).get("manifest")
        except (TypeError, ValueError, AttributeError):
            continue
        if isinstance(manifest, dict):
            conn.execute("UPDATE runs SET agent = ? WHERE run_id = ?",
                         (agent_of(manifest), run_id))


def with_columns(path: Path, run: RunRecord, values: tuple[Any, ...]) -> RunRecord:
    """The run with the fields a checkpoint moves, as its columns hold them.

    The columns that copy a field of the texts must agree with them.
    """
    row = dict(zip(RUN_FIELDS, values, strict=True))
    requested = run.resume_requested_at
    copies = {"status": run.status.value, "attempt": run.attempt,
              "parent_run_id": run.parent.run_id if run.parent else None,
              "tenant": run.tenant, "created_at": micros(run.created_at),
              "resume_requested_at": None if requested is None else micros(requested)}
    for name, value in copies.items():
        if row[name] != value:
            raise CorruptRecord(f"run {run.run_id!r} in {path}: its {name} column disagrees "
                                "with its record")
    try:
        return run.model_copy(update={
            "lease_expires_at": moment(row["lease_expires_at"]),
            "checkpoint_seq": int(row["checkpoint_seq"]) or None,
            "consumed_tokens": int(row["consumed_tokens"]),
            "updated_at": moment(int(row["updated_at"])),
        })
    except (TypeError, ValueError, OverflowError) as error:
        raise CorruptRecord(f"run {run.run_id!r} in {path}: its columns did not "
                            f"decode: {error}") from error


def checkpoint_row(checkpoint: Checkpoint, body: str,
                   lease_expires_at: datetime | None) -> tuple[Any, ...]:
    """The values of CHECKPOINT_COLUMNS for a checkpoint stored as `body` (through the
    configured codec: size and sha256 are of the stored text)."""
    body = seal_text(body)
    size, checksum = text_digest(body)
    covered = (checkpoint.run_id, checkpoint.seq, checkpoint.attempt,
               micros(checkpoint.created_at),
               None if lease_expires_at is None else micros(lease_expires_at),
               checkpoint.budget.consumed_tokens, size, checksum)
    return (*covered[:6], body, *covered[6:], row_digest("checkpoint", *covered))


def assemble_rows(path: Path, run_id: str,
                  rows: Sequence[Sequence[Any]]) -> tuple[Checkpoint, SavedLists]:
    """The checkpoint of the last of `rows` (CHECKPOINT_SELECT and the body, by seq from
    seq 1, checked by `checked_checkpoints`)."""
    checkpoint, saved = _decoded(path, run_id, rows, assemble)
    _check_identity(path, run_id, checkpoint, rows[-1][1])
    return checkpoint, saved


def assemble_rows_each(path: Path, run_id: str, rows: Sequence[Sequence[Any]],
                       first: int) -> list[Checkpoint]:
    """The checkpoints of `rows` (as for `assemble_rows`) from seq `first` on, in one fold."""
    checkpoints = _decoded(path, run_id, rows,
                           lambda bodies: list(assemble_each(bodies, first=first)))
    for checkpoint, row in zip(checkpoints, rows[len(rows) - len(checkpoints):], strict=True):
        _check_identity(path, run_id, checkpoint, row[1])
    return checkpoints


def events_of_rows(path: Path, run_id: str, rows: Sequence[Sequence[Any]], *, after: int,
                   limit: int) -> list[RunEvent]:
    """The page of the run's event log after `after` in the bodies of `rows` (every
    checkpoint of the run, as for `assemble_rows`)."""
    return _decoded(path, run_id, rows, events_fold(run_id, after, limit))


def _decoded(path: Path, run_id: str, rows: Sequence[Sequence[Any]],
             fold: Callable[[Iterator[str]], _T]) -> _T:
    current = rows[0][1]

    def bodies() -> Iterator[str]:
        nonlocal current
        for row in rows:
            current = row[1]
            what = f"checkpoint {row[1]} of run {run_id!r}"
            yield open_text(verified(path, row[9], row[7], what), what)

    try:
        return fold(bodies())
    # deltas raises DeltaFormatError for what it checks, but JSON of the
    # wrong shape surfaces as a lookup, type or attribute error, and a bad
    # head as a pydantic ValidationError (a ValueError): all are damage.
    except (ValueError, LookupError, TypeError, AttributeError) as error:
        raise CorruptRecord(f"checkpoint {current} of run {run_id!r} in {path} "
                            f"did not decode: {error}") from error


def _check_identity(path: Path, run_id: str, checkpoint: Checkpoint, seq: object) -> None:
    if checkpoint.run_id != run_id or checkpoint.seq != seq:
        raise CorruptRecord(f"checkpoint {seq} of run {run_id!r} in {path} "
                            f"holds checkpoint {checkpoint.seq} of run {checkpoint.run_id!r}")
