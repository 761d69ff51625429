"""The read connections of SqliteRunStore: reads that never wait for a commit.

In WAL mode a reader sees the database as of its transaction's start and
neither waits for the writer nor holds it up. The store's one write
connection is held by a group commit's leader through its fsync
(`sqlite_group_commit`), so reads made on it would queue behind every flush:
a `serve` answering `GET /runs/{id}` or checking a run key would wait on the
disk. Reads are made on connections of their own instead, opened when first
needed and kept for the next read, up to `limit` at once (a further reader
waits for one to come back).

A read connection is `query_only`: nothing made on it can change the file.
What it reads is committed, so a read started after a write returned sees
that write. It may be older than a write being committed meanwhile, which is
why a row read here never replaces one the store remembers for its next write;
it only fills in a run the store knew nothing of (`RunRows.read`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from stores.sqlite_schema import open_reader, transaction, translated

# Read connections a store keeps open at most: each holds its own page cache
# (SQLite's default, about 2 MiB), and reads are mostly decoding in Python,
# which more connections would not run any faster.
READERS = 4


class ReadConnections:
    """Up to `limit` read connections to one store file, shared by threads."""

    def __init__(self, path: Path, busy_timeout_seconds: float, limit: int = READERS) -> None:
        if limit < 1:
            raise ValueError("a store needs at least one read connection")
        self._path = path
        self._busy_timeout_seconds = busy_timeout_seconds
        self._free = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()  # guards _idle and _closed
        self._idle: list[sqlite3.Connection] = []
        self._closed = False

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A read transaction on a connection of its own, committed on the way out."""
        with self._free, translated(self._path):
            conn = self._take()
            try:
                with transaction(conn, write=False):
                    yield conn
            finally:
                self._give_back(conn)

    def close(self) -> None:
        """Close the idle connections now, and each busy one as its read ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                # The message sqlite3 gives on a closed connection, translated alike.
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            if self._idle:
                return self._idle.pop()
        return open_reader(self._path, self._busy_timeout_seconds)

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if not self._closed and not conn.in_transaction:
                self._idle.append(conn)
                return
        # Closed meanwhile, or a transaction its rollback could not end.
        conn.close()
