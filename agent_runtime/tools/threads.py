"""Where a synchronous tool runs: a worker thread, so the event loop goes on meanwhile.

A plain function tool may block (a network call, a file, a long computation);
on the event loop it would hold every coroutine there, the run's own lease
heartbeat included, and in `serve` every other run on that loop. So it runs
on a worker thread and the call awaits its end, as `asyncio.to_thread` would
do. A tool call is the engine's most frequent hand-off to a thread, and
`to_thread` pays for general machinery on each one (a `concurrent.futures`
future with its condition, a work item, two futures chained by callbacks)
while its worker holds the interpreter lock after waking the loop, which
must then wait for it: measured, a hand-off here costs about half the CPU
and under half the time.

The same behaviour as `to_thread` where a caller can see it: the function
runs in a copy of the caller's context (`contextvars`); it returns what it
returned and raises what it raised (a `BaseException` too); a call cancelled
before a worker took it never runs, and one cancelled while it runs goes on
to its end unseen (a thread cannot be stopped), as `to_thread`'s does.

An idle worker sleeps in a read of the pool's wake pipe, and a call wakes
one with a byte written there: a write lets go of the interpreter lock for
its system call, so the woken worker takes the lock and starts the call at
once, where a queue or lock released under the interpreter lock wakes a
worker only to have it wait for the caller to let go (measured here: a
quarter to a third of a bare round trip). A byte is written only for a
worker counted idle, so the pipe never holds more bytes than there are
workers and a write never waits for room; the calls themselves wait in a
queue, which a worker that ends a call empties before it sleeps again.

Workers are started as calls need them, up to `max_workers`, and kept for
the next calls. The pool is the process's, not an event loop's: one bound for
every loop of a `serve` process (at least 32, as many as asyncio gives one
loop on a host with 28 CPUs). At interpreter exit it waits for the calls
still running, as `asyncio.run` waits for its default executor's; a forked
child starts with no workers of its parent's.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

THREAD_NAME = "agent-runtime-tool"

# A call handed to a worker: the caller's future, its loop, and the call itself.
_Call = tuple["asyncio.Future[Any]", asyncio.AbstractEventLoop, Callable[[], Any]]


class ToolThreads:
    """Worker threads that run synchronous tool functions for coroutines."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or max(32, (os.cpu_count() or 1) + 4)
        self._reset()

    def _reset(self) -> None:
        self._calls: collections.deque[_Call | None] = collections.deque()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        # Every queued call is promised to one worker, which takes it: a worker
        # asleep on the pipe (woken by its byte), one started for it, or, when
        # the pool is full, the first worker to end its call (`_unpromised`).
        self._idle = 0  # workers asleep, or about to be, with no byte written for them
        self._unpromised = 0
        self._wake_read, self._wake_write = os.pipe()

    def _after_fork(self) -> None:
        """A forked child has none of its parent's workers: the pipe is theirs."""
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._reset()

    @property
    def workers(self) -> int:
        """How many worker threads exist now (for tests and diagnostics)."""
        return len(self._workers)

    async def call(self, function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`function(*args, **kwargs)` on a worker thread; its result, or what it raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()
        self._submit((future, loop, functools.partial(context.run, function, *args, **kwargs)))
        return await future

    def _submit(self, call: _Call) -> None:
        with self._lock:
            self._calls.append(call)
            wake = self._idle > 0
            if wake:
                self._idle -= 1  # the byte below is that worker's
            elif len(self._workers) < self.max_workers:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name=f"{THREAD_NAME}-{len(self._workers)}")
                self._workers.append(worker)
                worker.start()
            else:
                self._unpromised += 1
        if wake:
            os.write(self._wake_write, b"\0")

    def _take(self) -> _Call | None:
        with self._lock:
            return self._calls.popleft()

    def _work(self) -> None:
        call = self._take()  # the call this worker was started for
        while call is not None:
            future, loop, function = call
            del call
            outcome = _outcome(future, function)
            del function
            # Idle before the caller hears: its next call, made at once, finds this
            # worker rather than starting another.
            with self._lock:
                promised = self._unpromised > 0
                if promised:
                    self._unpromised -= 1
                else:
                    self._idle += 1
            if outcome is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits
                    loop.call_soon_threadsafe(_settle, future, *outcome)
            del future, loop, outcome  # hold nothing of a call while idle
            if not promised:
                os.read(self._wake_read, 1)
            call = self._take()

    def shutdown(self) -> None:
        """Let every worker finish its call and end; wait for them."""
        with self._lock:
            workers, self._workers = self._workers, []
            # An end for each worker, queued behind the calls still waiting: the
            # sleeping ones are woken for theirs, the others take theirs next.
            self._calls.extend(None for _ in workers)
            asleep, self._idle = self._idle, 0
            self._unpromised += len(workers) - asleep
        os.write(self._wake_write, b"\0" * asleep)
        for worker in workers:
            worker.join()


def _outcome(future: asyncio.Future[Any],
             function: Callable[[], Any]) -> tuple[Any, bool] | None:
    """(what the call returned or raised, whether it raised); None for a call
    cancelled before it started, which never runs."""
    if future.cancelled():
        return None
    try:
        return function(), False
    except BaseException as error:  # the caller's to see, whatever it is
        return error, True


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.done():  # cancelled while it ran
        return
    if failed:
        if isinstance(outcome, StopIteration):  # a future refuses it, as a coroutine does
            error = RuntimeError("the tool raised StopIteration")
            error.__cause__ = outcome
            outcome = error
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


TOOL_THREADS = ToolThreads()
atexit.register(TOOL_THREADS.shutdown)
os.register_at_fork(after_in_child=TOOL_THREADS._after_fork)

__all__ = ["THREAD_NAME", "TOOL_THREADS", "ToolThreads"]
