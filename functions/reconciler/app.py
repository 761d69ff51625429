"""The scheduled reconciler: DESIGN section 7 on Step Functions.

Each invocation (an EventBridge schedule) is one pass of
`agent_runtime.reconcile.Reconciler` over the run store: `running` runs whose
lease expired and `created` runs queued too long (the `by-status` GSI, no
scan). The previous owner of a running run is its execution; it is alive
while Step Functions says RUNNING (`ExecutionLiveness`) and the run is then
left alone. A run whose execution ended (failed, timed out, aborted, or
succeeded without finishing the run) is taken over by starting the next
attempt's execution, which reserves with `takeover` (`StartExecution`); a run
taken over `max_takeovers` times is failed as `crash_loop`, with the last
execution's end (status and error name) recorded in the error. The pass
also works the resume outbox: `suspended` runs whose resume request is older
than `AGENT_RUNTIME_RESUME_GRACE_SECONDS` (the start function failed, the
event was lost, the resume execution's Reserve failed) and `sub-run` parents
whose child finished are resumed by starting their next attempt's execution,
as the start function does (`ReconcileResumedRequested` counts them).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agent_runtime.reconcile import (
    CHILD_FINISHED,
    RESUME_REQUESTED,
    Action,
    Reconciler,
    ReconcileSummary,
)
from functions import environment
from functions.executions import ExecutionLiveness, StartExecution
from functions.telemetry import LogEventSink, count, logger

_METRICS = {Action.RESUMED: "ReconcileResumed", Action.SKIPPED: "ReconcileSkipped",
            Action.FAILED_RUN: "ReconcileFailedRun", Action.ERROR: "ReconcileError"}
OUTBOX_REASONS = frozenset({RESUME_REQUESTED, CHILD_FINISHED})


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    services = environment.services()
    settings = services.settings
    stepfunctions = services.stepfunctions
    reconciler = Reconciler(
        services.store,
        resume=StartExecution(stepfunctions, settings.require_state_machine(), services.store,
                              max_concurrent_runs=settings.max_concurrent_runs),
        liveness=ExecutionLiveness(stepfunctions), max_takeovers=settings.max_takeovers,
        queued_seconds=settings.queued_seconds,
        resume_grace=settings.resume_grace_seconds, event_sinks=[LogEventSink()],
        clock=services.clock)
    summary = asyncio.run(reconciler.reconcile())
    for action, metric in _METRICS.items():
        count(metric, summary.count(action))
    count("ReconcileResumedRequested", _resumed_from_outbox(summary))
    return {"reconcile_id": summary.reconcile_id, "counts": summary.counts()}


def _resumed_from_outbox(summary: ReconcileSummary) -> int:
    return sum(outcome.action is Action.RESUMED and outcome.reason in OUTBOX_REASONS
               for outcome in summary.outcomes)
