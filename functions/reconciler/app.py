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
execution's end (status and error name) recorded in the error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agent_runtime.reconcile import Action, Reconciler
from functions import environment
from functions.executions import ExecutionLiveness, StartExecution
from functions.telemetry import LogEventSink, count, logger

_METRICS = {Action.RESUMED: "ReconcileResumed", Action.SKIPPED: "ReconcileSkipped",
            Action.FAILED_RUN: "ReconcileFailedRun", Action.ERROR: "ReconcileError"}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    services = environment.services()
    settings = services.settings
    stepfunctions = services.stepfunctions
    reconciler = Reconciler(
        services.store,
        resume=StartExecution(stepfunctions, settings.require_state_machine(), services.store),
        liveness=ExecutionLiveness(stepfunctions), max_takeovers=settings.max_takeovers,
        queued_seconds=settings.queued_seconds, event_sinks=[LogEventSink()],
        clock=services.clock)
    summary = asyncio.run(reconciler.reconcile())
    for action, metric in _METRICS.items():
        count(metric, summary.count(action))
    return {"reconcile_id": summary.reconcile_id, "counts": summary.counts()}
