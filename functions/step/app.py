"""The run state machine's tasks, and the function that starts its executions.

    reserve  Reserve task: a new attempt of the run, leased to this execution
    advance  Advance task: run the attempt until the Lambda's time runs low
    start    target of the resume-requested rule: start the next attempt's execution

Between states travel only `{run_id, attempt, status}` (statemachine/run.asl.json).
A new token limit asked for with a resume (`max_total_tokens` in the
resume-requested event) goes into the execution's input, and the state machine
gives it to every Advance of that attempt.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field

from functions import environment
from functions.capacity import slots_of
from functions.executions import start_attempt
from functions.resume_requests import SUB_RUN_FINISHED, ResumeRequested, request_resume
from functions.run_events import FINISHED_STATUSES, announce_run_finished
from functions.telemetry import LogEventSink, count, logger
from stores.base import (
    InvalidTransition,
    LeaseHeld,
    RunNotFound,
    RunTerminal,
    StaleAttempt,
    StoreError,
)
from stores.dynamodb import slices
from stores.records import Budget, RunRecord, RunStatus

if TYPE_CHECKING:
    # Only Advance builds a runtime (functions.environment loads the engine then):
    # Reserve and the start function start without it.
    from agent_runtime.engine import AgentRuntime
    from agent_runtime.results import RunResult

CONTINUE = "continue"
SUPERSEDED = "superseded"
RESERVED = "reserved"
SKIPPED = "skipped"
HELD = "held"
QUEUED = "queued"

_ADVANCE_METRICS = {CONTINUE: "AdvanceContinued", "suspended": "RunSuspended",
                    "completed": "RunCompleted", "failed": "RunFailed",
                    "cancelled": "RunCancelled", SUPERSEDED: "AdvanceSuperseded",
                    HELD: "AdvanceHeld"}


class AdvanceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1)
    attempt: int = Field(ge=1)
    # The execution driving the attempt: the owner of the sub-runs it starts.
    execution_arn: str = Field(min_length=1)


class ReserveRequest(AdvanceRequest):
    takeover: bool = False


class AdvanceSlice(AdvanceRequest):
    # A new token limit for this attempt (from the resume that started it);
    # None keeps the run's. The same on every slice, so applying it again is a no-op.
    max_total_tokens: int | None = Field(default=None, ge=0)


def _result(run_id: str, attempt: int, status: str) -> dict[str, Any]:
    return {"run_id": run_id, "attempt": attempt, "status": status}


@logger.inject_lambda_context(clear_state=True)
def reserve(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Reserve the attempt for this execution: `resume_run(owner=<execution ARN>)`.

    `takeover` (set only by the reconciler, after Step Functions confirmed the
    previous owner's execution ended) allows taking over a running run whose
    lease expired. A Reserve retried after it succeeded finds the run leased
    to its own execution and reports it reserved again.
    """
    request = ReserveRequest.model_validate(event)
    logger.append_keys(run_id=request.run_id, attempt=request.attempt)
    services = environment.services()
    store = services.store
    try:
        record = store.resume_run(request.run_id, owner=request.execution_arn,
                                  now=services.clock.now(),
                                  lease_seconds=services.settings.lease_seconds,
                                  allow_running_takeover=request.takeover)
    except LeaseHeld as held:
        current = store.load_run(request.run_id)
        if current is None or current.status is not RunStatus.RUNNING \
                or slices.execution_of(current.lease_owner or "") != request.execution_arn:
            return _skipped(request, current, type(held).__name__)
        record = current
    except (RunNotFound, RunTerminal, InvalidTransition) as refusal:
        return _skipped(request, store.load_run(request.run_id), type(refusal).__name__)
    if record.attempt != request.attempt:
        # Another executor (a local `resume`) took attempts in between: the
        # store's attempt is the fence, the name only deduplicated the start.
        logger.warning("reserved another attempt than the execution's name says",
                       extra={"reserved_attempt": record.attempt})
    count("RunReserved")
    logger.info("run reserved", extra={"reserved_attempt": record.attempt,
                                       "takeover": request.takeover,
                                       "takeovers": record.takeovers})
    return _result(record.run_id, record.attempt, RESERVED)


def _skipped(request: ReserveRequest, current: RunRecord | None, why: str) -> dict[str, Any]:
    # The execution ends without an attempt: the capacity slot its starter took
    # for it is free again (functions/capacity.py).
    slots_of(environment.services()).release(request.run_id, request.attempt)
    count("ReserveSkipped")
    logger.info("run not reserved", extra={
        "reason": why, "run_status": None if current is None else current.status.value,
        "run_attempt": None if current is None else current.attempt})
    return _result(request.run_id, request.attempt if current is None else current.attempt,
                   SKIPPED)


@logger.inject_lambda_context(clear_state=True)
def advance(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run the reserved attempt until a suspension, the end, or a commit point past the
    deadline — the Lambda's remaining time less the margin — and report which.

    `continue` loops the state machine back here; `suspended`, `completed`,
    `failed`, `cancelled` end the execution, and so does `superseded` (a newer
    attempt owns the run). Sub-runs it starts are leased to this execution, so
    the reconciler judges them by it too.
    """
    request = AdvanceSlice.model_validate(event)
    logger.append_keys(run_id=request.run_id, attempt=request.attempt)
    services = environment.services()
    remaining = timedelta(milliseconds=context.get_remaining_time_in_millis())
    deadline = (services.clock.now() + remaining
                - timedelta(seconds=services.settings.advance_margin_seconds))
    owner = slices.slice_owner(request.execution_arn, context.aws_request_id)
    refused = _claim(services, request, owner)
    if refused is not None:
        if refused == SUPERSEDED:
            _free_slot(services, request)
        count(_ADVANCE_METRICS[refused])
        logger.info("advance ended", extra={"status": refused})
        return _result(request.run_id, request.attempt, refused)
    runtime = services.runtime([LogEventSink()], owner=request.execution_arn,
                               store=services.store.owned_by(request.run_id, owner))
    result = _run_slice(_advance(runtime, request, deadline))
    status = _step_status(result, request.attempt)
    if status == CONTINUE:
        _release(services, request, owner)
    else:
        _free_slot(services, request)
    count(_ADVANCE_METRICS[status])
    logger.info("advance ended", extra={"status": status, "usage": result.usage,
                                        "error_type": (result.error or {}).get("type")})
    if status in FINISHED_STATUSES:
        announce_run_finished(services.events, services.store, result,
                              bus=services.settings.event_bus)
    if result.status.terminal:
        _resume_parent(services, request.run_id)
    return _result(request.run_id, request.attempt, status)


def _run_slice(slice_: Coroutine[Any, Any, RunResult]) -> RunResult:
    """`asyncio.run`, except that the loop's worker threads are not waited for: a
    plain-function tool abandoned at the deadline may still be running in one
    (a thread cannot be stopped), and waiting for it would run the Lambda into
    its timeout. Its result is never used: the next slice calls it again."""
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


def _claim(services: environment.Services, request: AdvanceSlice, owner: str) -> str | None:
    """Claim the attempt's lease for this invocation before executing anything
    (stores/dynamodb/slices.py); the status to end with when it cannot, else None.

    `held`: another invocation of this execution (a Lambda retry after a lost
    response) is still advancing the attempt; the state machine waits and
    advances again. `superseded`: another owner holds it, or a sibling
    invocation died holding it (its lease expired): the execution ends and
    the reconciler takes the run over with a new attempt, as after a crash.
    A run that is not running at this attempt any more is left to `advance`
    to report.
    """
    try:
        slices.claim_slice(services.store, request.run_id, expected_attempt=request.attempt,
                           execution=request.execution_arn, owner=owner,
                           now=services.clock.now(),
                           lease_seconds=services.settings.lease_seconds)
    except LeaseHeld as held:
        sibling = slices.execution_of(held.owner or "") == request.execution_arn
        alive = held.expires_at is not None and held.expires_at > services.clock.now()
        logger.info("the attempt's lease is held", extra={"holder": held.owner,
                                                          "expired": not alive})
        # A sibling that let its lease expire died: a crash, for the reconciler.
        return HELD if sibling and alive else SUPERSEDED
    except (RunNotFound, StaleAttempt, RunTerminal, InvalidTransition):
        return None
    return None


def _release(services: environment.Services, request: AdvanceSlice, owner: str) -> None:
    """Hand the lease back to the execution, for its next Advance. Not done (the
    Lambda died, the write failed), the next one waits for the lease to expire."""
    try:
        slices.release_slice(services.store, request.run_id, expected_attempt=request.attempt,
                             owner=owner, now=services.clock.now())
    except StoreError as error:
        logger.warning("the slice's lease was not handed back; the next Advance waits for "
                       "it to expire", extra={"error_type": type(error).__name__})


def _free_slot(services: environment.Services, request: AdvanceSlice) -> None:
    """The attempt ended (suspended, finished, superseded): its capacity slot is free
    for a queued run. Conditional on this attempt holding it, so a slot a takeover
    moved to a newer attempt stays. Not done (the write failed), it frees itself
    once the run's lease has expired (functions/capacity.py)."""
    try:
        slots_of(services).release(request.run_id, request.attempt)
    except (ClientError, BotoCoreError) as error:
        count("CapacitySlotNotReleased")
        logger.warning("the capacity slot was not released; it frees itself after the lease",
                       extra={"error_type": type(error).__name__})


def _advance(runtime: AgentRuntime, request: AdvanceSlice,
             deadline: datetime) -> Coroutine[Any, Any, RunResult]:
    if request.max_total_tokens is None:
        return runtime.advance(request.run_id, deadline=deadline,
                               expected_attempt=request.attempt)
    budget = Budget(max_total_tokens=request.max_total_tokens)
    advance_with: Any = runtime.advance
    if "budget" not in inspect.signature(advance_with).parameters:
        # An engine whose advance takes no budget yet: run on the persisted limit.
        logger.warning("the engine's advance takes no budget: the new limit is not applied",
                       extra={"max_total_tokens": request.max_total_tokens})
        return runtime.advance(request.run_id, deadline=deadline,
                               expected_attempt=request.attempt)
    result: Coroutine[Any, Any, RunResult] = advance_with(
        request.run_id, deadline=deadline, expected_attempt=request.attempt, budget=budget)
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
