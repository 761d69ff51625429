"""Group commit: concurrent writes to one SQLite store share a transaction and its fsync.

At synchronous=FULL a commit waits for an fsync of the WAL, and a store has
one connection, so writers on many threads (serve's runs) would each wait for
the connection and then for a flush of their own. Instead, the writes that
arrive while a transaction is being made queue up, and the next transaction
takes all of them:

- The first writer to find no transaction under way leads. It takes the
  store's lock and its turn among processes (`sqlite_turns`), then every write
  queued by then, its own included, and makes one transaction of them:
  `BEGIN IMMEDIATE`, each write in a SAVEPOINT of its own (a write made in
  one statement needs none: a statement is atomic), one COMMIT. Writes that
  arrive meanwhile wait for the next transaction. Nobody waits for company: a
  writer alone makes the very transaction it made before group commit (no
  savepoint; a save SQLite commits in one statement stays one).
- A write refused (a stale attempt, a held lease, any rule of the contract, a
  constraint, any exception) rolls back its own savepoint and nothing else,
  and its error goes to its writer alone. Each write is decided on the
  database as the writes before it in the transaction left it, exactly as if
  they had committed one by one, so fencing is what it was.
- A writer returns, or raises, only once the transaction that held its write
  has committed; a refusal too, since what it was decided on might otherwise
  never be committed. A transaction that fails (BEGIN, a savepoint, COMMIT, or
  a statement that rolls the whole transaction back, as SQLITE_FULL may) fails
  every write in it with that error, each writer getting an error of its own
  that names the file, and none of their writes is visible.
- After its commit the leader wakes its writers and hands the lead to the
  first write queued since. A writer that is one of our pools' threads
  (`serve`'s store pool) is woken on the leader's CPU
  (`stores.thread_placement`): measured, `serve` completed a tenth more runs
  per second on a two-CPU VM. A leader interrupted before its commit
  (KeyboardInterrupt) rolls back and puts the other writes it held back at the
  front of the queue, unharmed; a writer interrupted while it waits withdraws
  its write if no leader holds it yet, else waits for its outcome first.

A write can also be queued without its writer waiting (`submit`: a run's
checkpoint saved from `serve`'s event loop). It joins the queue as any other;
when it is to lead, the store's committer thread leads for it, and whoever
made the transaction that held it tells its writer the outcome (a callback,
which posts it to the writer's loop) once that transaction ended. Nobody
sleeps and wakes for such a write, so 100 runs saving from one loop cost no
context switch apiece. `close` lets the committer make the writes queued by
then, and ends it.

Only the store's own code runs in a group: a write is a function of the
connection that the leader's thread calls, never a caller's code (a queued
write's callback only hands its outcome on).
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from stores.base import SaveSettled, StoreError, StoreUnavailable
from stores.sqlite_schema import begin, roll_back, translation
from stores.thread_placement import Placement, ours

T = TypeVar("T")
# A write: made on the connection inside a transaction it must not end.
Work = Callable[[sqlite3.Connection], T]
# What a write came to: its result, or the error its writer is to raise.
_Outcome = tuple[Any, BaseException | None]
_SAVEPOINT = "group_member"
_PLACEMENT = Placement()
COMMITTER_THREAD_NAME = "agent-runtime-sqlite-committer"
logger = logging.getLogger(__name__)


class _Write(Generic[T]):
    """One writer's write, from its queueing to its outcome: a writer's thread waits
    for it, or, queued (`settled` given), nobody waits and `settled` is told its error."""

    __slots__ = ("_woken", "done", "error", "leads", "settled", "statement", "taken", "thread",
                 "value", "work")

    def __init__(self, work: Work[T], statement: Work[T | None] | None,
                 settled: SaveSettled | None = None) -> None:
        self.work = work
        self.statement = statement
        self.settled = settled
        self.leads = False  # its writer leads (or is to lead) a transaction
        self.taken = False  # a leader took it from the queue into its transaction
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        if settled is not None:
            return  # nobody waits on a queued write
        # Held until the writer is to wake: its outcome is in, or it is to lead.
        self._woken = threading.Lock()
        self._woken.acquire()
        self.thread = threading.current_thread()  # its writer's

    def settle(self, outcome: _Outcome) -> None:
        self.value, self.error = outcome
        self.done = True

    def wait(self) -> None:
        self._woken.acquire()

    def wake(self) -> None:
        """Wake its writer: settled, or told to lead (a queued write's lead goes to the
        committer: `GroupCommit._hand_lead`)."""
        if self.settled is not None:
            settled, self.settled = self.settled, None
            error, self.error = self.error, None
            try:
                settled(error)
            except Exception:  # the committer goes on: other writes are its to settle
                logger.exception("telling a queued write's writer its outcome failed")
            return
        # A writer that is a pool's thread wakes on its waker's CPU (see the module doc).
        _PLACEMENT.pin_ours(self.thread)
        self._woken.release()

    def outcome(self) -> T:
        error, self.error = self.error, None  # no cycle through the traceback
        if error is not None:
            raise error
        return cast(T, self.value)


class GroupCommit:
    """The write transactions of one store's connection (see the module doc).

    `lock` guards the connection (the store's reads take it too); `turn` is
    the store's turn among the writers of its file, held for each
    transaction. With `enabled=False` every write makes a transaction of its
    own, as before group commit (for benchmarks and tests to compare with).
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, lock: threading.Lock,
                 turn: Callable[[], AbstractContextManager[None]], *,
                 enabled: bool = True) -> None:
        self._conn = conn
        self._path = path
        self._lock = lock
        self._turn = turn
        self._enabled = enabled
        self._queued = threading.Lock()  # guards _queue and _leading
        self._queue: list[_Write[Any]] = []
        self._leading = False  # a writer leads: the next transaction has a maker
        # Actions of the writes made so far in the open transaction, to run
        # once it commits (a savepoint rolled back drops its write's).
        self._after_commit: list[Callable[[], None]] = []
        self.transactions = 0  # transactions committed, for benchmarks and tests
        # The thread that leads for queued writes (`submit`), started by the first.
        self._committer: threading.Thread | None = None
        self._leads: queue.SimpleQueue[_Write[Any] | None] = queue.SimpleQueue()
        self._closed = False  # guarded by _queued

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run `action` once the write being made now has committed; never if it does not."""
        self._after_commit.append(action)

    def write(self, work: Work[T], *, statement: Work[T | None] | None = None) -> T:
        """The write's result once the transaction it was made in has committed; its
        refusal, or the transaction's failure, raised.

        `work(conn)` makes the write inside an open transaction (it must not
        end it). `statement(conn)`, when given, is tried first: the write as a
        single statement, which changes nothing unless it succeeds (so it needs
        no savepoint, and alone no transaction: SQLite commits it by itself).
        Its result, or None when it did not apply and `work` is to make the
        write.
        """
        write = _Write(work, statement)
        if not self._enabled:
            with self._lock, self._turn():
                self._make([write])
            return write.outcome()
        try:
            with self._queued:
                self._queue.append(write)
                write.leads = not self._leading
                self._leading = True
            if not write.leads:
                write.wait()  # until settled, or told to lead
            if not write.done:
                self._lead(write)
        except BaseException:
            self._withdraw(write)
            raise
        return write.outcome()

    def submit(self, work: Work[Any], settled: SaveSettled, *,
               statement: Work[Any] | None = None) -> None:
        """Queue the write and return at once: `settled(error)` is called, by the thread
        that made the transaction holding the write (the committer, or a writer that
        led it), once that transaction has ended: None when it committed, else what
        `write` would have raised. (Its result goes to no one.)

        For a caller that must not block (an event loop): the write is queued
        for the next transaction as any other, and when no transaction is
        being made, the committer makes one. `settled` must be quick and must
        not call the store: the next transaction waits for it.
        """
        write = _Write(work, statement, settled)
        with self._queued:
            if self._closed:
                raise StoreUnavailable(f"{self._path}: the store is closed")
            if not self._enabled:  # a transaction of its own, on the committer
                write.leads = True
            else:
                self._queue.append(write)
                write.leads = not self._leading
                self._leading = True
            if write.leads:
                self._hand_lead(write)

    def close(self) -> None:
        """Let the committer make the transactions queued so far, then end it; any
        later `submit` raises `StoreUnavailable`."""
        with self._queued:
            self._closed = True
            committer = self._committer
            if committer is not None:
                self._leads.put(None)
        if committer is not None and committer is not threading.current_thread():
            committer.join()

    def _hand_lead(self, write: _Write[Any]) -> None:
        """Tell `write`'s writer to lead: its own thread, or the committer for a queued
        write. Under `_queued`."""
        if write.settled is None:
            write.wake()
            return
        if self._committer is None:
            self._committer = threading.Thread(target=self._commit_queued,
                                               name=COMMITTER_THREAD_NAME, daemon=True)
            self._committer.start()
        self._leads.put(write)

    def _commit_queued(self) -> None:
        """The committer: lead a transaction for each queued write handed to it."""
        with ours():  # it wakes writers on its CPU, and a pool's are woken on it
            while True:
                write = self._leads.get()
                if write is None:  # closed: end, unless a lead was handed since
                    with self._queued:
                        if self._leads.empty():
                            self._committer = None  # a later lead starts another
                            return
                        self._leads.put(None)
                    continue
                try:
                    if self._enabled:
                        self._lead(write)
                    else:
                        with self._lock, self._turn():
                            self._make([write])
                except Exception as error:  # BEGIN's turn refused: `_lead` gave up the lead
                    if not write.done:
                        write.settle((None, self._failure(error)))
                if write.done:
                    write.wake()

    # -- the queue -----------------------------------------------------------

    def _withdraw(self, write: _Write[Any]) -> None:
        """Take an interrupted writer's write back (KeyboardInterrupt, or a failure
        of its own lead, which `_lead` has cleaned up after).

        Still queued, it is withdrawn, handing on the lead it may have been
        given. Taken by another writer's lead, it is in a transaction that may
        yet commit, so its writer learns nothing until that transaction ended.
        """
        while True:
            successor = None
            with self._queued:
                queued = write in self._queue
                if queued:
                    self._queue.remove(write)
                    if write.leads:
                        successor = self._next_leader()
                in_flight = not queued and write.taken and not write.leads and not write.done
                if successor is not None:
                    self._hand_lead(successor)
            if not in_flight:
                return
            write.wait()  # woken once settled (or, put back in the queue, told to lead)

    def _next_leader(self) -> _Write[Any] | None:
        """The first queued write, told to lead (None: no one is waiting). Under `_queued`."""
        if not self._queue:
            self._leading = False
            return None
        self._queue[0].leads = True
        return self._queue[0]

    def _lead(self, leader: _Write[Any]) -> None:
        group: list[_Write[Any]] = []
        try:
            with self._lock, self._turn():
                with self._queued:
                    group, self._queue = self._queue, []
                    for write in group:
                        write.taken = True
                self._make(group)
        finally:
            followers = [write for write in group if write is not leader]
            with self._queued:
                if not group:  # failed before taking the queue: its own write is still in it
                    self._queue.remove(leader)
                # Interrupted before the commit: the writes it held go first next time.
                held = [write for write in followers if not write.done]
                for write in held:
                    write.taken = False
                self._queue[:0] = held
                successor = self._next_leader()
                if successor is not None:
                    self._hand_lead(successor)
            for write in followers:
                if write.done:
                    write.wake()

    # -- the transaction -----------------------------------------------------

    def _make(self, group: list[_Write[Any]]) -> None:
        """Make `group`'s transaction and settle every write in it (an interrupt, which
        is raised, settles them only if they committed)."""
        conn = self._conn
        outcomes: list[_Outcome] = []
        committing = False
        try:
            if len(group) == 1 and group[0].statement is not None:
                # Alone, a single statement needs no transaction around it.
                if conn.in_transaction:  # left open by a rollback that failed
                    roll_back(conn)
                outcome = self._statement(group[0])
                if outcome is not None:
                    if outcome[1] is None:
                        self.transactions += 1
                    self._settle(group, [outcome])
                    return
                group[0].statement = None  # tried: `work` makes it
            begin(conn, write=True)
            shared = len(group) > 1
            outcomes = [self._member(write, shared=shared) for write in group]
            if not shared and outcomes[0][1] is not None:
                self._settle(group, outcomes)  # a write alone, refused: rolled back
                return
            # (Should a write have ended the transaction unseen, COMMIT fails.)
            committing = True
            conn.execute("COMMIT")
        except Exception as error:
            self._abandon()
            for write in group:
                write.settle((None, self._failure(error)))
            return
        except BaseException:
            # An interrupt of the leader's thread: the writes landed only if it
            # came once COMMIT had returned.
            if not committing or conn.in_transaction:
                self._abandon()
                raise
            self.transactions += 1
            self._settle(group, outcomes)
            raise
        self.transactions += 1
        self._settle(group, outcomes)

    def _statement(self, write: _Write[Any]) -> _Outcome | None:
        """Try the write as its single statement: its outcome, or None when it did not
        apply (and changed nothing)."""
        assert write.statement is not None
        mark = len(self._after_commit)
        try:
            value = write.statement(self._conn)
        except Exception as error:
            del self._after_commit[mark:]
            return None, translation(self._path, error) or error
        if value is None:
            del self._after_commit[mark:]
            return None
        return value, None

    def _member(self, write: _Write[Any], *, shared: bool) -> _Outcome:
        """Make one write of the open transaction, in a savepoint when it has company
        and more than one statement."""
        conn = self._conn
        if write.statement is not None:
            outcome = self._statement(write)
            if outcome is not None:
                if outcome[1] is not None and not conn.in_transaction:
                    raise outcome[1]  # it ended the transaction: the others' writes too
                return outcome
        mark = len(self._after_commit)
        if shared:
            conn.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            value = write.work(conn)
        except Exception as error:
            if shared and not conn.in_transaction:
                raise  # SQLite rolled the whole transaction back: the others' writes too
            del self._after_commit[mark:]
            if shared:
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
                conn.execute(f"RELEASE {_SAVEPOINT}")
            else:
                roll_back(conn)
            return None, translation(self._path, error) or error
        if shared:
            conn.execute(f"RELEASE {_SAVEPOINT}")
        return value, None

    def _settle(self, group: list[_Write[Any]], outcomes: list[_Outcome]) -> None:
        actions, self._after_commit = self._after_commit, []
        for action in actions:
            action()
        for write, outcome in zip(group, outcomes, strict=True):
            write.settle(outcome)

    def _abandon(self) -> None:
        self._after_commit.clear()
        roll_back(self._conn)

    def _failure(self, error: Exception) -> StoreError:
        """A writer's own error for the failure of its transaction (each writer raises
        its own: one exception raised on many threads would collect all their
        tracebacks)."""
        failure = translation(self._path, error)
        if failure is None:
            failure = type(error)(*error.args) if isinstance(error, StoreError) else \
                StoreUnavailable(f"{self._path}: the transaction holding this write "
                                 f"failed ({type(error).__name__})")
            failure.__cause__ = error
        return failure
