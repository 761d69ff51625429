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
"""

from __future__ import annotations

from stores.base import RunStore
from stores.records import RunStatus


def at_capacity(store: RunStore, limit: int, *, starting: int = 0) -> str | None:
    """Why a new attempt may not start now (the limit is reached), or None.

    `starting`: attempts this caller started that may not be running yet.
    A limit of 0 or less means none.
    """
    if limit <= 0:
        return None
    running = len(store.list_runs(statuses=[RunStatus.RUNNING], limit=limit).runs) + starting
    if running < limit:
        return None
    return f"{running} runs are running or starting; MaxConcurrentRuns is {limit}"
