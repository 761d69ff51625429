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

The workers are an `agent_runtime.worker_threads` pool (woken through a
pipe, on the caller's CPU: `stores.thread_placement`): started as
calls need them, up to `max_workers`, and kept for the next calls. The pool
is the process's, not an event loop's: one bound for every loop of a `serve`
process (at least 32, as many as asyncio gives one
loop on a host with 28 CPUs). At interpreter exit it waits for the calls
still running, as `asyncio.run` waits for its default executor's; a forked
child starts with no workers of its parent's.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from agent_runtime.worker_threads import LoopCall, WorkerThreads

P = ParamSpec("P")
T = TypeVar("T")

THREAD_NAME = "agent-runtime-tool"


class ToolThreads:
    """Worker threads that run synchronous tool functions for coroutines."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or max(32, (os.cpu_count() or 1) + 4)
        self._pool = WorkerThreads(self.max_workers, name=THREAD_NAME, on_caller_cpu=True)

    @property
    def workers(self) -> int:
        """How many worker threads exist now (for tests and diagnostics)."""
        return self._pool.workers

    async def call(self, function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`function(*args, **kwargs)` on a worker thread; its result, or what it raised."""
        context = contextvars.copy_context()
        handed = LoopCall(functools.partial(context.run, function, *args, **kwargs),
                          asyncio.get_running_loop())
        self._pool.submit(handed.job)
        try:
            return await handed.answer
        except asyncio.CancelledError:
            handed.withdraw()  # not started: it never runs; else it ends unseen
            raise

    def shutdown(self) -> None:
        """Let every worker finish its call and end; wait for them."""
        self._pool.shutdown()

    def after_fork(self) -> None:
        self._pool.after_fork()


TOOL_THREADS = ToolThreads()
atexit.register(TOOL_THREADS.shutdown)
os.register_at_fork(after_in_child=TOOL_THREADS.after_fork)

__all__ = ["THREAD_NAME", "TOOL_THREADS", "ToolThreads"]
