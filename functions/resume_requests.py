"""The `resume-requested` event: what asks for a suspended (or new) run to go on.

    {"source": "agent-runtime", "detail-type": "resume-requested",
     "detail": {"run_id": "run_...", "attempt": 1, "reason": "approval-recorded"}}

`attempt` is the attempt the run is at when the event is sent — the one that
suspended, or 0 for a run created and never started — so the execution it
starts reserves `attempt + 1` and is named after it: a repeated event names
the same execution and starts nothing new. Sent when an approval is recorded
(by whoever records it: the HTTP API, an operator's script), when a sub-run
finishes (the Advance function, for the parent waiting on it), or to start a
run created in the store (`reason: "run-created"`). template.yaml's rule
matches on `source` and `detail-type` and targets the start function.

`max_total_tokens`, when present, is a new token limit for the attempt it
starts (`POST /runs/{runId}/resume {"maxTotalTokens": N}`): the start function
puts it in the execution's input and the state machine hands it to every
Advance of that attempt, which replaces the run's persisted limit with it.
Absent, the run keeps its limit.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient

SOURCE = "agent-runtime"
DETAIL_TYPE = "resume-requested"

APPROVAL_RECORDED = "approval-recorded"
SUB_RUN_FINISHED = "sub-run-finished"
RUN_CREATED = "run-created"


class ResumeRequested(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run_id: str = Field(min_length=1)
    attempt: int = Field(ge=0)
    reason: str = "requested"
    child_run_id: str | None = None
    max_total_tokens: int | None = Field(default=None, ge=0)


def request_resume(events: EventBridgeClient, request: ResumeRequested, *,
                   bus: str = "default") -> None:
    """Put a resume-requested event on `bus`; raises when EventBridge refuses it."""
    answer = events.put_events(Entries=[{
        "Source": SOURCE, "DetailType": DETAIL_TYPE, "EventBusName": bus,
        "Detail": json.dumps(request.model_dump(exclude_none=True), sort_keys=True)}])
    if answer.get("FailedEntryCount"):
        failed = answer["Entries"][0]
        raise RuntimeError(f"EventBridge refused the resume-requested event of run "
                           f"{request.run_id!r}: {failed.get('ErrorCode')} "
                           f"{failed.get('ErrorMessage')}")
