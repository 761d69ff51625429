"""The HTTP API's `Launcher` on AWS: a stored request plus a resume-requested event.

A run is executed by the state machine, started by the start function on a
`resume-requested` event (functions/resume_requests.py). What makes a start
or a resume durable is the store: a new run is stored `created`, and a resume
is recorded with `request_resume` (the outbox the reconciler reads) before
the event is put. The event is the fast path. When EventBridge refuses it or
cannot be reached, the request stays recorded and the reconciler starts the
run (docs/design.md section 7: `created` runs queued too long, `suspended` runs whose
resume was requested), so the client's request succeeded and gets no 5xx;
the failure is logged and counted (`ResumeEventFailed`).

A resume's new token limit travels in the event only (`max_total_tokens`):
the store's resume request has no budget, so a resume the reconciler picks up
instead runs on the run's persisted limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from agent_runtime import Clock
from functions.resume_requests import RUN_CREATED, ResumeRequested, request_resume
from functions.telemetry import count, logger
from stores.base import InvalidTransition, RunStore, RunTerminal
from stores.records import Budget, RunRecord

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient


class AwsLauncher:
    """Starts and resumes runs through the stack's event bus (`AGENT_RUNTIME_EVENT_BUS`)."""

    def __init__(self, store: RunStore, events: EventBridgeClient, *, bus: str,
                 clock: Clock) -> None:
        self.store = store
        self.events = events
        self.bus = bus
        self.clock = clock

    def start(self, run: RunRecord) -> None:
        count("RunStartRequested")
        self._put(ResumeRequested(run_id=run.run_id, attempt=run.attempt, reason=RUN_CREATED))

    def resume(self, run: RunRecord, *, reason: str, budget: Budget | None = None) -> None:
        try:
            self.store.request_resume(run.run_id, at=self.clock.now(), reason=reason)
        except (InvalidTransition, RunTerminal) as moved_on:
            # Not suspended any more (resumed by someone else, finished,
            # cancelled): there is nothing to resume, and no event to send.
            count("ResumeNotRequested")
            logger.info("resume not requested: the run moved on", extra={
                "run_id": run.run_id, "reason": reason, "why": type(moved_on).__name__})
            return
        count("RunResumeRequested")
        limit = None if budget is None else budget.max_total_tokens
        self._put(ResumeRequested(run_id=run.run_id, attempt=run.attempt, reason=reason,
                                  max_total_tokens=limit))

    def _put(self, request: ResumeRequested) -> None:
        try:
            request_resume(self.events, request, bus=self.bus)
        except (BotoCoreError, ClientError, RuntimeError) as error:
            # Recorded in the store already: the reconciler starts it instead.
            count("ResumeEventFailed")
            logger.warning("resume-requested event not sent; the reconciler will start the run",
                           extra={"run_id": request.run_id, "attempt": request.attempt,
                                  "reason": request.reason, "error": type(error).__name__})
