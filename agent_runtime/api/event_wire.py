"""The events route's wire models (`GET /runs/{runId}/events`): what a page of a run's
event log looks like over HTTP, camelCase as every answer. Apart from the route
(`run_events`), so the Python client reads them without loading the web framework."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field
from stores.records import RunEvent, RunStatus

from agent_runtime.api.wire import WireModel, camel_keys


class EventView(WireModel):
    """One event of a run's log (camelCase; `data` holds ids, timings, counts, codes)."""

    cursor: int = Field(description="The event's place in the run's log, from 1: ask for "
                                    "`after` it to continue")
    id: str
    run_id: str
    attempt: int
    sequence: int = Field(description="The event's number within its attempt")
    timestamp: datetime
    type: str = Field(description="run.*, step.*, model.*, approval.*, checkpoint.saved, ...")
    step_id: str | None = None
    step_path: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class EventPage(WireModel):
    """A page of a run's event log."""

    events: list[EventView]
    cursor: int = Field(description="The last event's cursor (the `after` asked, when the "
                                    "page is empty): the next page's `after`")
    status: RunStatus = Field(description="The run's status when the page was read: once it "
                                          "is terminal and a page is empty, the log is whole")


def event_view(event: RunEvent) -> EventView:
    return EventView(cursor=event.cursor, id=event.id, run_id=event.run_id,
                     attempt=event.attempt, sequence=event.sequence, timestamp=event.timestamp,
                     type=event.type, step_id=event.step_id, step_path=event.step_path,
                     data=camel_keys(event.data))
