"""The scheduled reconciler: docs/design.md section 7 on Step Functions.

Each invocation (an EventBridge schedule) is one pass of
`agent_runtime.reconcile.Reconciler` over the run store: `running` runs whose
lease expired and `created` runs queued too long (the `by-status-shard` GSI, no
scan). The previous owner of a running run is its execution; it is alive
while Step Functions says RUNNING (`ExecutionLiveness`) and the run is then
left alone. A run whose execution ended (failed, timed out, aborted, or
succeeded without finishing the run) is taken over by starting the next
attempt's execution, which reserves with `takeover` (`StartExecution`); a run
taken over `max_takeovers` times is suspended as `crash-loop` (never
failed: an operator resumes it after a fix), with the last execution's end
(status and error name) in the suspension's details. The pass
also works the resume outbox: `suspended` runs whose resume request is older
than `AGENT_RUNTIME_RESUME_GRACE_SECONDS` (the start function failed, the
event was lost, the resume execution failed before it reserved) and `sub-run` parents
whose child finished are resumed by starting their next attempt's execution,
as the start function does (`ReconcileResumedRequested` counts them).
A run suspended as `crash-loop` is announced with a run-finished event. A pass
takes no new run once the function has less than `PASS_MARGIN_SECONDS` left
(the Lambda context's remaining time), so it never runs into its timeout;
the next pass picks up what it left.

What a pass reads follows what is due: the store's status index holds a
suspended run's resume request as its due time, and a sub-run's end files one
on its parent, so runs waiting on a human or a child are never read.
Resumes come before new starts, and the capacity slots are read once per
pass (`CapacitySlots.room`): a pass lists no more suspended or queued runs
than there are slots free, so a backlog costs it nothing run by run.

Invoked with `{"resumeCrashLooped": true}` (an operator, once the cause is
fixed), it resumes every run suspended as `crash-loop` instead of a pass:
each resume request is filed, then its next attempt started as above (one
refused for capacity is started by a later pass); `deferred` set in the
answer means it ran out of time: invoke it again.

Parents suspended on a child that ended before this release filed requests
are found by a one-time sweep that reads every suspended run: invoke the
function once after the upgrade with `{"sweepSubRunParents": true}`, and
again with `"sweepAfter"` set to the answer's `sweep.after` until
`sweep.complete` (a sweep stops, as a pass does, before the function's
timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from agent_runtime.reconcile import (
    CHILD_FINISHED,
    RESUME_REQUESTED,
    Action,
    Reconciler,
    ReconcileSummary,
)
from agent_runtime.startup_heap import freeze_startup_heap
from functions import environment
from functions.capacity import slots_of
from functions.reconciler.executions import ExecutionLiveness, StartExecution
from functions.run_events import announce_record_finished
from functions.telemetry import LogEventSink, count, logger
from stores.records import RunRecord

_METRICS = {Action.RESUMED: "ReconcileResumed", Action.SKIPPED: "ReconcileSkipped",
            Action.SUSPENDED_RUN: "ReconcileSuspendedRun", Action.ERROR: "ReconcileError"}
OUTBOX_REASONS = frozenset({RESUME_REQUESTED, CHILD_FINISHED})
# Time a pass keeps in hand: the run in progress (a Step Functions call or two,
# a store write) and the summary finish well inside it.
PASS_MARGIN_SECONDS = 10


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    services = environment.services()
    settings = services.settings
    stepfunctions = services.stepfunctions
    slots = slots_of(services)
    reconciler = _TimedReconciler(
        context, services.store,
        resume=StartExecution(stepfunctions, settings.require_state_machine(), services.store,
                              slots=slots, clock=services.clock),
        liveness=ExecutionLiveness(stepfunctions), max_takeovers=settings.max_takeovers,
        queued_seconds=settings.queued_seconds,
        resume_grace=settings.resume_grace_seconds, event_sinks=[LogEventSink()],
        clock=services.clock, room=lambda: slots.room(services.clock.now()),
        sweep_sub_run_parents=False)
    if event.get("resumeCrashLooped") is True:  # an operator's, after a fix
        summary = asyncio.run(reconciler.resume_crash_looped())
        count("ReconcileResumedCrashLooped", summary.count(Action.RESUMED))
        return {"reconcile_id": summary.reconcile_id, "counts": summary.counts(),
                "deferred": summary.deferred,
                "resumed": [outcome.run_id for outcome in summary.outcomes
                            if outcome.action is Action.RESUMED]}
    swept = None
    if event.get("sweepSubRunParents") is True:
        after = event.get("sweepAfter")
        swept = reconciler.sweep_sub_run_parents(after=after if isinstance(after, str) else None)
    summary = asyncio.run(reconciler.reconcile())
    for action, metric in _METRICS.items():
        count(metric, summary.count(action))
    count("ReconcileResumedRequested", _resumed_from_outbox(summary))
    for outcome in summary.outcomes:
        if outcome.action is Action.SUSPENDED_RUN:  # crash-loop: clients hear of it too
            announce_record_finished(services.events, services.store, outcome.run_id,
                                     bus=settings.event_bus)
    answer: dict[str, Any] = {"reconcile_id": summary.reconcile_id,
                              "counts": summary.counts(), "cut_short": reconciler.cut_short,
                              "deferred": summary.deferred}
    if swept is not None:  # not complete: invoke again with `"sweepAfter": after`
        answer["sweep"] = {"filed": len(swept.filed), "complete": swept.complete,
                           "after": swept.after}
    return answer


class _TimedReconciler(Reconciler):
    """A pass that takes no new run once the Lambda has less than `PASS_MARGIN_SECONDS`
    left, so it ends before its own timeout (the next pass goes on: each run it left
    is still a candidate then)."""

    def __init__(self, context: LambdaContext, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._context = context
        self.cut_short = False

    def time_left(self) -> bool:
        return self._context.get_remaining_time_in_millis() >= PASS_MARGIN_SECONDS * 1000

    def candidates(self) -> Iterable[RunRecord]:
        for run in super().candidates():
            if not self.time_left():
                self.cut_short = True
                count("ReconcilePassCutShort")
                logger.warning("reconcile pass stopped before the function's timeout; the "
                               "next pass continues", extra={"next_run_id": run.run_id})
                return
            yield run


def _resumed_from_outbox(summary: ReconcileSummary) -> int:
    return sum(outcome.action is Action.RESUMED and outcome.reason in OUTBOX_REASONS
               for outcome in summary.outcomes)


# Imported: what this container built while starting lives as long as it does.
freeze_startup_heap()
