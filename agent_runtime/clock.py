"""Where the engine reads the time: injected, so tests drive leases and deadlines."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def __init__(self) -> None:
        # The second last stamped and its text up to the seconds, as one tuple:
        # replaced whole, so a thread never reads one second with another's text.
        self._second: tuple[int, str] = (-1, "")

    def now(self) -> datetime:
        return datetime.now(UTC)

    def iso_now(self) -> str:
        """`now().isoformat()` at well under half its cost: an event's timestamp on
        the engine's hot path (several per commit point) is text, and the date
        and time of day change once a second."""
        second, micro = divmod(time.time_ns() // 1000, 1_000_000)
        cached = self._second
        if cached[0] != second:
            cached = (second, datetime.fromtimestamp(second, UTC).isoformat()[:19])
            self._second = cached
        # As isoformat: the fraction only when there is one.
        return f"{cached[1]}.{micro:06d}+00:00" if micro else f"{cached[1]}+00:00"


def iso_stamp(now: Callable[[], datetime]) -> Callable[[], str]:
    """A function answering `now().isoformat()`: the system clock's own cheaper one
    when `now` is a system clock's, and any other clock (a test's) read as it is."""
    clock = getattr(now, "__self__", None)
    if isinstance(clock, SystemClock):
        return clock.iso_now
    return lambda: now().isoformat()
