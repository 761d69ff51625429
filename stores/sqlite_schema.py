"""The SQLite file behind SqliteRunStore: schema migrations, connection setup, errors.

Migrations are an ordered list with a version table; opening a file applies
the missing ones under the write lock. A connection is WAL, fenced by a busy
timeout, with the store's `row_digest` function registered.

A new database is built whole under a temporary name (private, mode 0600,
schema applied) and linked into place, so a file at the store's path is always
a complete database: an empty (0-byte) file, a file that is not SQLite, a
directory, a device or a dangling symbolic link there is refused, never
initialised over or followed. Processes creating the same store at once each
build one; the first link wins and the others open it.

Every `sqlite3` error is translated in one place (`store_error`, applied by
`translation` and `translated`): damage to the file (malformed, not a database, a schema that
no longer matches) is `CorruptRecord`; anything about reaching the file
(locked, I/O, permissions, a closed store) is `StoreUnavailable`. Both name
the file. A transaction rolled back on the way out of an error reports that
error, never the rollback's (`roll_back`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from stores.base import CorruptRecord, StoreError, StoreUnavailable
from stores.records import utc_now
from stores.sqlite_rows import CHECKPOINT_COLUMNS, CHECKPOINT_FIELDS, copy_agents, row_digest

SQLITE_HEADER = b"SQLite format 3\0"
# sqlite3 errors that mean the file's content is damaged (or is not this
# store's), as opposed to the file being out of reach for now.
_DAMAGE = re.compile(r"malformed|not a database|corrupt|no such (table|column|index|trigger)"
                     r"|already exists|duplicate column|unsupported file format"
                     r"|constraint failed|datatype mismatch|could not decode", re.IGNORECASE)
_MESSAGE_CHARS = 200  # sqlite3 messages may quote stored text; quote a little of it

# Ordered schema migrations; version N is _MIGRATIONS[N - 1]. Append only: a
# released entry is never edited. Each is a tuple of single statements because
# sqlite3's executescript() commits the open transaction first, which would
# break the all-or-nothing migration under BEGIN IMMEDIATE. A step SQL cannot
# express is a function of the connection, run in that same transaction.
_MIGRATIONS: tuple[tuple[str | Callable[[sqlite3.Connection], None], ...], ...] = (
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
    (
        # Every column a read returns is covered by a checksum (`columns_checksum`,
        # `sqlite_rows.row_digest` of the covered columns in a fixed order), not
        # only the texts: a damaged page can no longer change a checkpoint seq, a
        # lease time or a token count unnoticed. `row_digest` is a function this
        # store registers on its connections, so a connection without it (the
        # sqlite3 shell) cannot insert checkpoints or effects at all.
        #
        # `effect_count` counts the run's effects (only ever inserted, removed
        # with the run), so an effect row that went missing is damage, not
        # absence. `run_count` counts the runs, kept by create_run and
        # delete_run, so a full listing notices a run row that went missing.
        "ALTER TABLE runs ADD COLUMN effect_count INTEGER NOT NULL DEFAULT 0",
        """UPDATE runs SET effect_count = (SELECT count(*) FROM effects
            WHERE effects.run_id = runs.run_id)""",
        "ALTER TABLE runs ADD COLUMN columns_checksum TEXT",
        """UPDATE runs SET columns_checksum = row_digest('run', run_id, incarnation, status,
            attempt, parent_run_id, tenant, resume_requested_at, lease_expires_at, created_at,
            checkpoint_seq, consumed_tokens, updated_at, effect_count, definition_checksum,
            checksum)""",
        "ALTER TABLE checkpoints ADD COLUMN columns_checksum TEXT",
        """UPDATE checkpoints SET columns_checksum = row_digest('checkpoint', run_id, seq,
            attempt, created_at, lease_expires_at, consumed_tokens, size_bytes, checksum)""",
        # The trigger moves the run's checkpoint columns as before and re-seals
        # them; a run row that fails its checksum is not moved (the checkpoint
        # then shows as beyond the run's latest, which reads report).
        "DROP TRIGGER checkpoint_moves_run",
        """CREATE TRIGGER checkpoint_moves_run AFTER INSERT ON checkpoints BEGIN
            UPDATE runs SET checkpoint_seq = NEW.seq, consumed_tokens = NEW.consumed_tokens,
                updated_at = NEW.created_at,
                lease_expires_at = coalesce(NEW.lease_expires_at, lease_expires_at),
                columns_checksum = row_digest('run', run_id, incarnation, status, attempt,
                    parent_run_id, tenant, resume_requested_at,
                    coalesce(NEW.lease_expires_at, lease_expires_at), created_at, NEW.seq,
                    NEW.consumed_tokens, NEW.created_at, effect_count, definition_checksum,
                    checksum)
            WHERE run_id = NEW.run_id AND NEW.seq > checkpoint_seq
                AND columns_checksum = row_digest('run', run_id, incarnation, status, attempt,
                    parent_run_id, tenant, resume_requested_at, lease_expires_at, created_at,
                    checkpoint_seq, consumed_tokens, updated_at, effect_count,
                    definition_checksum, checksum);
        END""",
        """CREATE TRIGGER effect_counts_on_run AFTER INSERT ON effects BEGIN
            UPDATE runs SET effect_count = effect_count + 1,
                columns_checksum = row_digest('run', run_id, incarnation, status, attempt,
                    parent_run_id, tenant, resume_requested_at, lease_expires_at, created_at,
                    checkpoint_seq, consumed_tokens, updated_at, effect_count + 1,
                    definition_checksum, checksum)
            WHERE run_id = NEW.run_id;
        END""",
        """CREATE TABLE run_count (only INTEGER PRIMARY KEY CHECK (only = 1),
            runs INTEGER NOT NULL, checksum TEXT NOT NULL)""",
        """INSERT INTO run_count (only, runs, checksum)
            SELECT 1, count(*), row_digest('runs', count(*)) FROM runs""",
    ),
    (
        # The run key of each run created for an idempotent request, unique
        # among the file's runs; it goes with its run. The run's sealed
        # definition holds the same key, so a row is checked against it on read.
        """CREATE TABLE run_keys (run_key TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE)""",
        "CREATE INDEX run_keys_by_run ON run_keys (run_id)",
    ),
    (
        # The operator's search (`list_runs(agent=, created_after=, ...)`) as
        # indexed SQL. `agent` copies `records.agent_of` of the definition's
        # manifest, written once by create_run like the definition; it is not
        # part of the row's seal (that would re-seal every row and trigger), and
        # needs none: list_runs checks every run it returns against its record,
        # so an altered column is reported, never listed under the wrong agent.
        "ALTER TABLE runs ADD COLUMN agent TEXT",
        # Runs stored before: the column from each definition, decoded in Python
        # (an encrypted definition too, which SQL's json functions cannot read).
        copy_agents,
        # An agent's runs by creation time: a search by agent and time range
        # reads the runs in the range, not the agent's every run.
        "CREATE INDEX runs_by_agent ON runs (agent, created_at) WHERE agent IS NOT NULL",
        # A time range without an agent; created_at never changes, so the
        # entry costs one write per run.
        "CREATE INDEX runs_by_creation ON runs (created_at)",
    ),
)
SCHEMA_VERSION = len(_MIGRATIONS)

# An owner's checkpoint, saved by SqliteRunStore's fast path as one INSERT into
# this view of the connection's own (TEMP: no part of the file's schema). The
# store hands in the run row's seal as it knows it (`seal_before`) and the seal
# of the row the save leaves (`seal_after`), both computed in Python from the
# column values it knows: the statement calls no Python function, where the
# `checkpoint_moves_run` trigger computes and checks seals with `row_digest`
# (three calls, a large share of a checkpoint's cost). It saves only when the
# row is the store's own: its incarnation, attempt, status, latest seq and seal
# as the store knows them; else it raises, and the store takes the reading
# path, which reports damage or decides by the rules. A damaged column cannot
# be sealed this way: `seal_after` covers the values the store knows, not the
# stored ones, so the next read of the row reports the damage. The run row is
# moved before the checkpoint is inserted, so `checkpoint_moves_run` then finds
# nothing to move (its `NEW.seq > checkpoint_seq` fails before its seal check).
SAVE_VIEW_COLUMNS = f"{CHECKPOINT_COLUMNS}, incarnation, seal_before, seal_after"
_SAVE_VIEW: tuple[str, ...] = (
    "CREATE TEMP VIEW IF NOT EXISTS checkpoint_saves AS SELECT "
    + ", ".join(f"NULL AS {name.strip()}" for name in SAVE_VIEW_COLUMNS.split(","))
    + " WHERE 0",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS checkpoint_saved INSTEAD OF INSERT ON checkpoint_saves
    BEGIN
        SELECT RAISE(ABORT, 'agent-runtime: the run row is not the one this store knows')
            WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id
                AND incarnation = NEW.incarnation AND attempt = NEW.attempt
                AND status = 'running' AND checkpoint_seq = NEW.seq - 1
                AND columns_checksum = NEW.seal_before);
        UPDATE runs SET checkpoint_seq = NEW.seq, consumed_tokens = NEW.consumed_tokens,
            updated_at = NEW.created_at,
            lease_expires_at = coalesce(NEW.lease_expires_at, lease_expires_at),
            columns_checksum = NEW.seal_after
            WHERE run_id = NEW.run_id;
        INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES ({", ".join(
            "NEW." + name for name in CHECKPOINT_FIELDS)});
    END""",
)


def store_error(path: Path, error: sqlite3.Error) -> StoreError:
    """The store error for an sqlite3 error at `path`: the one place they are translated."""
    message = str(error) or type(error).__name__
    if len(message) > _MESSAGE_CHARS:
        message = f"{message[:_MESSAGE_CHARS]!r}..."
    damaged = not isinstance(error, sqlite3.ProgrammingError | sqlite3.InterfaceError) and (
        type(error) is sqlite3.DatabaseError or isinstance(error, sqlite3.IntegrityError)
        or _DAMAGE.search(message) is not None)
    if damaged:
        return CorruptRecord(f"{path} is damaged or not an agent-runtime store: {message}")
    return StoreUnavailable(f"{path} cannot be used: {message}")


def translation(path: Path, error: BaseException) -> StoreError | None:
    """The store's error for an error of sqlite3 (or the OS, or text sqlite3 could not
    decode) at `path`, caused by it; None for any other error."""
    found: StoreError
    if isinstance(error, sqlite3.Error):
        found = store_error(path, error)
    elif isinstance(error, UnicodeDecodeError):  # sqlite3 decoding damaged text, or its message
        found = CorruptRecord(f"{path} is damaged or not an agent-runtime store: text that "
                              f"is not UTF-8 ({error.reason})")
    elif isinstance(error, OSError):
        found = StoreUnavailable(f"{path} cannot be used: {error.strerror or error}")
    else:
        return None
    found.__cause__ = error
    return found


@contextlib.contextmanager
def translated(path: Path) -> Iterator[None]:
    """Raise the store's error for any sqlite3 error in the block (and for an OS error,
    or text sqlite3 could not decode)."""
    try:
        yield
    except (sqlite3.Error, UnicodeDecodeError, OSError) as error:
        found = translation(path, error)
        assert found is not None  # every error caught here has one
        raise found from error


def begin(conn: sqlite3.Connection, *, write: bool) -> None:
    # IMMEDIATE takes the write lock before the first read (waiting up to the
    # busy timeout), so a read-modify-write is atomic across processes; a
    # deferred transaction that later tried to write could fail with BUSY
    # instead of waiting.
    if conn.in_transaction:  # left open by a rollback that failed (`roll_back`)
        conn.execute("ROLLBACK")
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")


def roll_back(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any, on the way out of an error.

    That error is the one to report: should the rollback fail too (an I/O
    error, a closed connection), its own error is dropped, and a transaction
    it left open is rolled back before the next one begins (`begin`)."""
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, *, write: bool) -> Iterator[sqlite3.Connection]:
    begin(conn, write=write)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        roll_back(conn)
        raise


def register_functions(conn: sqlite3.Connection) -> None:
    """The SQL functions the schema's triggers call (see migration 3)."""
    conn.create_function("row_digest", -1, row_digest, deterministic=True)


def migrate(conn: sqlite3.Connection, *, version: int = SCHEMA_VERSION,
            path: Path | None = None) -> None:
    """Apply the migrations up to `version` (the latest unless a test builds an old file).

    `path` names the file in errors.
    """
    where = path or "the database"
    register_functions(conn)
    # The version is read under the write lock, so two connections migrating
    # one file at once never both apply a migration.
    with transaction(conn, write=True):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                     "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        applied = [row[0] for row in conn.execute(
            "SELECT version FROM schema_version ORDER BY version")]
        current = len(applied)
        if not all(type(number) is int for number in applied):
            raise CorruptRecord(f"{where}: its schema_version table is damaged")
        if applied and applied[-1] > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"{where}: database schema version {applied[-1]} is newer than this runtime "
                f"supports ({SCHEMA_VERSION}); upgrade agent-runtime")
        if not applied and _has_tables(conn):
            raise CorruptRecord(f"{where}: an SQLite database, but not an agent-runtime store "
                                "(it has tables and no schema versions)")
        if applied != list(range(1, current + 1)):
            raise CorruptRecord(f"{where}: its schema_version table is damaged "
                                f"(versions {applied})")
        for number in range(current + 1, version + 1):
            for statement in _MIGRATIONS[number - 1]:
                if isinstance(statement, str):
                    conn.execute(statement)
                else:  # a step SQL cannot express, run in the same transaction
                    statement(conn)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                         (number, utc_now().isoformat()))


def _is_ours(conn: sqlite3.Connection) -> bool:
    """Whether the database is empty or has this store's version table."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master"
                                            " WHERE type = 'table'")}
    return not names or "schema_version" in names


def _has_tables(conn: sqlite3.Connection) -> bool:
    """Whether the database has tables besides the (just created) version table."""
    found: int = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                              " AND name != 'schema_version'").fetchone()[0]
    return found > 0


def _enable_wal(conn: sqlite3.Connection, busy_timeout_seconds: float) -> str:
    # Switching a file to WAL needs it to itself, and SQLite answers "database
    # is locked" at once rather than waiting in the busy handler when other
    # processes are opening it too: retry, within the busy timeout.
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


def _checked_location(path: Path) -> bool:
    """Whether a store file exists at `path`; refuse what must not be opened there."""
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(link.st_mode) and not path.exists():
        raise StoreUnavailable(f"{path} is a symbolic link to {os.readlink(path)!r}, which "
                               "does not exist; the store is never created through a link")
    info = path.stat()
    if stat.S_ISDIR(info.st_mode):
        raise StoreUnavailable(f"{path} is a directory, not an SQLite store file")
    if not stat.S_ISREG(info.st_mode):
        raise StoreUnavailable(f"{path} is not a regular file (a device, pipe or socket)")
    if info.st_size == 0:
        raise CorruptRecord(f"{path} is empty (0 bytes), not an agent-runtime store; a new "
                            "store is created only where no file exists")
    with path.open("rb") as file:
        if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise CorruptRecord(f"{path} is not an SQLite database (its header is not "
                                "SQLite's)")
    return True


def _configured(path: Path, synchronous: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout_seconds, isolation_level=None,
                           check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        # The triggers call row_digest; some builds default to refusing
        # application functions in the schema.
        conn.execute("PRAGMA trusted_schema = ON")
        if not _is_ours(conn):  # checked before anything changes the file
            raise CorruptRecord(f"{path}: an SQLite database, but not an agent-runtime store "
                                "(it has tables and no schema versions)")
        mode = _enable_wal(conn, busy_timeout_seconds)
        if str(mode).lower() != "wal":
            raise StoreUnavailable(f"{path} cannot use WAL journaling (got {mode!r}); "
                                   "SQLite stores need a local file system")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn, path=path)
        for statement in _SAVE_VIEW:
            conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def open_reader(path: Path, busy_timeout_seconds: float) -> sqlite3.Connection:
    """A read-only connection to the store at `path`, which a write connection opened
    (and migrated) first (`sqlite_readers`)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_seconds, isolation_level=None,
                           check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        conn.execute("PRAGMA query_only = ON")
        register_functions(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _create(path: Path, busy_timeout_seconds: float) -> None:
    """Build a new store beside `path` and link it into place, unless one appears first."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    building = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    # Created private: SQLite gives its -wal and -shm files the database's mode.
    os.close(os.open(building, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    try:
        # Closing the only connection folds the WAL into the file: it is whole.
        _configured(building, "FULL", busy_timeout_seconds).close()
        with contextlib.suppress(FileExistsError):  # another process's store came first
            os.link(building, path)
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{building}{suffix}")


def connect(path: Path, synchronous: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    """An open, migrated connection to the store at `path` (created when no file is there)."""
    with translated(path):
        if not _checked_location(path):
            _create(path, busy_timeout_seconds)
            _checked_location(path)
        conn = _configured(path, synchronous, busy_timeout_seconds)
        real = os.path.realpath(path)  # SQLite names its -wal and -shm after the real file
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f"{real}{suffix}", 0o600)
        return conn
