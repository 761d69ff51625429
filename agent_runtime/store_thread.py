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
from other threads too: the other runtimes of a host, the HTTP API's routes.)
A call returns what the store returned and raises what it raised, the same
exception object (`StaleAttempt`, `RunTerminal`, `CheckpointConflict`, an I/O
error), so every caller handles the outcome exactly as before.

The thread exists while the runtime executes a run (`held`: a run, a resume,
an advance, the sub-runs inside them) and ends when the last one returns, so a
host that builds a runtime per run has one store thread per run executing,
never one per run it ever started.

A host that executes many runs at once (`serve`, with a runtime per run) gives
its runtimes one `StorePool` instead (`AgentRuntime(store_pool=...)`): a
fixed, small number of threads shared by all of them. Each runtime keeps its
own lane on the pool, so its calls still reach the store one at a time and in
order, while the calls of different runs are made side by side (a store that
shares one transaction between concurrent commits needs them to be), and a
thousand runs waiting on their models hold no thread at all.

A store that queues saves (`QueuesCheckpoints`: SQLite) spares the pool its
commits: a run's checkpoint save is queued from the loop and holds the run's
lane until the store tells the outcome (`save_checkpoint`), posted back to
the loop once per transaction for all the saves it held (`LoopPosts`). No
thread waits on a commit, so runs saving at once cost the kernel no sleep and
wake-up each, and their saves share the store's transactions.

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
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from agent_runtime.worker_threads import Job, LoopCall, LoopPosts, WorkerThreads

if TYPE_CHECKING:
    from stores.base import RunStore, Settlement, SettlesInCheckpoint
    from stores.records import Checkpoint

P = ParamSpec("P")
T = TypeVar("T")

THREAD_NAME = "agent-runtime-store"
POOL_THREAD_NAME = "agent-runtime-store-pool"


class StorePool:
    """`threads` threads that the store calls of many runtimes share (see the module doc).

    Lives as long as its host: `shutdown` when no runtime calls through it any more.
    """

    def __init__(self, threads: int, *, name: str = POOL_THREAD_NAME) -> None:
        if threads < 1:
            raise ValueError("a store pool needs 1 thread or more")
        self.threads = threads
        self._workers = WorkerThreads(threads, name=name)
        self._stopped = False
        self._posts_lock = threading.Lock()
        self._posts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPosts] = \
            weakref.WeakKeyDictionary()

    def submit(self, job: Job) -> None:
        if self._stopped:
            raise RuntimeError("the store pool was shut down")
        self._workers.submit(job)

    def shutdown(self, *, wait: bool = True) -> None:
        self._stopped = True
        self._workers.shutdown(wait=wait)

    def posts(self, loop: asyncio.AbstractEventLoop) -> LoopPosts:
        """The posts to `loop` of the saves its runs queue (one wake-up per transaction)."""
        with self._posts_lock:
            found = self._posts.get(loop)
            if found is None:
                found = self._posts[loop] = LoopPosts(loop)
            return found


class StoreThread:
    """Runs blocking store calls, one at a time and in order, off the event loop: on a
    thread of its own, or given a `pool`, in a lane of its own on the pool's threads."""

    def __init__(self, *, inline: bool = False, name: str = THREAD_NAME,
                 pool: StorePool | None = None) -> None:
        self.inline = inline  # call on the caller's thread: a store that never waits
        self._name = name
        self._lock = threading.Lock()  # runtimes may be shared by threads with loops of their own
        self._thread: WorkerThreads | None = None
        self._holders = 0
        self._pool = pool
        # With a pool: the calls waiting for their turn, and whether one is on the pool.
        self._lane: deque[LoopCall[Any]] = deque()
        self._lane_busy = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep the thread while the block runs (an execution); the last holder to leave
        ends it. Nested and concurrent holds share the one thread. (With a pool there is
        no thread of its own to keep.)"""
        if self._pool is not None:
            yield
            return
        with self._lock:
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                ending = self._thread if self._holders == 0 else None
                if ending is not None:
                    self._thread = None
            if ending is not None:
                # Every call holds the thread until its caller saw it end, so none
                # is queued or running: the idle thread ends at once, and is gone
                # when the last execution returns.
                ending.shutdown()

    @property
    def running(self) -> bool:
        """Whether the thread exists now, or with a pool whether a call is on it (for
        tests and diagnostics)."""
        if self._pool is not None:
            return self._lane_busy
        return self._thread is not None

    def _submit(self, handed: LoopCall[Any]) -> None:
        if self._pool is not None:
            self._submit_to_lane(self._pool, handed)
            return
        with self._lock:
            if self._thread is None:
                self._thread = WorkerThreads(1, name=self._name)
            self._thread.submit(handed.job)

    def _submit_to_lane(self, pool: StorePool, handed: LoopCall[Any]) -> None:
        with self._lock:
            self._lane.append(handed)
            if self._lane_busy:
                return  # the call on the pool takes this one after it
            self._lane_busy = True
        self._hand_to(pool)

    def _hand_to(self, pool: StorePool) -> None:
        try:
            pool.submit(functools.partial(self._next_in_lane, pool))
        except RuntimeError as stopped:  # the pool was shut down: no call will be made
            with self._lock:
                waiting, self._lane, self._lane_busy = list(self._lane), deque(), False
            for handed in waiting:
                handed.fail(stopped)

    def _next_in_lane(self, pool: StorePool) -> Callable[[], object]:
        """Make the lane's next call (on a pool thread), then hand the lane back to the
        pool: one call per turn, so a busy run does not keep a thread from the others."""
        with self._lock:
            handed = self._lane.popleft()
        return functools.partial(self._turn_ended, pool, handed.job())

    def _turn_ended(self, pool: StorePool, settle: Callable[[], object] | None) -> None:
        if settle is not None:
            settle()
        with self._lock:
            if not self._lane:
                self._lane_busy = False
                return
        self._hand_to(pool)

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
            handed = LoopCall(functools.partial(context.run, method, *args, **kwargs),
                              asyncio.get_running_loop())
            self._submit(handed)
            try:
                return await handed.answer
            except asyncio.CancelledError:
                if not handed.withdraw():  # it had started (or ended): see it end
                    await handed.outlast()
                raise

    async def save_checkpoint(self, store: RunStore, checkpoint: Checkpoint, *,
                              expected_attempt: int, lease_expires_at: datetime | None) -> None:
        """`store.save_checkpoint(...)`, as `call` makes it; with a pool and a store that
        queues saves (`QueuesCheckpoints`), queued from the loop instead, so that no
        thread waits for its commit."""
        queue = self._queue_of(store, "queue_checkpoint", "save_checkpoint")
        if queue is not None:
            await queue(checkpoint, expected_attempt=expected_attempt,
                        lease_expires_at=lease_expires_at)
            return
        await self.call(store.save_checkpoint, checkpoint, expected_attempt=expected_attempt,
                        lease_expires_at=lease_expires_at)

    async def save_checkpoint_settling(self, store: SettlesInCheckpoint, checkpoint: Checkpoint,
                                       settlements: Sequence[Settlement], *,
                                       expected_attempt: int, at: datetime,
                                       lease_expires_at: datetime | None,
                                       reservations: Sequence[str]) -> None:
        """`store.save_checkpoint_settling(...)`, queued as `save_checkpoint` is."""
        queue = self._queue_of(store, "queue_checkpoint_settling", "save_checkpoint_settling")
        if queue is not None:
            await queue(checkpoint, settlements, expected_attempt=expected_attempt, at=at,
                        lease_expires_at=lease_expires_at, reservations=reservations)
            return
        await self.call(store.save_checkpoint_settling, checkpoint, settlements,
                        expected_attempt=expected_attempt, at=at,
                        lease_expires_at=lease_expires_at, reservations=reservations)

    def _queue_of(self, store: object, queued: str, waiting: str
                  ) -> Callable[..., Awaitable[None]] | None:
        """The save queued with the store (`store.<queued>`), when the store queues the
        saves of its `<waiting>` method and the lane is idle: the save holds the lane
        until it is settled. None: make the call as any other (after those waiting)."""
        if self._pool is None or not _queues(type(store), queued, waiting):
            return None
        with self._lock:
            if self._lane_busy:
                return None  # calls wait in the lane: the save goes after them
            self._lane_busy = True
        return functools.partial(self._queue_save, self._pool, getattr(store, queued))

    async def _queue_save(self, pool: StorePool, queue: Callable[..., None], *args: Any,
                          **kwargs: Any) -> None:
        loop = asyncio.get_running_loop()
        handed = LoopCall.made_elsewhere(loop)
        posts = pool.posts(loop)

        def settled(error: BaseException | None) -> None:  # on the store's thread
            posts.post(functools.partial(self._queued_save_ended, pool, handed, error))

        try:
            queue(*args, settled=settled, **kwargs)
        except BaseException:
            self._turn_ended(pool, None)  # refused before it was queued
            raise
        try:
            await handed.answer
        except asyncio.CancelledError:
            await handed.outlast()  # queued, it cannot be taken back: see it end
            raise

    def _queued_save_ended(self, pool: StorePool, handed: LoopCall[None],
                           error: BaseException | None) -> None:
        self._turn_ended(pool, None)
        handed.arrive(None, error)


_QUEUES: dict[tuple[type, str], bool] = {}


def _queues(cls: type, queued: str, waiting: str) -> bool:
    """Whether `cls` queues the saves of the very `waiting` method it has (a subclass
    that changes that method alone, or a wrapper, does not: see `QueuesCheckpoints`)."""
    found = _QUEUES.get((cls, queued))
    if found is None:
        owner = next((klass for klass in cls.__mro__ if queued in vars(klass)), None)
        found = _QUEUES[cls, queued] = owner is not None and \
            vars(owner).get(waiting) is getattr(cls, waiting, None)
    return found


def queues_saves(store: object) -> bool:
    """Whether a runtime with a store pool queues `store`'s checkpoint saves."""
    return _queues(type(store), "queue_checkpoint", "save_checkpoint")


def store_thread_for(store: object, *, pool: StorePool | None = None) -> StoreThread:
    """The store thread of a runtime over `store`: inline when the store says its
    calls never wait on I/O (`waits_on_io = False`), else a thread of its own, or a
    lane on `pool` when the host shares one between its runtimes."""
    return StoreThread(inline=not getattr(store, "waits_on_io", True), pool=pool)


__all__ = ["POOL_THREAD_NAME", "THREAD_NAME", "StorePool", "StoreThread", "store_thread_for"]
