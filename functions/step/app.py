"""The run state machine's task, and the function that starts its executions.

    advance  the state machine's one task: run a slice of the attempt until the
             Lambda's time runs low; the first slice reserves the attempt, and a
             slice that stops with the run still running starts the next one's
             execution ("continue as new", docs/design.md section 10)
    start    target of the resume-requested rule: start the next attempt's first slice

Advance gets the execution's input whole (`{run_id, attempt, takeover,
max_total_tokens, slice}`, functions/executions.py) and its ARN, and answers
`{run_id, attempt, status}`, the execution's output. A new token limit asked
for with a resume (`max_total_tokens` in the resume-requested event) goes into
the input of every slice of that attempt.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from agent_runtime.startup_heap import freeze_startup_heap
from functions import environment
from functions.capacity import slots_of
from functions.executions import start_attempt
from functions.resume_requests import SUB_RUN_FINISHED, ResumeRequested, request_resume
from functions.run_events import FINISHED_STATUSES, announce_run_finished
from functions.step.ownership import (
    CONTINUE,
    HELD,
    SKIPPED,
    SUPERSEDED,
    ExecutionInput,
    SliceRequest,
    free_slot,
    hand_over,
    take_attempt,
)
from functions.telemetry import LogEventSink, count, logger
from stores.base import InvalidTransition, RunNotFound
from stores.dynamodb import slices
from stores.records import Budget, RunRecord, RunStatus

if TYPE_CHECKING:
    # Only Advance builds a runtime (functions.environment loads the engine then):
    # the start function, and an Advance that ends before it executes, start without it.
    from agent_runtime.engine import AgentRuntime
    from agent_runtime.results import RunResult

QUEUED = "queued"

_ADVANCE_METRICS = {CONTINUE: "AdvanceContinued", "suspended": "RunSuspended",
                    "completed": "RunCompleted", "failed": "RunFailed",
                    "cancelled": "RunCancelled", SUPERSEDED: "AdvanceSuperseded",
                    HELD: "AdvanceHeld", SKIPPED: "ReserveSkipped"}


def _result(run_id: str, attempt: int, status: str) -> dict[str, Any]:
    return {"run_id": run_id, "attempt": attempt, "status": status}


@logger.inject_lambda_context(clear_state=True)
def advance(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run one slice of the attempt: until a suspension, the end, or a commit point
    past the deadline — the Lambda's remaining time less the margin — and report
    which. Every status ends the execution.

    Before it executes, the slice holds the attempt (`take_attempt`: a first
    slice reserves it); it may end there instead: `skipped` (nothing to
    reserve), `held` (a live sibling invocation of this execution has it),
    `superseded` (a later slice, another owner, or a dead slice has it).
    Stopped at the deadline with the run running, it hands the attempt to the
    next slice's execution and starts it (`continue`); `suspended`,
    `completed`, `failed`, `cancelled` and `superseded` (a newer attempt owns
    the run) end the attempt for this chain and free its capacity slot.
    Sub-runs it starts are leased to this execution, so the reconciler
    judges them by it too.
    """
    request = SliceRequest.model_validate(event)
    work = request.input
    logger.append_keys(run_id=work.run_id, attempt=work.attempt, slice=work.slice)
    services = environment.services()
    remaining = timedelta(milliseconds=context.get_remaining_time_in_millis())
    deadline = (services.clock.now() + remaining
                - timedelta(seconds=services.settings.advance_margin_seconds))
    owner = slices.slice_owner(request.execution_arn, context.aws_request_id)
    refused = take_attempt(services, request, owner)
    if refused is not None:
        count(_ADVANCE_METRICS[refused])
        logger.info("advance ended", extra={"status": refused})
        return _result(work.run_id, work.attempt, refused)
    from agent_runtime import telemetry  # noqa: PLC0415 - with the engine, as below

    # OpenTelemetry when the function's OTEL_* environment asks for it (docs/telemetry.md).
    runtime = services.runtime([LogEventSink(), *telemetry.event_sinks()],
                               owner=request.execution_arn,
                               store=services.store.owned_by(work.run_id, owner))
    try:
        result = _run_slice(_advance(runtime, work, deadline))
    finally:
        # The container may freeze once this returns: export the slice's spans now.
        telemetry.flush(end_open=True)
    status = _step_status(result, work.attempt)
    if status == CONTINUE:
        status = hand_over(services, request, owner)
    else:
        free_slot(services, work.run_id, work.attempt)
    count(_ADVANCE_METRICS[status])
    logger.info("advance ended", extra={"status": status, "usage": result.usage,
                                        "error_type": (result.error or {}).get("type")})
    # Only the invocation that ran the run to its end tells of it: a duplicate
    # that found it ended (executed nothing) would tell it twice.
    if status in FINISHED_STATUSES and result.executed:
        announce_run_finished(services.events, services.store, result,
                              bus=services.settings.event_bus)
    if result.status.terminal and result.executed:
        _resume_parent(services, work.run_id)
    return _result(work.run_id, work.attempt, status)


def _run_slice(slice_: Coroutine[Any, Any, RunResult]) -> RunResult:
    """`asyncio.run`, except that the loop's worker threads are not waited for: a
    plain-function tool abandoned at the deadline may still be running in one
    (a thread cannot be stopped), and waiting for it would run the Lambda into
    its timeout. Its result is never used: the next slice calls it again."""
    import asyncio  # noqa: PLC0415 - with the engine: the start function runs no loop

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(slice_)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # shuts the default executor down without waiting


def _advance(runtime: AgentRuntime, work: ExecutionInput,
             deadline: datetime) -> Coroutine[Any, Any, RunResult]:
    if work.max_total_tokens is None:
        return runtime.advance(work.run_id, deadline=deadline,
                               expected_attempt=work.attempt)
    budget = Budget(max_total_tokens=work.max_total_tokens)
    advance_with: Any = runtime.advance
    if "budget" not in inspect.signature(advance_with).parameters:
        # An engine whose advance takes no budget yet: run on the persisted limit.
        logger.warning("the engine's advance takes no budget: the new limit is not applied",
                       extra={"max_total_tokens": work.max_total_tokens})
        return runtime.advance(work.run_id, deadline=deadline,
                               expected_attempt=work.attempt)
    result: Coroutine[Any, Any, RunResult] = advance_with(
        work.run_id, deadline=deadline, expected_attempt=work.attempt, budget=budget)
    return result


def _step_status(result: RunResult, attempt: int) -> str:
    if result.attempt != attempt:
        return SUPERSEDED
    if result.status is RunStatus.RUNNING:
        # The deadline stopped it at a commit point; with an error, it lost the run.
        return CONTINUE if result.error is None else SUPERSEDED
    if result.status is RunStatus.CREATED:
        return SUPERSEDED
    return result.status.value


def _resume_parent(services: environment.Services, run_id: str) -> None:
    """A finished sub-run resumes the parent suspended on it.

    The request goes into the store first (the outbox the reconciler reads),
    then a resume-requested event, the fast path. A refused event is logged,
    not raised: the stored request has the reconciler resume the parent.
    """
    store = services.store
    record = store.load_run(run_id)
    if record is None or record.parent is None:
        return
    parent = store.load_run(record.parent.run_id)
    if parent is None or parent.status is not RunStatus.SUSPENDED or parent.suspension is None \
            or parent.suspension.reason != "sub-run" \
            or parent.suspension.details.get("child_run_id") != run_id:
        return
    try:
        store.request_resume(parent.run_id, at=services.clock.now(), reason=SUB_RUN_FINISHED)
    except (RunNotFound, InvalidTransition):
        return  # the parent moved on (resumed, cancelled) since it was read
    try:
        request_resume(services.events, ResumeRequested(
            run_id=parent.run_id, attempt=parent.attempt, reason=SUB_RUN_FINISHED,
            child_run_id=run_id), bus=services.settings.event_bus)
    except (ClientError, BotoCoreError, RuntimeError) as error:
        count("ParentResumeEventFailed")
        logger.warning("the parent's resume-requested event was not sent; the reconciler "
                       "resumes it from the stored request",
                       extra={"parent_run_id": parent.run_id,
                              "error_type": type(error).__name__})
        return
    count("ParentResumeRequested")


@logger.inject_lambda_context(clear_state=True)
def start(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Start the execution of the attempt a resume-requested event asks for.

    The event names the attempt the run is at; the execution reserves the
    next one and is named after it, so a repeated event starts nothing new.
    A request for a run that has moved on (another attempt, running, or
    finished) is skipped; one that gets no capacity slot (`MaxConcurrentRuns`
    attempts execute) is left queued for the reconciler (functions/capacity.py).
    """
    request = ResumeRequested.model_validate(event.get("detail"))
    logger.append_keys(run_id=request.run_id, attempt=request.attempt)
    services = environment.services()
    attempt = request.attempt + 1
    run = services.store.load_run(request.run_id)
    stale = _why_not_startable(run, request)
    if stale is not None:
        count("StartSkipped")
        logger.info("resume request skipped", extra={"reason": request.reason, "why": stale})
        return {"run_id": request.run_id, "attempt": attempt, "status": SKIPPED}
    slots = slots_of(services)
    full = slots.admit(request.run_id, attempt, now=services.clock.now())
    if full is not None:
        # Not failed, not lost: the run stays created (or its resume request stays
        # in the outbox) and the reconciler starts it once capacity frees.
        count("StartQueued")
        logger.info("left queued for capacity", extra={"reason": request.reason, "why": full})
        return {"run_id": request.run_id, "attempt": attempt, "status": QUEUED}
    try:
        started = start_attempt(services.stepfunctions,
                                services.settings.require_state_machine(), services.store,
                                request.run_id, attempt, takeover=False,
                                max_total_tokens=request.max_total_tokens)
    except BaseException:
        slots.release(request.run_id, attempt)  # not started: the slot is not used
        raise
    count("ExecutionStarted" if started.new else "StartDuplicate")
    logger.info("execution started" if started.new else "execution already started",
                extra={"reason": request.reason, "execution": started.name})
    return {"run_id": request.run_id, "attempt": attempt,
            "status": "started" if started.new else "duplicate",
            "execution_arn": started.execution_arn}


def _why_not_startable(run: RunRecord | None, request: ResumeRequested) -> str | None:
    if run is None:
        return "no such run"
    if run.attempt != request.attempt:
        return f"the run is at attempt {run.attempt}"
    if run.status not in (RunStatus.CREATED, RunStatus.SUSPENDED):
        return f"the run is {run.status.value}"
    return None


# Imported: what this container built while starting lives as long as it does.
freeze_startup_heap()
