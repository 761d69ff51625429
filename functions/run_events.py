"""The `run-finished` event: what a stack tells its clients when a run stops.

    {"source": "agent-runtime", "detail-type": "run-finished",
     "detail": {"run_id": "run_...", "attempt": 2, "status": "suspended",
                "reason": "approval", "tenant": "..."}}

Put on the stack's own bus by the Advance function when an attempt ends the
run `completed`, `failed` or `cancelled`, or `suspended` it; by the reconciler
when it suspends a run as `crash-loop`; by the HTTP API when a client cancels one.
`reason` is the suspension's reason (`approval`, `sub-run`, `token-budget`, ...) or a failure's
error type; `tenant` is the run's, when it has one. Ids, status and codes
only: a client reads the output (or the error) from the store or the HTTP API.
A client subscribes with a rule on the bus matching `source` and
`detail-type` (and, say, `detail.status`).

Publishing is best effort: the run's state is already committed, so a refused
or failed PutEvents is logged and counted (`RunFinishedEventFailed`) and never
fails the step.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from functions.resume_requests import SOURCE
from functions.telemetry import count, logger

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient

    from agent_runtime import RunResult
    from stores.base import RunStore

DETAIL_TYPE = "run-finished"
FINISHED_STATUSES = frozenset({"completed", "failed", "cancelled", "suspended"})


class RunFinished(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run_id: str = Field(min_length=1)
    attempt: int = Field(ge=0)
    status: str
    reason: str | None = None
    tenant: str | None = None


def announce_run_finished(events: EventBridgeClient, store: RunStore, result: RunResult, *,
                          bus: str) -> bool:
    """Put the run-finished event of an attempt that ended as `result` says on `bus`.

    True when it was put; False when `result` is no end (a run still running,
    or taken by another attempt) or the event could not be put (logged and
    counted: never raised).
    """
    if result.status.value not in FINISHED_STATUSES:
        return False
    try:
        record = store.load_run(result.run_id)
        reason = (result.suspension or {}).get("reason") if result.error is None \
            else result.error.get("type")
        finished = RunFinished(run_id=result.run_id, attempt=result.attempt,
                               status=result.status.value,
                               reason=None if reason is None else str(reason),
                               tenant=None if record is None else record.tenant)
    except Exception as error:  # the event is a courtesy: the run's state is committed
        return _failed(result.status.value, type(error).__name__)
    return _put(events, finished, bus=bus)


def announce_record_finished(events: EventBridgeClient, store: RunStore, run_id: str, *,
                             bus: str) -> bool:
    """Put the run-finished event of the run `run_id` as the store has it now (a run
    another path than Advance ended: failed by the reconciler, cancelled through
    the API). False when it has not finished, or the event could not be put."""
    try:
        record = store.load_run(run_id)
        if record is None or record.status.value not in FINISHED_STATUSES:
            return False
        reason = record.error.type if record.error is not None else (
            None if record.suspension is None else record.suspension.reason)
        finished = RunFinished(run_id=run_id, attempt=record.attempt,
                               status=record.status.value, reason=reason, tenant=record.tenant)
    except Exception as error:  # the event is a courtesy: the run's state is committed
        return _failed("unknown", type(error).__name__)
    return _put(events, finished, bus=bus)


def _put(events: EventBridgeClient, finished: RunFinished, *, bus: str) -> bool:
    try:
        answer = events.put_events(Entries=[{
            "Source": SOURCE, "DetailType": DETAIL_TYPE, "EventBusName": bus,
            "Detail": json.dumps(finished.model_dump(exclude_none=True), sort_keys=True)}])
        failure = (str(answer["Entries"][0].get("ErrorCode"))
                   if answer.get("FailedEntryCount") else None)
    except Exception as error:  # the event is a courtesy: the run's state is committed
        failure = type(error).__name__
    if failure is not None:
        return _failed(finished.status, failure)
    count("RunFinishedEventPut")
    return True


def _failed(status: str, failure: str) -> bool:
    count("RunFinishedEventFailed")
    logger.warning("run-finished event not put", extra={"run_status": status, "error": failure})
    return False
