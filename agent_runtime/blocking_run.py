"""`asyncio.run` for callers without an event loop, with Ctrl-C always a KeyboardInterrupt.

`asyncio.run` turns a SIGINT into a cancelled main task and that, when the task
ends cancelled, back into KeyboardInterrupt. A SIGINT that lands while it is
installing its handler is counted and then forgotten (CPython resets the count
after installing the handler), so the caller gets the bare CancelledError
instead: a traceback and exit 1 where Ctrl-C was meant. Nothing else cancels
the main task of a blocking call, so its cancellation is that interrupt.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def run_blocking(call: Coroutine[object, None, T]) -> T:
    """`call` to its end in a new event loop; KeyboardInterrupt if interrupted."""
    try:
        return asyncio.run(call)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def blocking(method: Callable[P, Coroutine[object, None, T]]) -> Callable[P, T]:
    """An async method for callers without an event loop: runs it in a new one."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_blocking(method(*args, **kwargs))

    return call


__all__ = ["blocking", "run_blocking"]
