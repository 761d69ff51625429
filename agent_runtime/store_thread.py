"""The thread a runtime's store calls run on, so that a slow store never holds the event loop.

Stores are synchronous (stores/base.py): a commit is an fsync or a DynamoDB
transaction, a lease renewal a conditional write. Made on the event loop's
thread, each one would stall every coroutine on the loop for as long as it
takes: the other members of a parallel wave, the model and tool calls in
flight, the heartbeats. The engine instead hands each store call it makes
from a coroutine to its runtime's store thread and awaits the result, so the
loop goes on while the store works.

One thread per runtime, taking the calls in the order they were made: a
run's commits reach the store in order, as they did on the loop thread, and a
store still sees one runtime's calls one at a time. (A store may be called
from other threads too: `serve` runs each run on a worker thread of its own.)
A call returns what the store returned and raises what it raised, the same
exception object (`StaleAttempt`, `RunTerminal`, `CheckpointConflict`, an I/O
error), so every caller handles the outcome exactly as before.

The thread exists while the runtime executes a run (`held`: a run, a resume,
an advance, the sub-runs inside them) and ends when the last one returns, so a
host that builds a runtime per run (`serve`) has one store thread per run
executing, never one per run it ever started.

A store whose calls never wait on I/O says so with a class attribute
`waits_on_io = False` (the memory store): its calls are made inline on the
loop thread, as before, since they hold the loop no longer than any other
Python code would (a thread would not run them in parallel under the GIL) and
a hop to the thread and back would cost more than the call. Any other store,
a third party's included, is called off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

THREAD_NAME = "agent-runtime-store"


class StoreThread:
    """Runs blocking store calls, one at a time and in order, off the event loop."""

    def __init__(self, *, inline: bool = False, name: str = THREAD_NAME) -> None:
        self.inline = inline  # call on the caller's thread: a store that never waits
        self._name = name
        self._lock = threading.Lock()  # runtimes may be shared by threads with loops of their own
        self._executor: ThreadPoolExecutor | None = None
        self._holders = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep the thread while the block runs (an execution); the last holder to leave
        ends it. Nested and concurrent holds share the one thread."""
        with self._lock:
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                ending = self._executor if self._holders == 0 else None
                if ending is not None:
                    self._executor = None
            if ending is not None:
                # Every call holds the thread until its caller saw it end, so none
                # is queued or running: the idle thread ends at once, and is gone
                # when the last execution returns.
                ending.shutdown(wait=True)

    @property
    def running(self) -> bool:
        """Whether the thread exists now (for tests and diagnostics)."""
        return self._executor is not None

    def _submit(self, call: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix=self._name)
            return self._executor.submit(call)

    async def call(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`method(*args, **kwargs)` on the store thread; its result, or what it raised.

        Cancelled before the thread took it, the call never runs. Cancelled
        while it runs, it cannot be taken back: the caller waits for its end
        before the cancellation goes on, as it would have for a call on the
        loop thread, so whatever the caller does next follows it.
        """
        if self.inline:
            return method(*args, **kwargs)
        with self.held():
            # In the caller's context, as on the loop thread (the host's input limits).
            context = contextvars.copy_context()
            submitted = self._submit(functools.partial(context.run, method, *args, **kwargs))
            try:
                return await asyncio.wrap_future(submitted)
            except asyncio.CancelledError:
                if not submitted.cancel():  # it had started (or ended): see it end
                    await _outlast(submitted)
                raise


def store_thread_for(store: object) -> StoreThread:
    """The store thread of a runtime over `store`: inline when the store says its
    calls never wait on I/O (`waits_on_io = False`), else a thread of its own."""
    return StoreThread(inline=not getattr(store, "waits_on_io", True))


async def _outlast(submitted: Future[T]) -> None:
    """Wait until a store call that started has ended, however often cancelled
    meanwhile; what it returned or raised goes to no one (its caller was cancelled)."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    def wake(_: Future[T]) -> None:
        loop.call_soon_threadsafe(end)

    submitted.add_done_callback(wake)
    while not ended.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(ended)


__all__ = ["THREAD_NAME", "StoreThread", "store_thread_for"]
