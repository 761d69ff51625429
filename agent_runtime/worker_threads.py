"""Worker threads that a coroutine hands blocking work to: the pool under tool and store calls.

The engine hands a synchronous tool call and, for a store that waits on I/O,
every store call to a thread, and awaits its end. Such a hand-off is on the
hot path of every iteration, so what one costs is mostly how fast a worker
wakes:

- An idle worker sleeps in a read of its own wake pipe, and a job wakes
  one with a byte written there. A write lets go of the interpreter lock for
  its system call, so the woken worker takes the lock and starts the job at
  once; a queue or lock released under the interpreter lock (as
  `ThreadPoolExecutor`'s) wakes a worker only to have it wait for the caller
  to let go. Measured here, a bare round trip through this pool costs about
  half what one through an executor and `asyncio.wrap_future` does.
- The worker woken is the one idle last (its memory still in the caches). A
  pool `on_caller_cpu` (the tool calls') pins it to its caller's CPU just
  before its byte is written, and it frees itself to every CPU as it starts
  the job (`stores.thread_placement`: on a virtual machine a short
  hand-off between two CPUs cost several times one on a single CPU).
- A byte is written only for a worker counted idle, so a pipe never holds
  more than one byte and a write never waits for room. The jobs themselves
  wait in a queue. Every queued job is promised to one worker, which takes
  it: a worker asleep on its pipe (woken by its byte), one started for it,
  or, when the pool is full, the first worker to end its job.
- A job returns what to do once its worker counts itself idle again
  (typically: hand the outcome to the caller), so a caller's next job, made
  as soon as it hears, finds that worker rather than starting another.

A coroutine's call goes to a worker as a `LoopCall`, whose outcome comes
back onto the caller's loop with one `call_soon_threadsafe`: no
`concurrent.futures` future under an `asyncio` one (measured, a store call's
round trip costs a fifth less CPU that way).

Workers are started as jobs need them, up to `max_workers`, and kept for the
next jobs; `shutdown` lets each end its job and stop, and the pool starts
workers again for later jobs. A forked child starts with none of its
parent's workers (`after_fork`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from stores.thread_placement import Placement, ours

T = TypeVar("T")

# A job runs on a worker and returns what to do once that worker is idle again.
Job = Callable[[], Callable[[], object] | None]


class _Worker:
    """A worker thread and the pipe it sleeps on while idle."""

    __slots__ = ("__weakref__", "closing", "thread", "wake_read", "wake_write")

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.wake_read, self.wake_write = os.pipe()
        # Closed once nothing can read or write it: when the worker is collected
        # (its thread, its pool and a caller about to wake it hold it), so a
        # pool per execution leaks no descriptors, and no write ever reaches a
        # descriptor reused since.
        self.closing = weakref.finalize(self, _close, self.wake_read, self.wake_write)
        # Not at interpreter exit: the pool's shutdown wakes its workers then.
        self.closing.atexit = False


class WorkerThreads:
    """Up to `max_workers` threads named `name-N`, running the jobs handed to them; with
    `on_caller_cpu`, each woken on its caller's CPU (see the module doc)."""

    def __init__(self, max_workers: int, *, name: str, on_caller_cpu: bool = False) -> None:
        if max_workers < 1:
            raise ValueError("a pool of worker threads needs 1 thread or more")
        self.max_workers = max_workers
        self._name = name
        self._placement = Placement(enabled=on_caller_cpu)
        self._reset()

    def _reset(self) -> None:
        self._jobs: collections.deque[Job | None] = collections.deque()  # None: a worker's end
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        # Workers asleep, or about to be, with no byte written for them: the last
        # to go idle last, to be woken first.
        self._idle: list[_Worker] = []
        self._unpromised = 0  # queued jobs for the first worker to end its own

    def after_fork(self) -> None:
        """In a forked child: none of the parent's workers is there, nor are their pipes."""
        for worker in self._workers:
            worker.closing()
        self._reset()

    @property
    def workers(self) -> int:
        """How many worker threads exist now (for tests and diagnostics)."""
        return len(self._workers)

    def submit(self, job: Job) -> None:
        """Run `job` on a worker: an idle one, a new one, or the first to be free."""
        woken: _Worker | None = None
        with self._lock:
            self._jobs.append(job)
            if self._idle:
                woken = self._idle.pop()  # the byte below is that worker's
            elif len(self._workers) < self.max_workers:
                worker = _Worker()
                worker.thread = threading.Thread(target=self._work, args=(worker,), daemon=True,
                                                 name=f"{self._name}-{len(self._workers)}")
                self._workers.append(worker)
                worker.thread.start()
            else:
                self._unpromised += 1
        if woken is not None:
            assert woken.thread is not None
            self._placement.pin(woken.thread.native_id, self._placement.caller_cpu())
            os.write(woken.wake_write, b"\0")

    def _take(self) -> Job | None:
        with self._lock:
            return self._jobs.popleft()

    def _work(self, worker: _Worker) -> None:
        allowed = self._placement.allowed()  # this thread's CPUs, before any pinning
        with ours():  # a store's group commit may place it too (`stores.thread_placement`)
            job = self._take()  # the job this worker was started for
            while job is not None:
                self._placement.free(allowed)
                then = job()
                del job  # hold nothing of a job while idle
                with self._lock:
                    promised = self._unpromised > 0
                    if promised:
                        self._unpromised -= 1
                    else:
                        self._idle.append(worker)
                if then is not None:
                    then()
                    del then
                if not promised:
                    os.read(worker.wake_read, 1)
                job = self._take()

    def shutdown(self, *, wait: bool = True) -> None:
        """Let every worker end the job it runs and the jobs queued, then stop; with
        `wait`, wait for them."""
        with self._lock:
            workers, self._workers = self._workers, []
            # An end for each worker, queued behind the jobs still waiting: the
            # sleeping ones are woken for theirs, the others take theirs next.
            self._jobs.extend(None for _ in workers)
            asleep, self._idle = self._idle, []
            self._unpromised += len(workers) - len(asleep)
        for worker in asleep:
            os.write(worker.wake_write, b"\0")
        for worker in workers if wait else ():
            if worker.thread is not None:
                worker.thread.join()


class LoopCall(Generic[T]):
    """A coroutine's call on a worker: from its hand-off to its outcome, which reaches
    the caller's event loop as the result or exception of `answer`.

    Handed back with `call_soon_threadsafe` straight onto a future of the loop
    (no `concurrent.futures` future, no chained callbacks): a hand-off is on the
    hot path of every tool call and every store call a run makes.

    `job` is the worker's part (a `Job`). A caller cancelled before a worker
    took the call `withdraw`s it, and it never runs; one cancelled after that
    decides whether to `outlast` it (see its end first) or let it end unseen.
    """

    __slots__ = ("_call", "_ended", "_lock", "_loop", "_started", "_withdrawn", "answer",
                 "over")

    def __init__(self, call: Callable[[], T], loop: asyncio.AbstractEventLoop) -> None:
        self._call: Callable[[], T] | None = call
        self._loop = loop
        self._lock = threading.Lock()  # between the worker's start and the caller's withdrawal
        self._started = False
        self._withdrawn = False
        self.answer: asyncio.Future[T] = loop.create_future()
        self.over = False  # on the loop: the outcome arrived
        self._ended: asyncio.Future[None] | None = None  # a cancelled caller awaits the end

    def job(self) -> Callable[[], object] | None:
        """The call, on a worker (unless withdrawn); then, once that worker is idle,
        what hands its outcome to the caller."""
        with self._lock:
            if self._withdrawn:
                return None
            self._started = True
        call, self._call = self._call, None
        assert call is not None
        try:
            outcome: tuple[Any, BaseException | None] = (call(), None)
        except BaseException as error:  # the caller's to see, whatever it is
            outcome = (None, error)
        return functools.partial(self._hand_back, outcome)

    @staticmethod
    def made_elsewhere(loop: asyncio.AbstractEventLoop) -> LoopCall[None]:
        """A call no worker makes (a save queued with its store), begun already: it
        cannot be withdrawn, and `arrive` brings its outcome."""
        call: LoopCall[None] = LoopCall(_made_elsewhere, loop)
        call._started = True
        call._call = None
        return call

    def fail(self, error: BaseException) -> None:
        """Fail a call no worker will take (its pool stopped), unless withdrawn."""
        with self._lock:
            if self._withdrawn:
                return
            self._started = True
        self._call = None
        self._hand_back((None, error))

    def withdraw(self) -> bool:
        """Whether the call was taken back before a worker started it (it never will)."""
        with self._lock:
            if not self._started:
                self._withdrawn = True
                self._call = None
            return self._withdrawn

    async def outlast(self) -> None:
        """Wait until a started call has ended, however often cancelled meanwhile; what
        it returned or raised goes to no one."""
        while not self.over:
            self._ended = self._loop.create_future()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ended

    def _hand_back(self, outcome: tuple[Any, BaseException | None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits
            self._loop.call_soon_threadsafe(self.arrive, *outcome)

    def arrive(self, value: Any, error: BaseException | None) -> None:
        """The call's outcome, on the loop: the caller's `answer` (unless cancelled)."""
        self.over = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        if self.answer.done():  # its caller was cancelled
            return
        if error is None:
            self.answer.set_result(value)
            return
        if isinstance(error, StopIteration):  # a future refuses it, as a coroutine does
            wrapped = RuntimeError("the call raised StopIteration")
            wrapped.__cause__ = error
            error = wrapped
        self.answer.set_exception(error)


def _made_elsewhere() -> None:
    raise AssertionError("a call made elsewhere is not a worker's to make")


class LoopPosts:
    """Actions posted to one event loop from other threads, run there in the order
    posted, with one `call_soon_threadsafe` for all those posted before the loop
    got to them: a store's committer settles the saves of many of a loop's runs
    with each transaction, and the loop is woken once for them all."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._actions: list[Callable[[], object]] = []

    def post(self, action: Callable[[], object]) -> None:
        """Run `action` on the loop soon (never, once the loop is closed)."""
        with self._lock:
            self._actions.append(action)
            if len(self._actions) > 1:
                return  # the loop is to run the actions posted before, and this one
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits
            self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        with self._lock:
            actions, self._actions = self._actions, []
        for action in actions:
            action()


def _close(*descriptors: int) -> None:
    for descriptor in descriptors:
        os.close(descriptor)


__all__ = ["Job", "LoopCall", "LoopPosts", "WorkerThreads"]
