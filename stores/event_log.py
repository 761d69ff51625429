"""A run's durable event log, as every store reads it.

The engine's lifecycle events ride in the checkpoint that follows them (the
checkpoint's append-only `events` list, stored as deltas like the transcript),
so the log costs no durable write of its own: it commits with the checkpoint,
or with the suspension or end that carries the run's last checkpoint, in the
same transaction, or not at all. An event's cursor is its position in that
list, from 1: gapless and monotonic across attempts, because an attempt
resumes from the last committed checkpoint and appends after its events.

An entry is the engine's event as JSON without its `run_id` (every entry is
the run's own, so it is added on reading: ~45 bytes an event not stored), and
without an `id` unless a sink heard the event under one: the log names its
own entries by run and cursor on reading (`event_id`). A
store reads the log by folding only the events of its checkpoint bodies
(`deltas.folded_events`); this module pages what the fold returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from stores.deltas import DeltaFormatError, folded_events
from stores.records import RunEvent

# The most events one `load_events` call returns, whatever it is asked.
MAX_EVENTS_PAGE = 1000


def check_page(after: int, limit: int) -> None:
    """Refuse a page no store can answer (a negative cursor, a limit out of 1..max)."""
    if after < 0:
        raise ValueError(f"events after cursor {after}: a cursor is 0 or more")
    if not 0 < limit <= MAX_EVENTS_PAGE:
        raise ValueError(f"events limit {limit}: expected 1..{MAX_EVENTS_PAGE}")


def event_id(run_id: str, cursor: int) -> str:
    """The id of a logged event stored without one: 32 hex digits, as the engine's
    ids, the same at every reading (a log's cursors never change) and unique
    among every run's events."""
    return hashlib.sha256(f"{run_id}\x00{cursor}".encode()).hexdigest()[:32]


def page_of(entries: list[Any], *, run_id: str, after: int, limit: int) -> list[RunEvent]:
    """The log entries after cursor `after`, at most `limit`, as records."""
    page = []
    for cursor, entry in enumerate(entries[after:after + limit], start=after + 1):
        if not isinstance(entry, dict):
            raise DeltaFormatError(f"event {cursor} of run {run_id!r} is not an object")
        event = RunEvent.model_validate({"run_id": run_id, "id": event_id(run_id, cursor),
                                         **entry, "cursor": cursor})
        if event.run_id != run_id:
            raise DeltaFormatError(f"event {cursor} of run {run_id!r} names run "
                                   f"{event.run_id!r}")
        page.append(event)
    return page


def events_fold(run_id: str, after: int,
                limit: int) -> Callable[[Iterable[str | bytes]], list[RunEvent]]:
    """A fold of a run's checkpoint bodies into the page of its log after `after`, for a
    store's own fold (which turns a decode failure into `CorruptRecord`)."""
    return lambda bodies: page_of(folded_events(bodies), run_id=run_id, after=after,
                                  limit=limit)
