"""The `resume-requested` event a caller outside the stack puts on the stack's bus.

    {"source": "agent-runtime", "detail-type": "resume-requested",
     "detail": {"run_id": "run_...", "attempt": 2, "reason": "resumed-by-operator"}}

The same event functions/resume_requests.py defines and the stack's rule
routes to its start function: the execution it starts is named after the
attempt, so a repeated event starts nothing new. An operator's CLI on the
DynamoDB store records the request in the store first (`request_resume`,
the outbox the stack's reconciler reads), then puts this event as the fast
path; an event that cannot be put leaves the request to the reconciler.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from stores import aws_clients
from stores.base import StoreError

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient

SOURCE = "agent-runtime"
DETAIL_TYPE = "resume-requested"
# The stack's bus, as its functions know it (functions/environment.py).
BUS_VARIABLE = "AGENT_RUNTIME_EVENT_BUS"


class ResumeEvents:
    """Puts `resume-requested` events on one bus."""

    def __init__(self, bus: str, client: EventBridgeClient) -> None:
        self.bus = bus
        self.client = client

    def put(self, run_id: str, *, attempt: int, reason: str,
            max_total_tokens: int | None = None) -> None:
        """Put the event; `StoreError` naming the bus when EventBridge refuses it."""
        detail: dict[str, object] = {"run_id": run_id, "attempt": attempt, "reason": reason}
        if max_total_tokens is not None:
            detail["max_total_tokens"] = max_total_tokens
        try:
            answer = self.client.put_events(Entries=[{
                "Source": SOURCE, "DetailType": DETAIL_TYPE, "EventBusName": self.bus,
                "Detail": json.dumps(detail, sort_keys=True)}])
        except (BotoCoreError, ClientError) as error:
            raise StoreError(f"event bus {self.bus!r}: {error}") from None
        if answer.get("FailedEntryCount"):
            failed = answer["Entries"][0]
            raise StoreError(f"event bus {self.bus!r} refused the event: "
                             f"{failed.get('ErrorCode')} {failed.get('ErrorMessage')}")


def resume_events(bus: str | None, *, region: str | None = None,
                  endpoint_url: str | None = None) -> ResumeEvents | None:
    """Events for `bus`, else for `AGENT_RUNTIME_EVENT_BUS`; None when neither names one."""
    name = bus or os.environ.get(BUS_VARIABLE)
    if not name:
        return None
    return ResumeEvents(name, aws_clients.client_in(aws_clients.session(region), "events",
                                                    endpoint_url=endpoint_url))
