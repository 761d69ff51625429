"""Capacity: at most `MaxConcurrentRuns` runs execute at once; the rest wait queued.

The Advance function's reserved concurrency is `MaxConcurrentRuns`, so an
execution started beyond it would be throttled, retried by the state machine,
and in the end fail (and be taken over, and fail again: `crash_loop`). The
starters check first: the start function and the reconciler start the
attempt of a `created` or `suspended` run only while fewer runs are
`running` (the store's status index, at most `MaxConcurrentRuns` items read).
A run refused for capacity is not failed and nothing is lost: a created run
stays `created` and a resume request stays in the store's outbox, and the
reconciler starts them on a later pass once running runs have finished.
Taking over a running run adds none, so it is never refused. Concurrent
starters may overshoot by a few; the state machine's throttling retries
absorb that.

The reconciler reads the count once per pass (`PassCapacity`) and counts the
attempts it starts itself: a backlog of queued runs costs it nothing per run,
and it lists no more of them than there is room for.
"""

from __future__ import annotations

from stores.base import RunStore
from stores.records import RunStatus


def running_count(store: RunStore, limit: int) -> int:
    """How many runs are running, counted up to `limit` (no more is read)."""
    return len(store.list_runs(statuses=[RunStatus.RUNNING], limit=limit).runs)


def at_capacity(store: RunStore, limit: int, *, starting: int = 0) -> str | None:
    """Why a new attempt may not start now (the limit is reached), or None.

    `starting`: attempts this caller started that may not be running yet.
    A limit of 0 or less means none.
    """
    if limit <= 0:
        return None
    return _refusal(running_count(store, limit) + starting, limit)


def _refusal(running: int, limit: int) -> str | None:
    if running < limit:
        return None
    return f"{running} runs are running or starting; MaxConcurrentRuns is {limit}"


class PassCapacity:
    """`MaxConcurrentRuns` for one reconciler pass: the running runs are counted once,
    when first asked, and every attempt the pass starts is added to them."""

    def __init__(self, store: RunStore, limit: int) -> None:
        self.store = store
        self.limit = limit
        self.started = 0
        self._running: int | None = None

    def _counted(self) -> int:
        if self._running is None:
            self._running = running_count(self.store, self.limit)
        return self._running + self.started

    def room(self) -> int | None:
        """How many more attempts may start in this pass (None: no limit)."""
        if self.limit <= 0:
            return None
        return max(0, self.limit - self._counted())

    def refusal(self) -> str | None:
        """Why one more attempt may not start now, or None."""
        return None if self.limit <= 0 else _refusal(self._counted(), self.limit)

    def count_start(self) -> None:
        self.started += 1
