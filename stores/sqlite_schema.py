"""The SQLite file behind SqliteRunStore: schema migrations and connection setup.

Migrations are an ordered list with a version table; opening a file applies
the missing ones under the write lock, so processes opening a fresh file at
once migrate it exactly once. A connection is WAL, fenced by a busy timeout,
and its file is private (mode 0600) from its first byte.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from stores.base import StoreError
from stores.records import utc_now

# Ordered schema migrations; version N is _MIGRATIONS[N - 1]. Append only: a
# released entry is never edited. Each is a tuple of single statements because
# sqlite3's executescript() commits the open transaction first, which would
# break the all-or-nothing migration under BEGIN IMMEDIATE.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # Times are integer microseconds since the epoch (UTC): exact, and
        # ordered like the datetimes they come from. `incarnation` is new for
        # every create_run, so a delta cache entry can never outlive a run that
        # another process deleted and recreated.
        #
        # A run row holds three parts: `definition` (manifest, variables,
        # options...: written once by create_run), `record` (status,
        # suspension, output...: written by state changes), and the columns a
        # checkpoint moves (checkpoint_seq, consumed_tokens, lease_expires_at,
        # updated_at). A checkpoint is then one INSERT: the trigger below moves
        # those columns in the same statement, so an owner's save is a single
        # atomic statement and never re-encodes or rewrites the rest.
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, incarnation TEXT NOT NULL, status TEXT NOT NULL,
            attempt INTEGER NOT NULL, parent_run_id TEXT, lease_expires_at INTEGER,
            created_at INTEGER NOT NULL, checkpoint_seq INTEGER NOT NULL,
            consumed_tokens INTEGER NOT NULL, updated_at INTEGER NOT NULL,
            definition TEXT NOT NULL, definition_checksum TEXT NOT NULL,
            record TEXT NOT NULL, checksum TEXT NOT NULL)""",

        # No index on the lease: every checkpoint moves it, and an index entry
        # moved per checkpoint costs a page write per commit. The reconciler's
        # query (running runs whose lease expired) reads the running runs through
        # the status prefix of this index instead; they are few.
        "CREATE INDEX runs_by_created ON runs (status, created_at)",
        "CREATE INDEX runs_by_parent ON runs (parent_run_id)",
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            seq INTEGER NOT NULL, attempt INTEGER NOT NULL, created_at INTEGER NOT NULL,
            lease_expires_at INTEGER, consumed_tokens INTEGER NOT NULL,
            body TEXT NOT NULL, size_bytes INTEGER NOT NULL, checksum TEXT NOT NULL,
            PRIMARY KEY (run_id, seq))""",
        # The lease moves only when the save renews it (a null keeps it).
        """CREATE TRIGGER checkpoint_moves_run AFTER INSERT ON checkpoints BEGIN
            UPDATE runs SET checkpoint_seq = NEW.seq, consumed_tokens = NEW.consumed_tokens,
                updated_at = NEW.created_at,
                lease_expires_at = coalesce(NEW.lease_expires_at, lease_expires_at)
            WHERE run_id = NEW.run_id AND NEW.seq > checkpoint_seq;
        END""",
        """CREATE TABLE effects (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            key TEXT NOT NULL, record TEXT NOT NULL, checksum TEXT NOT NULL,
            PRIMARY KEY (run_id, key))""",
        """CREATE TABLE approvals (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            approval_id TEXT NOT NULL, record TEXT NOT NULL, checksum TEXT NOT NULL,
            PRIMARY KEY (run_id, approval_id))""",
    ),
    (
        # list_runs(tenant=) and list_runs(resume_requested_before=) as indexed
        # SQL. Like the other filter columns, each copies a field of a
        # checksummed text: `tenant` of the definition, `resume_requested_at`
        # of the record (microseconds); list_runs checks every row it returns
        # against its texts. Rows of version 1 have no resume request (the
        # field did not exist); their tenant is copied from the definition,
        # unless the definition is damaged, which reading it reports anyway.
        "ALTER TABLE runs ADD COLUMN tenant TEXT",
        "ALTER TABLE runs ADD COLUMN resume_requested_at INTEGER",
        """UPDATE runs SET tenant = CASE WHEN json_valid(definition)
            THEN json_extract(definition, '$.tenant') END""",
        # Partial: runs without a tenant, and the many runs with no pending
        # request, cost these indexes nothing. A request is filed and cleared
        # once per suspension, so its index entry moves rarely.
        "CREATE INDEX runs_by_tenant ON runs (tenant, run_id) WHERE tenant IS NOT NULL",
        # Led by status, so the planner prefers it to runs_by_created for the
        # reconciler's `status = 'suspended' AND resume_requested_at < ?`.
        """CREATE INDEX runs_by_resume_request ON runs (status, resume_requested_at)
            WHERE resume_requested_at IS NOT NULL""",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, *, write: bool) -> Iterator[sqlite3.Connection]:
    # IMMEDIATE takes the write lock before the first read (waiting up to the
    # busy timeout), so a read-modify-write is atomic across processes; a
    # deferred transaction that later tried to write could fail with BUSY
    # instead of waiting.
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def migrate(conn: sqlite3.Connection, *, version: int = SCHEMA_VERSION) -> None:
    """Apply the migrations up to `version` (the latest unless a test builds an old file)."""
    # The version is read under the write lock, so when two processes open a
    # fresh file at once the second sees the first's work and skips it.
    with transaction(conn, write=True):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                     "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        current: int = conn.execute(
            "SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
        if current > SCHEMA_VERSION:
            raise StoreError(f"database schema version {current} is newer than this "
                             f"runtime supports ({SCHEMA_VERSION}); upgrade agent-runtime")
        for applied in range(current + 1, version + 1):
            for statement in _MIGRATIONS[applied - 1]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                         (applied, utc_now().isoformat()))


def _enable_wal(conn: sqlite3.Connection, busy_timeout_seconds: float) -> str:
    # Switching a fresh file to WAL needs it to itself, and SQLite answers
    # "database is locked" at once rather than waiting in the busy handler when
    # other processes are opening it too: retry, within the busy timeout.
    deadline = time.monotonic() + busy_timeout_seconds
    delay = 0.005
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def connect(path: Path, synchronous: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Create the file ourselves so it is private from its first byte; SQLite
    # gives the -wal and -shm files it creates the database file's mode.
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    conn = sqlite3.connect(path, timeout=busy_timeout_seconds, isolation_level=None,
                           check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        mode = _enable_wal(conn, busy_timeout_seconds)
        if str(mode).lower() != "wal":
            raise StoreError(f"{path} cannot use WAL journaling (got {mode!r}); "
                             "SQLite stores need a local file system")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)
    return conn
