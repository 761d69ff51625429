"""Where a thread of ours is woken: on the CPU of the thread that wakes it.

Linux wakes a sleeping thread on an idle CPU when there is one, so on a
machine with a CPU to spare a hand-off from one thread to another and back
crossed CPUs twice; on a virtual machine an idle CPU is halted, and waking
one costs tens of microseconds each way. Two hand-offs are placed:

- A coroutine's synchronous tool call goes to a worker thread and comes back
  (`agent_runtime.tools.threads`, `agent_runtime.worker_threads`). The tool
  pool's worker is pinned to its caller's CPU just before it is woken
  (`pin`), runs there as soon as the caller waits, and frees itself to every
  CPU it may use as it starts the job (`free`): a long tool (one that
  computes outside the interpreter lock) can still be moved by the kernel to
  a CPU of its own, and several such tools spread. Measured on a two-CPU VM
  (bench/engine_overhead.py, `engine`, N=1,000): a tool iteration took 597 us
  with the worker free to run anywhere and 425 us with it woken on its
  caller's CPU; a bare round trip through the pool, 86 against 16 us.
- A SQLite group commit's leader wakes the writers whose writes it committed
  (`stores.sqlite_group_commit`). A writer that is one of our worker threads
  (`serve`'s store pool) is woken on the leader's CPU and stays there until a
  later leader wakes it (`pin_ours`): its next step is to hand the outcome to
  its run's event loop and take the next call. Measured with `serve` (bench/
  serve_concurrency.py, one process, not pinned): 75 runs/s before, 82 after;
  freeing the writer as it woke gained nothing.

Only threads of ours are pinned (`ours`: the pools' workers mark themselves,
and `serve`'s request threads, which create runs, are `adopt`ed): never a
host's thread nor the process (`serve --pin-cpus` pins a whole process).
The store threads that serve one runtime's calls are not placed at their
hand-off: measured, it made the `sqlite` subject no faster and the
`sqlite_normal` one about 15% slower (a store call is hundreds of
microseconds of work, not a quick function).

Linux only (`sched_getcpu`, `sched_setaffinity`); elsewhere, or once the
kernel refuses, nothing is pinned and a hand-off costs what it did. It lives
in `stores/`, the lowest layer, because both the engine's pools and a
store's group commit use it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator


@functools.cache
def _cpu_reader() -> Callable[[], int] | None:
    """`sched_getcpu` from the C library, when this platform has it (looked up on
    first use: ctypes is not worth its import to a process that never hands off)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "sched_setaffinity"):
        return None
    import ctypes  # noqa: PLC0415

    try:
        reader = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    reader.restype = ctypes.c_int
    reader.argtypes = []
    return reader


# The threads that may be placed: our pools' workers. Threads, not their native
# ids, which the system gives again to later threads.
_OURS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


@contextlib.contextmanager
def ours() -> Iterator[None]:
    """Mark the calling thread as one of ours (a pool's worker) while the block runs."""
    thread = threading.current_thread()
    _OURS.add(thread)
    try:
        yield
    finally:
        _OURS.discard(thread)


def adopt() -> None:
    """Mark the calling thread as one of ours for its life (an executor's initializer:
    `serve`'s request threads)."""
    _OURS.add(threading.current_thread())


class Placement:
    """Pins workers to their caller's CPU at wake-up, and frees them to work; does
    nothing unless `enabled` (and on this platform, able)."""

    def __init__(self, *, enabled: bool = True) -> None:
        self._enabled = enabled
        self._refused = False  # the kernel refused a pinning: place nothing more

    @property
    def active(self) -> bool:
        return self._enabled and not self._refused and _cpu_reader() is not None

    def caller_cpu(self) -> int | None:
        """The CPU the calling thread runs on now; None when unknown or not placing."""
        reader = _cpu_reader() if self._enabled and not self._refused else None
        if reader is None:
            return None
        cpu = reader()
        return cpu if cpu >= 0 else None

    def pin(self, thread_id: int | None, cpu: int | None) -> None:
        """Keep the thread `thread_id` (a native id) on `cpu` until it frees itself."""
        if thread_id is None or cpu is None:
            return
        try:
            os.sched_setaffinity(thread_id, {cpu})
        except OSError:  # a CPU the thread may not use (a cpuset changed): no pinning
            self._refused = True

    def pin_ours(self, thread: threading.Thread) -> None:
        """`pin` `thread` to the calling thread's CPU when it is one of ours; leave any
        other alone (without so much as reading the CPU: every group commit wakes)."""
        if thread in _OURS:
            self.pin(thread.native_id, self.caller_cpu())

    def free(self, allowed: set[int] | None) -> None:
        """Let the calling thread run on every CPU in `allowed` again (its own set)."""
        if allowed is None:
            return
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            self._refused = True

    def allowed(self) -> set[int] | None:
        """The CPUs the calling thread may run on, for `free`; None when not placing."""
        if not self.active:
            return None
        try:
            return os.sched_getaffinity(0)
        except OSError:
            return None


__all__ = ["Placement", "adopt", "ours"]
