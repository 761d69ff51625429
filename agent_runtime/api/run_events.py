"""`GET /runs/{runId}/events`: a page of a run's durable event log after a cursor.

The log is the store's (`RunStore.list_events`): lifecycle events with no
content, numbered per run from 1. A client follows a run by asking again with
the last cursor it saw. With `wait`, an empty page is long-polled: the request
watches the run (one `load_run` per poll, the events read only once its
checkpoint seq moved, since events commit only with checkpoints) until an
event commits, the run ends, or `wait` passes. The wait is capped by the host
(`ApiLimits.max_events_wait_seconds`, below API Gateway's 29 s integration
timeout). On AWS the Lambda waits in the request; `serve` waits on its event
loop instead, asking this route with `wait=0` at each poll
(`agent_runtime.api.event_stream`), so no worker thread is held meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from stores.base import RunStore
from stores.records import RunRecord

from agent_runtime.api.event_wire import EventPage, event_view
from agent_runtime.api.problems import ApiProblem


def event_page(store: RunStore, record: RunRecord, *, after: int, limit: int) -> EventPage:
    events = store.list_events(record.run_id, after=after, limit=limit)
    return EventPage(events=[event_view(event) for event in events],
                     cursor=events[-1].cursor if events else after, status=record.status)


def wait_for_events(store: RunStore, record: RunRecord, *, after: int, limit: int,
                    wait: float, poll: float,
                    sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> EventPage:
    """The page after `after`; when it is empty and the run has not ended, polled again
    every `poll` seconds until an event commits or `wait` seconds passed."""
    deadline = clock() + wait
    page = event_page(store, record, after=after, limit=limit)
    seen = record.checkpoint_seq
    while not page.events and not record.status.terminal:
        left = deadline - clock()
        if left <= 0:
            break
        sleep(min(poll, left))
        current = store.load_run(record.run_id)
        if current is None:  # deleted meanwhile (retention)
            raise ApiProblem(404, "no such run")
        record = current
        if record.checkpoint_seq != seen or record.status.terminal:
            seen = record.checkpoint_seq
            page = event_page(store, record, after=after, limit=limit)
        else:
            page = page.model_copy(update={"status": record.status})
    return page
