"""The event loops `agent-runtime serve` executes runs on (`serve --workers`), one thread each.

A run waiting on a model or a tool is a coroutine suspended on its loop, so
one loop keeps thousands of runs waiting at once; what a run does between its
waits is Python under the GIL, which more threads would not run any faster.
One loop is the default. A second one helps only when something blocks a loop
for a while (a driver or hook that does blocking I/O on it): the runs of the
other loop go on meanwhile. Store calls never block a loop (they go to the
store pool: `agent_runtime.store_thread`), nor do synchronous tools (each
loop's default executor runs them).

A run goes to the loop with the fewest runs at the time. Its task starts in a
copy of the context the loops were made in (the command's: its input limits),
not the context of the thread that hands it over: a request's context holds
that request (the web framework's event and body, the place it was admitted
to), which a run waiting on its model for minutes would keep alive (with 1,000
runs waiting in `serve`, about 18 objects of each run's 420, walked again by
every full collection of the cycle collector).

The loops are uvloop's when it is installed (the `serve` extra installs it
where it builds, as uvicorn then picks it for the server's own loop), else
asyncio's: with runs waiting on a model answering in 1 s, `serve` completed
about a fifth more runs per second on uvloop (bench/serve_concurrency.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

THREAD_NAME = "agent-runtime-runs"


class RunLoops:
    """`count` event loops, each running on a daemon thread of its own until `stop`."""

    def __init__(self, count: int, *, name: str = THREAD_NAME) -> None:
        if count < 1:
            raise ValueError("a server needs 1 event loop or more")
        self._lock = threading.Lock()
        self._context = contextvars.copy_context()
        self._loops = [new_event_loop() for _ in range(count)]
        self._load = [0] * count
        self._threads = [threading.Thread(target=_run_forever, args=(loop,),
                                          name=f"{name}-{index}", daemon=True)
                         for index, loop in enumerate(self._loops)]
        for thread in self._threads:
            thread.start()

    @property
    def count(self) -> int:
        return len(self._loops)

    def submit(self, coroutine: Coroutine[Any, Any, None]) -> Future[None]:
        """Run `coroutine` as a task on the least busy loop, in a copy of the context the
        loops were made in; the future ends with it."""
        with self._lock:
            index = min(range(len(self._loops)), key=self._load.__getitem__)
            self._load[index] += 1
        # The loop's callback, and the task it makes, copy the context current
        # here: this copy of the loops' own, never the caller's.
        future = self._context.copy().run(asyncio.run_coroutine_threadsafe, coroutine,
                                          self._loops[index])

        def ended(_: Future[None]) -> None:
            with self._lock:
                self._load[index] -= 1

        future.add_done_callback(ended)
        return future

    def stop(self, timeout: float | None = None) -> None:
        """Stop every loop (tasks still on one are cancelled) and wait up to `timeout`
        seconds for each thread to end."""
        for loop in self._loops:
            if not loop.is_closed():
                loop.call_soon_threadsafe(loop.stop)
        for thread in self._threads:
            thread.join(timeout)


def loop_kind() -> str:
    """Which event loops this process makes: `uvloop` when it is installed, else `asyncio`."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of `loop_kind()`."""
    if loop_kind() == "uvloop":
        import uvloop  # noqa: PLC0415 - optional: the serve extra installs it where it builds

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


__all__ = ["THREAD_NAME", "RunLoops", "loop_kind", "new_event_loop"]
