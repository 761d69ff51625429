"""The SQLite floor of bench/engine_overhead.py: what our store wrote, counted
(`CommitLog`, `stored_bytes`), and the same commits with the same bytes made
again as bare INSERTs (`replay_commits`), which no store can beat on this disk.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any


class CommitLog:
    """How many commits one SQLite connection made, from its statement trace.

    The connection is in autocommit mode, so a write outside BEGIN ... COMMIT
    is a commit of its own. SQLite traces a statement again for each trigger
    program it runs; an identical consecutive line is that, not a new write."""

    def __init__(self) -> None:
        self.commits = 0
        self._in_transaction = False
        self._previous = ""

    def trace(self, statement: str) -> None:
        if statement == self._previous:
            return
        self._previous = statement
        head = statement.lstrip()[:7].upper()
        if head.startswith("BEGIN"):
            self._in_transaction = True
        elif head.startswith(("COMMIT", "END")):
            self._in_transaction = False
            self.commits += 1
        elif not self._in_transaction and head.startswith(("INSERT", "UPDATE", "REPLACE",
                                                            "DELETE")):
            self.commits += 1


def stored_bytes(path: Path) -> int:
    """The bytes of run state our store keeps: checkpoint bodies and effect records."""
    conn = sqlite3.connect(path)
    try:
        bodies = conn.execute("SELECT coalesce(sum(length(body)), 0) FROM checkpoints")
        records = conn.execute("SELECT coalesce(sum(length(record)), 0) FROM effects")
        return int(bodies.fetchone()[0]) + int(records.fetchone()[0])
    finally:
        conn.close()


def written_by_sqlite(directory: Path) -> dict[str, int]:
    """The bytes and commits `sqlite` made (it runs first and writes commits.json)."""
    found: dict[str, int] = json.loads((directory / "commits.json").read_text())
    return found


def replay_commits(directory: Path, name: str, written: dict[str, int],
                    work_seconds: float = 0.0) -> dict[str, Any]:
    """`sqlite`'s commits with its bytes as bare INSERTs, each after `work_seconds` of
    busy CPU."""
    share, extra = divmod(written["bytes"], max(1, written["commits"]))
    conn = sqlite3.connect(directory / name, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE writes (id INTEGER PRIMARY KEY, body TEXT)")
    bodies = ["b" * (share + (1 if index < extra else 0)) for index in range(written["commits"])]
    clock = time.perf_counter
    started = clock()
    for body in bodies:
        if work_seconds:
            until = clock() + work_seconds
            while clock() < until:
                pass
        conn.execute("BEGIN")
        conn.execute("INSERT INTO writes (body) VALUES (?)", (body,))
        conn.execute("COMMIT")
    elapsed = clock() - started
    conn.close()
    return {"seconds": elapsed, **written}
