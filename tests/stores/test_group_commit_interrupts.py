"""GroupCommit on a bare SQLite table: what runs after a commit, and interrupts.

A leader or a waiting writer can be interrupted (KeyboardInterrupt reaches the
main thread); neither may lose or half-make another writer's write, and a
writer interrupted while its write is in a transaction learns nothing before
that transaction has committed. The interrupt here is a signal the test
handles itself (SIGUSR1 raising `Interrupted`), sent to the main thread while
it waits as a writer.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from stores.sqlite_group_commit import GroupCommit, Work
from tests.stores.sqlite_groups import HANG, queued, started, wait_for_queue, wait_until


class Interrupted(BaseException):
    """An interrupt, as KeyboardInterrupt is: not an Exception."""


class Bare:
    """A GroupCommit over a one-table database, and a second connection to read it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("CREATE TABLE t (n INTEGER)")
        self.lock = threading.Lock()
        self.commits = GroupCommit(self.conn, path, self.lock, contextlib.nullcontext)

    def rows(self) -> list[int]:
        """What is committed, as another connection sees it."""
        with contextlib.closing(sqlite3.connect(self.path)) as other:
            return sorted(row[0] for row in other.execute("SELECT n FROM t"))

    def write(self, work: Work[object]) -> Callable[[], object]:
        return lambda: self.commits.write(work)


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Bare]:
    made = Bare(tmp_path / "t.sqlite")
    yield made
    made.conn.close()


def insert(n: int, *, then: Callable[[], None] | None = None) -> Work[object]:
    def work(conn: sqlite3.Connection) -> object:
        conn.execute("INSERT INTO t (n) VALUES (?)", (n,))
        if then is not None:
            then()
        return n

    return work


def test_after_commit_actions_run_once_committed_and_only_for_writes_that_landed(
        bare: Bare) -> None:
    ran: list[int] = []
    at_commit: list[list[int]] = []
    bare.conn.set_trace_callback(
        lambda statement: at_commit.append(list(ran)) if statement == "COMMIT" else None)

    def refuse() -> None:
        raise ValueError("refused")

    writes = [insert(n, then=lambda n=n: bare.commits.after_commit(lambda: ran.append(n)))
              for n in (1, 2, 3)]
    writes[1] = insert(2, then=lambda: (bare.commits.after_commit(lambda: ran.append(2)),
                                        refuse()))
    outcomes = started(bare.commits, bare.lock, [bare.write(work) for work in writes])
    with outcomes as made:
        pass
    assert [outcome.value for outcome in made] == [1, None, 3]
    assert isinstance(made[1].error, ValueError)  # its own error, to its writer alone
    assert at_commit == [[]]  # nothing ran before the COMMIT
    assert ran == [1, 3]
    assert bare.rows() == [1, 3]


def test_a_leader_interrupted_before_its_commit_hands_on_the_writes_it_held(
        bare: Bare) -> None:
    def interrupt() -> None:
        raise Interrupted

    with started(bare.commits, bare.lock, [bare.write(insert(0, then=interrupt)),
                                           bare.write(insert(1)),
                                           bare.write(insert(2))]) as outcomes:
        pass
    assert isinstance(outcomes[0].error, Interrupted)
    assert [outcome.value for outcome in outcomes[1:]] == [1, 2]
    assert bare.rows() == [1, 2]
    assert queued(bare.commits) == 0 and not bare.commits._leading


@contextlib.contextmanager
def _interrupts_on_sigusr1() -> Iterator[Callable[[], None]]:
    """SIGUSR1 raises Interrupted in the main thread; yields what sends it there."""

    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main
    try:
        yield lambda: signal.pthread_kill(main, signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_writer_interrupted_while_queued_withdraws_its_write(bare: Bare) -> None:
    with _interrupts_on_sigusr1() as interrupt_main:
        bare.lock.acquire()  # no transaction begins until the writer is interrupted
        leader = threading.Thread(target=bare.write(insert(1)))
        leader.start()
        wait_for_queue(bare.commits, 1)

        def interrupt_once_queued() -> None:
            wait_for_queue(bare.commits, 2)
            interrupt_main()

        sender = threading.Thread(target=interrupt_once_queued)
        sender.start()
        try:
            with pytest.raises(Interrupted):
                bare.commits.write(insert(2))
            assert queued(bare.commits) == 1  # the leader's own write, only
        finally:
            bare.lock.release()
            sender.join(HANG)
            leader.join(HANG)
    assert bare.rows() == [1]
    assert not bare.commits._leading


def test_a_writer_interrupted_in_a_transaction_raises_only_once_it_committed(
        bare: Bare) -> None:
    committing, go_on = threading.Event(), threading.Event()

    def hold(statement: str) -> None:
        if statement == "COMMIT":
            committing.set()
            go_on.wait(HANG)

    bare.conn.set_trace_callback(hold)
    with _interrupts_on_sigusr1() as interrupt_main:
        bare.lock.acquire()
        leader = threading.Thread(target=bare.write(insert(1)))
        leader.start()
        wait_for_queue(bare.commits, 1)

        def interrupt_at_the_commit() -> None:
            wait_for_queue(bare.commits, 2)
            bare.lock.release()  # the leader takes both writes, and holds at COMMIT
            wait_until(committing.is_set, "the COMMIT")
            interrupt_main()
            # Whenever the main thread handles it, it must still be waiting.
            go_on.set()

        sender = threading.Thread(target=interrupt_at_the_commit)
        sender.start()
        try:
            with pytest.raises(Interrupted):
                bare.commits.write(insert(2))
            # Raised only once its write was committed, visible to others.
            assert bare.rows() == [1, 2]
        finally:
            go_on.set()
            sender.join(HANG)
            leader.join(HANG)
    assert not bare.commits._leading
