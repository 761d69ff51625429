"""The heartbeat that keeps an attempt's lease while its model and tool calls are in flight.

Each commit point renews the lease in the same write (`Execution.checkpoint`),
so a run that commits often needs nothing else. A call that takes longer
than a third of the lease would let it expire under a live owner, and
another would take the run over: while calls are in flight, the heartbeat
renews it whenever a third of the lease passed without a renewal.

A timer starts the heartbeat, not a task per call: most calls end long
before the first beat. One timer for the execution's calls: armed by a call
when none is, it starts the heartbeat if calls are still in flight when it
fires; the last call to end stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stores.base import RunTerminal, StaleAttempt, StoreError

T = TypeVar("T")


class LeaseHeartbeat:
    """Renews a lease every `interval` seconds it was not renewed otherwise, while calls
    guarded by it are in flight. `lost` holds the refusal that ended the attempt's
    ownership (another owner's attempt, or the run ended meanwhile): the next
    commit point stops the attempt with it."""

    def __init__(self, renew: Callable[[], Awaitable[None]], *, interval: float,
                 on_beat: Callable[[], object]) -> None:
        self._renew = renew
        self._on_beat = on_beat
        self.interval = interval
        self.last_renewal = time.monotonic()
        self.lost: StoreError | None = None
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def renewed(self) -> float:
        """Note a renewal made otherwise (a commit point's); its monotonic time."""
        self.last_renewal = time.monotonic()
        return self.last_renewal

    async def guarded(self, call: Awaitable[T]) -> T:
        """Await `call` while the heartbeat keeps the lease alive."""
        self._in_flight += 1
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._due)
        try:
            return await call
        finally:
            self._in_flight -= 1
            beating = self._task
            if self._in_flight == 0 and beating is not None:
                self._task = None
                beating.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beating

    def stop(self) -> None:
        """Disarm the timer (the execution ended: no call is in flight any more)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        if self._in_flight and self._task is None:
            self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            if time.monotonic() - self.last_renewal >= self.interval:
                try:
                    await self._renew()
                except (StaleAttempt, RunTerminal) as error:
                    self.lost = error
                    return
                self.renewed()
                self._on_beat()
            # Until the renewal is due: a commit point may have renewed it meanwhile.
            await asyncio.sleep(max(self.last_renewal + self.interval - time.monotonic(), 0.0))
