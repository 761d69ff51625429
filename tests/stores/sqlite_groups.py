"""Writes made to share one group commit of an SQLite store, for its tests.

A store's writes share a transaction when they queue while another is being
made. The tests make that certain instead of likely: they hold the store's
connection lock (what a transaction in the making holds) while the writes
queue, so the first writer to lead waits for it and then takes every write
queued by then.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from stores.records import Checkpoint, RunRecord
from stores.sqlite import SqliteRunStore
from stores.sqlite_group_commit import GroupCommit

HANG = 60.0  # seconds: a wait this long means a hang, not a slow machine
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def numbered_checkpoint(run_id: str, seq: int, attempt: int = 1) -> Checkpoint:
    """Checkpoint `seq` of a run, its transcript `seq` entries long."""
    return Checkpoint(run_id=run_id, seq=seq, attempt=attempt, manifest_hash="sha256:m",
                      transcript=[{"n": index} for index in range(seq)],
                      created_at=NOW + timedelta(seconds=seq))


@contextlib.contextmanager
def other_connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of someone else's to the store's file: it sees only what was
    committed."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


def start_runs(store: SqliteRunStore, run_ids: Sequence[str]) -> None:
    """Every run created, owned at attempt 1, with checkpoint 1."""
    for run_id in run_ids:
        store.create_run(RunRecord(run_id=run_id, manifest_hash="sha256:m"))
        store.resume_run(run_id, owner="me", now=NOW, lease_seconds=600)
        store.save_checkpoint(numbered_checkpoint(run_id, 1), expected_attempt=1)


class Outcome:
    """What a write came to on its thread: its value or the exception it raised."""

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.returned = threading.Event()

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def queued(commits: GroupCommit) -> int:
    return len(commits._queue)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.001)


def wait_for_queue(commits: GroupCommit, length: int) -> None:
    wait_until(lambda: queued(commits) >= length, f"{length} writes queued")


def record_outcome(write: Callable[[], Any], outcome: Outcome) -> None:
    """Make `write`, keeping what it returned or raised in `outcome`."""
    try:
        outcome.value = write()
    except BaseException as error:  # every outcome is for the test to assert
        outcome.error = error
    outcome.returned.set()


@contextlib.contextmanager
def started(commits: GroupCommit, lock: threading.Lock,
            writes: Sequence[Callable[[], Any]]) -> Iterator[list[Outcome]]:
    """Start `writes` on threads of their own while `lock` (the store's connection
    lock) is held, each queued before the next starts, then let go: they all go into
    the next transaction. The block runs while they are made, with their outcomes,
    filled in as they return; the threads are joined on the way out."""
    outcomes = [Outcome() for _ in writes]
    threads = [threading.Thread(target=record_outcome, args=(write, outcome), daemon=True)
               for write, outcome in zip(writes, outcomes, strict=True)]
    try:
        with lock:
            before = queued(commits)
            for count, thread in enumerate(threads, start=1):
                thread.start()
                wait_for_queue(commits, before + count)
        yield outcomes
    finally:
        for thread in threads:
            thread.join(HANG)
            assert not thread.is_alive(), "a writer hung"


def together(store: SqliteRunStore, writes: Sequence[Callable[[], Any]]) -> list[Outcome]:
    """Make `writes` in one group commit of `store`; their outcomes once all returned."""
    with started(store._commits, store._lock, writes) as outcomes:
        pass
    return outcomes


# The RunStore methods that write: an AccompaniedStore makes each in company.
WRITES = frozenset({
    "create_run", "resume_run", "save_checkpoint", "save_checkpoint_settling",
    "renew_lease", "suspend_run", "complete_run", "fail_run", "cancel_run",
    "request_resume", "resolve_approval", "begin_effect", "complete_effect", "delete_run"})


class AccompaniedStore:
    """A SqliteRunStore each of whose writes shares its transaction with another
    write queued just before it (one that changes nothing), so every write is made
    in a savepoint, as a write with company is: the contract suite runs on the path
    concurrent writers take."""

    def __init__(self, store: SqliteRunStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name not in WRITES:
            return found

        def accompanied(*args: Any, **kwargs: Any) -> Any:
            companion = self._store._commits.write  # a write that changes nothing
            first, second = together(self._store, [lambda: companion(lambda conn: None),
                                                   lambda: found(*args, **kwargs)])
            first.result()
            return second.result()

        return accompanied

    def __enter__(self) -> AccompaniedStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._store.close()


@contextlib.contextmanager
def statements_of(store: SqliteRunStore) -> Iterator[list[str]]:
    """The statements the store's connection runs in the block (each once: SQLite
    traces a statement again for each trigger program it runs)."""
    statements: list[str] = []
    last = [""]

    def trace(statement: str) -> None:
        if statement != last[0] and not statement.startswith("--"):
            statements.append(statement)
        last[0] = statement

    store._conn.set_trace_callback(trace)
    try:
        yield statements
    finally:
        store._conn.set_trace_callback(None)
